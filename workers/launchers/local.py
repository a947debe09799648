"""Run each step as a child process of the worker: the embedded default.

The child's environment is exactly the resolved env plus a minimal PATH and
HOME when the env does not set them: nothing leaks from the worker's own
environment.  argv is handed to the kernel as a list, never to a shell, so a
value such as ``$(HOME)`` or ``a;b`` arrives as typed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

from shared.config import Settings
from shared.workload import Workload
from workers.launchers.base import Hooks, Outcome

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"


class LocalLauncher:
    name = "local"

    def __init__(self, settings: Settings) -> None:
        self.root = Path(settings.work_dir).resolve()
        self.timeout = settings.step_timeout_seconds

    def child_env(self, workload: Workload, home: Path) -> dict[str, str]:
        env = workload.env_dict()
        env.setdefault("PATH", MINIMAL_PATH)
        env.setdefault("HOME", str(home))
        return env

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        home = self.root / workload.task_id / f"r{workload.revision}"
        home.mkdir(parents=True, exist_ok=True)
        cwd = Path(workload.workdir) if workload.workdir else home
        env = self.child_env(workload, home)
        hooks.started()
        for number, argv in enumerate(workload.steps, start=1):
            hooks.log(f"==> step {number}/{len(workload.steps)}: {argv[0]}\n")
            outcome = self._run_step(number, argv, env, cwd, hooks)
            if outcome is not None:
                return outcome
        return Outcome("succeeded", exit_code=0)

    def _run_step(self, number: int, argv: tuple[str, ...], env: dict[str, str],
                  cwd: Path, hooks: Hooks) -> Outcome | None:
        try:
            proc = subprocess.Popen(
                list(argv), env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return Outcome("failed", reason=f"step {number} could not start: {exc.strerror}")
        # A watchdog, because reading the output blocks until the step closes it.
        watchdog = threading.Timer(self.timeout, os.killpg, (proc.pid, signal.SIGKILL))
        watchdog.start()
        with proc:
            try:
                assert proc.stdout is not None
                for line in iter(proc.stdout.readline, b""):
                    hooks.log(line.decode(errors="replace"))
                code = proc.wait()
            finally:
                timed_out = not watchdog.is_alive()
                watchdog.cancel()
        if timed_out:
            return Outcome("failed", reason=f"step {number} ran over {self.timeout}s")
        if code != 0:
            return Outcome("failed", exit_code=code, reason=f"step {number} exited with {code}")
        return None

    def observe(self, workload: Workload) -> Outcome | None:
        return None  # the process lived inside a worker; its outcome is already recorded

    def logs(self, workload: Workload) -> str | None:
        return None  # written to the task's log as the steps ran
