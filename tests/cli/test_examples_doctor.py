"""The shipped examples are clean by their own doctor: ``taskenv preview`` of every task
file under examples/ (the installed command, a process of its own, against the real API
on fakeredis served on a loopback port, as a user runs it) prints no warning.  The
linear-regression example runs in its project ``examples``, whose policy
(examples/linear-regression/policy.json) it sets first, as ``make example`` does.

And the doctor says each finding once: a variable a script reads twice on one line, and
on other lines, is one line of the preview's warnings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests

from tests.api.conftest import ADMIN_TOKEN
from tests.cli.test_malformed_task_files import api, taskenv

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TASK_FILES = sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*")
                    if p.suffix in (".yaml", ".yml", ".json") and p.name != "policy.json")
# What a task file is previewed with besides, as its header says it is submitted.
WITH = {"cli/task.yaml": ("--env-file", str(EXAMPLES / "cli" / ".env"))}
# What a preview prints of a doctor's finding or a warning: none of it for the examples.
WARNED = re.compile(r"^warnings:|\((doctor|rule)\.[a-z_.]+\)$", re.MULTILINE)

__all__ = ["api"]  # the served API, a fixture


@pytest.fixture(scope="module")
def examples_project(api: tuple[str, object]) -> str:
    """The project ``make example`` runs in, with its policy (examples/run_example.py)."""
    base, headers = api[0] + "/api/v1", {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    made = requests.post(f"{base}/projects", json={"name": "examples", "members": ["admin"]},
                         headers=headers, timeout=30)
    assert made.status_code == 201, made.text
    policy = json.loads((EXAMPLES / "linear-regression" / "policy.json").read_text())
    saved = requests.put(f"{base}/projects/examples/policy", json=policy, headers=headers,
                         timeout=30)
    assert saved.status_code == 200, saved.text
    return "examples"


def test_every_task_file_is_found() -> None:
    assert {"linear-regression/task.json", "linear-regression/task-sets-locked.json",
            "distributed/task.yaml", "distributed/task-busybox.yaml", "distributed/ddp.yaml",
            "distributed/ddp-image.yaml", "distributed/torchrun.yaml"} <= set(TASK_FILES)


@pytest.mark.parametrize("name", TASK_FILES)
def test_the_doctor_finds_nothing_to_warn_about_in_a_shipped_example(
        api: tuple[str, object], examples_project: str, tmp_path: Path, name: str) -> None:
    shown = taskenv(api, tmp_path, "preview", str(EXAMPLES / name), *WITH.get(name, ()))
    if '"files"' in (EXAMPLES / name).read_text() or "files:" in (EXAMPLES / name).read_text():
        assert "doctor: read" in shown.stderr, shown.stderr  # it read the example's scripts
    assert not WARNED.search(shown.stderr), shown.stderr
    if name.endswith("task-sets-locked.json"):  # rejected, as it shows: for that alone
        assert shown.returncode == 2, shown.stderr
        assert "CUDA_VISIBLE_DEVICES is protected" in shown.stderr
        assert shown.stderr.count("(policy.protected)") == 1, shown.stderr
    else:
        assert shown.returncode == 0, shown.stderr


def test_a_variable_read_again_is_warned_about_once(api: tuple[str, object],
                                                     tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("import os\nprint(os.environ['X'], os.environ['X'])\n"
                                   "print(os.environ['X'])\n")
    task = tmp_path / "task.yaml"
    task.write_text("name: twice\nfiles: [{path: t.py, source: t.py}]\n"
                    "steps: [[python3, t.py]]\n")
    shown = taskenv(api, tmp_path, "preview", str(task))
    assert shown.returncode == 0, shown.stderr
    found = [line for line in shown.stderr.splitlines() if "reads X" in line or "read X" in line]
    assert found == ["  X: t.py lines 2 and 3 read X, which this task does not set and the "
                     "script gives no default (doctor.script_unset)"], shown.stderr
