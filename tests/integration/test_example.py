"""The example in examples/ runs as the README says, against a real stack."""

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
