"""A runner process started before its task: the local launcher's warm start.

A runner is a fresh Python process, and a Python start with the runner's imports costs
more than the containment it then brings up (docs/launchers.md, "How soon a step
starts").  So each process that launches keeps one runner already started, waiting on
its stdin for a spec, with everything it will import already imported; a launch hands
its spec to that one and starts the next.  The first launch of a process finds none and
starts one there and then (the cold start, which imports little before its first step).

Nothing about the crash model changes, because a spare *is* the runner it becomes: the
same process, in its own session, runs the revision's steps and leaves its outcome file,
and a runner that dies is found lost by the reconciler, as before.  An idle spare knows
no task, holds no secret (its environment is the runner's few variables; the spec comes
on stdin, as ever) and has no task's directory as its working directory.  When the
process that kept it ends, its stdin ends, and an idle spare then exits doing nothing:
no spare outlives its launcher's process.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from workers.launchers.common.sandbox import MINIMAL_PATH

# What the runner (never a step: the sandbox starts with an empty environment) inherits
# besides PATH: where its metrics go and how its log lines look.
RUNNER_PASSES = ("PROMETHEUS_MULTIPROC_DIR", "TASKENV_LOG_FORMAT")
ENTRY = "workers.local_run"
SPARE_FLAG = "--spare"  # says nothing of a task: the spec comes on stdin
PROJECT_ROOT = Path(__file__).resolve().parents[3]
# A spare warms up (a Python start and its imports: more CPU than the containment costs)
# while the step the last launch handed over starts: at this priority it takes only what
# nothing else wants.  The launcher gives it its own priority back when it takes it.
IDLE_NICENESS = 19


class Spare:
    """The one runner this process keeps started.  Per process, not per launcher: a
    Celery worker's children each keep their own, and one forked from a process that had
    a spare must not write into its parent's (the pid says whose it is)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.owner = 0  # the pid of the process that started it

    def waiting(self) -> subprocess.Popen[bytes] | None:
        """The spare, if this process started it and it has not ended."""
        proc = self.proc
        return proc if proc is not None and self.owner == os.getpid() \
            and proc.poll() is None else None

    def take(self) -> subprocess.Popen[bytes]:
        """A runner waiting for its spec: the spare, if it still waits, else a new one."""
        proc, self.proc = self.waiting(), None
        if proc is None:
            return start(warm=False)
        if nices_spares():  # it runs the task now: at its launcher's priority
            prioritize(proc.pid, os.getpriority(os.PRIO_PROCESS, 0))
        return proc

    def refill(self) -> None:
        """Start the runner the next launch will take."""
        if self.waiting() is None:
            self.proc, self.owner = start(warm=True), os.getpid()

    def drop(self) -> None:
        """End the idle spare: its stdin closes and it exits without a task."""
        proc, self.proc = self.proc, None
        if proc is not None and self.owner == os.getpid() and proc.stdin is not None:
            proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


SPARE = Spare()
atexit.register(SPARE.drop)


def start(warm: bool) -> subprocess.Popen[bytes]:
    """A runner process, waiting for its spec on stdin.  Its stderr is its launcher's
    until the spec names the run directory, whose ``runner.log`` it then writes."""
    env = {"PATH": MINIMAL_PATH, "PYTHONPATH": str(PROJECT_ROOT),
           **{k: os.environ[k] for k in RUNNER_PASSES if k in os.environ}}
    argv = [sys.executable, "-m", ENTRY, *([SPARE_FLAG] if warm else [])]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env,
                            cwd="/", start_new_session=True)  # its own session: stopping
    # the worker spares it
    if warm and nices_spares():
        prioritize(proc.pid, IDLE_NICENESS)
    return proc


def prioritize(pid: int, niceness: int) -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    except ProcessLookupError:
        pass  # it has ended: whoever takes it next sees so


def nices_spares() -> bool:
    """Whether a spare starts at the idle priority: only where the launcher may give it its
    own priority back when it takes it (root may), as the steps inherit the runner's."""
    return os.geteuid() == 0


def hand_over(proc: subprocess.Popen[bytes], spec: dict[str, Any]) -> None:
    """Give the runner its spec; it runs the revision from here on."""
    assert proc.stdin is not None
    with proc.stdin:
        proc.stdin.write(json.dumps(spec).encode())


def run(spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    """The runner of the revision ``spec`` describes: this process's spare, or, if the
    spare died idle since it was last looked at, one started now; then the next spare."""
    proc = SPARE.take()
    try:
        hand_over(proc, spec)
    except BrokenPipeError:
        proc.wait()
        proc = start(warm=False)
        hand_over(proc, spec)
    SPARE.refill()
    return proc


def settle_in(run_dir: Path) -> None:
    """In the runner, once its spec names the run directory: work there and write what it
    says to that directory's ``runner.log`` (only the host's root can read it)."""
    os.chdir(run_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(run_dir / "runner.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
