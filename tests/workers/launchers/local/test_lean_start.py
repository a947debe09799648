"""The local runner starts a task's first step before anything slow: before it imports
Redis, the task store, the policy model or Celery, and before it has reached Redis at all
(docs/launchers.md, "How soon a step starts"; bench/local_start.py measures the time)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from shared.config import Settings
from shared.task.workload import Workload
from workers.launchers.common.run_dir import prepare_home
from workers.launchers.local import spare
from workers.launchers.local.launcher import LocalLauncher, runner_spec

ROOT = Path(__file__).resolve().parents[4]
# What the runner imports only once its first step runs (workers.launchers.local.report).
SLOW = ("redis", "celery", "cryptography", "shared.store.tasks", "shared.policy.model",
        "shared.task.workload", "workers.services", "workers.launchers.local.report")


def test_the_runners_entry_imports_nothing_that_talks_to_redis() -> None:
    probe = ("import json, sys, workers.local_run; "
             f"print(json.dumps([m for m in {SLOW!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=60)
    assert json.loads(done.stdout) == []


def step_processes(marker: str) -> list[int]:
    """Processes on this host whose command line holds ``marker`` (a sandbox's too)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_text():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.sandbox
def test_the_first_step_runs_before_the_runner_reaches_redis(tmp_path: Path) -> None:
    """No Redis listens where the spec says: the step starts all the same, in its sandbox."""
    settings = Settings(work_dir=str(tmp_path / "work"), redis_url="redis://127.0.0.1:9/0")
    launcher = LocalLauncher(settings)
    marker = f"{uuid.uuid4().int % 10**6}.{os.getpid()}"  # seconds for sleep, unique here
    job = Workload(task_id=f"lean-{uuid.uuid4().hex[:8]}", revision=1, name="lean",
                   steps=(("sleep", marker),), env=(), policy_version=0)
    home = prepare_home(launcher.run_dir(job), job.workdir)
    spec = runner_spec(settings, job, home, launcher.bwrap)
    runner = spare.start(warm=False)  # a cold start: the first launch of a process
    spare.hand_over(runner, {**spec, "run_dir": str(home.parent), "runner": "single"})
    try:
        deadline = time.monotonic() + 30
        while not step_processes(marker):
            assert runner.poll() is None, "the runner ended before its step started"
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.02)
    finally:
        runner.send_signal(signal.SIGTERM)  # a cancel: the runner kills its step
        time.sleep(0.5)
        os.killpg(runner.pid, signal.SIGKILL)  # it would wait for Redis to record that
        runner.wait(timeout=30)
        for pid in step_processes(marker):
            os.kill(pid, signal.SIGKILL)
