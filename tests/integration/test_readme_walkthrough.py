"""The README's curl walk-through, pasted into a shell as a reader would, against a real
stack: the block is read from README.md, so the doc cannot drift from what works."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def walkthrough() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Walk-through with curl"):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_the_walkthrough_pastes_and_its_task_runs_both_scripts(stack: Stack,
                                                                tmp_path: Path) -> None:
    script = walkthrough()
    assert "<id>" not in script
    port = stack.base.rsplit(":", 1)[1]
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "admin.token").write_text(stack.admin_token + "\n")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c",
                           script.replace("127.0.0.1:8080", f"127.0.0.1:{port}")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    task_id = re.search(r"^task ([0-9a-f]{32})$", done.stdout, re.M)
    assert task_id, done.stdout
    out = done.stdout
    assert "the scheduler assigns GPUs" in out  # step 2's preview names the protected one
    assert '"revision":2' in out.replace(" ", "")  # step 5 made revision 2
    doc = stack.wait(task_id.group(1), revision=2)
    assert doc["status"] == "succeeded", doc
    logs = stack.call("GET", f"/api/v1/tasks/{task_id.group(1)}/logs").text
    assert "prepare sees LEARNING_RATE=0.005" in logs
    assert "train sees" in logs and "HF_TOKEN" in logs and "1,2" in logs
    assert "hf_example" not in out + logs
