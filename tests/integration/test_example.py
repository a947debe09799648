"""The example in examples/ against a real stack, where no document's flow takes it.

The README's own order (``make example`` after the walk-through's policy, in a
checkout) is run by the doc runner (tests/docs, its check in tests/docs/checks.py);
here: the example on a platform with no policy of its own, run twice, and the message
when no stack answers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_linear_regression_example_runs_both_scripts_on_the_platform_env(stack: Stack):
    platform = stack.call("GET", "/api/v1/policy").json()
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_example.py")],
        env={"TASKENV_URL": stack.base, "TASKENV_TOKEN": stack.admin_token,
             "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120)

    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES is protected" in out
    assert "the scheduler assigns GPUs to each task" in out
    seen = [line for line in out.splitlines() if "variables in my environment" in line]
    assert len(seen) == 2  # both scripts ran
    for line in seen:
        names = set(line.split(":", 2)[2].split())
        # defaults, the user's variables, the locked value and the platform's identity
        assert {"DATA_DIR", "NUM_SAMPLES", "LEARNING_RATE", "EPOCHS", "NCCL_P2P_DISABLE",
                "TASK_ID", "TASK_NAME", "TASK_ENV_REVISION"} <= names
        # nothing from the worker's own environment (its TASKENV_* settings, for one)
        assert not any(name.startswith("TASKENV_") for name in names)
        assert "CUDA_VISIBLE_DEVICES" not in names
    assert "RUN_NOTE='$(HOME) `id` a;b — 数据 stays literal'" in out
    assert "mse=" in out
    # Its own project's policy: the platform's is as it was.
    assert stack.call("GET", "/api/v1/policy").json() == platform
    assert stack.call("GET", "/api/v1/projects/examples/policy").json()["defaults"]
    again = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_example.py")],
        env={"TASKENV_URL": stack.base, "TASKENV_TOKEN": stack.admin_token,
             "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr  # a second run works too


def run_example(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "examples" / "run_example.py")],
                          env={"PATH": "/usr/bin:/bin", **env}, capture_output=True,
                          text=True, timeout=120)


def test_the_example_names_the_address_it_could_not_reach(stack: Stack):
    result = run_example({"TASKENV_PORT": "9", "TASKENV_TOKEN": stack.admin_token})
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "cannot reach taskenv at http://127.0.0.1:9" in result.stderr
    assert "TASKENV_PORT" in result.stderr
