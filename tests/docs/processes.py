"""The processes of the doc runner (tests/docs/runner.py): the reader's checkout, shell
and stack.

* :func:`checkout`: a copy of the working tree (tracked and untracked, not ignored
  files) with the repository's virtualenv linked in as ``.venv``; its ``pyproject.toml``
  is dated before ``.venv/.installed``, so ``make`` never reinstalls into that shared
  virtualenv.
* :class:`Shell`: each statement in ``bash`` through tests/docs/step.sh, which sources
  the state the statements before it left and writes it back; what it printed (stdout
  and stderr together) is kept beside it in the run's directory.
* :class:`Server` and :class:`Stack`: what serves the API, a process group of its own,
  ready once ``/readyz`` answers 200, stopped with SIGINT (what Ctrl-C sends) and waited
  for until no process of the group is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STATEMENT_TIMEOUT = 240
READY_TIMEOUT = 120


def checkout(into: Path) -> Path:
    """A copy of the working tree, the repository's virtualenv linked in."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, target = ROOT / name, into / name
        if source.is_file() and not source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode & 0o777)
    installed = (ROOT / ".venv" / ".installed").stat().st_mtime
    os.utime(into / "pyproject.toml", (installed - 60, installed - 60))
    (into / ".venv").symlink_to(ROOT / ".venv")
    return into


class Shell:
    """A reader's shell: each statement in bash, in the state the ones before it left."""

    def __init__(self, cwd: Path, env: dict[str, str], work: Path) -> None:
        self.env, self.work = env, work
        self.state = work / "state.sh"
        self.state.write_text(f"cd -- '{cwd}'\n")
        self.count = 0

    def statement(self, text: str) -> Path:
        """The statement as a file of its own (kept, numbered, beside what it printed)."""
        self.count += 1
        path = self.work / f"statement-{self.count}.sh"
        path.write_text(text + "\n")
        return path

    def argv(self, script: Path) -> list[str]:
        return ["bash", "--noprofile", "--norc", str(HERE / "step.sh"), str(self.state),
                str(script)]

    def run(self, text: str, stdin: Path | None = None) -> tuple[int, str]:
        return self.source(self.statement(text), stdin)

    def source(self, script: Path, stdin: Path | None = None) -> tuple[int, str]:
        """A script file run as a statement: a doc's, or one of tests/docs/given/."""
        with open(stdin or os.devnull, "rb") as given:
            done = subprocess.run(self.argv(script), env=self.env, stdin=given,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=STATEMENT_TIMEOUT, check=False)
        out = done.stdout.decode(errors="replace")
        (self.work / f"statement-{self.count}.out").write_text(out)
        return done.returncode, out

    def start(self, text: str, log: Path) -> subprocess.Popen[bytes]:
        """The statement in the background, in a process group of its own (a terminal's)."""
        with open(log, "ab") as out:
            return subprocess.Popen(self.argv(self.statement(text)), env=self.env,
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def var(self, name: str) -> str:
        """A variable's value in the current state ('' if unset)."""
        done = subprocess.run(["bash", "--norc", "-c", 'source "$1"; printf %s "${!2-}"', "_",
                               str(self.state), name], env=self.env, capture_output=True,
                              text=True, check=True)
        return done.stdout


class Server:
    """What serves the API: a process group, stopped as Ctrl-C stops a terminal's."""

    def __init__(self, proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
        self.proc, self.base, self.log = proc, base, log

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the stack is not ready at {self.base}/readyz (exit "
                                   f"{self.proc.poll()}):\n{self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def ready(self) -> bool:
        try:
            return requests.get(self.base + "/readyz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        """SIGINT to the group, then wait until every process of it is gone."""
        group = self.proc.pid
        signal_group(group, signal.SIGINT)
        deadline = time.monotonic() + 60
        self.proc.wait(timeout=60)
        while group_alive(group):
            if time.monotonic() > deadline:
                signal_group(group, signal.SIGKILL)
            time.sleep(0.2)


def signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


class Stack:
    """The run's own stack: ``python -m workers.localstack`` in the checkout."""

    def __init__(self, cwd: Path, env: dict[str, str], base: str, log: Path) -> None:
        self.cwd, self.env, self.base, self.log = cwd, env, base, log
        self.server: Server | None = None

    def start(self) -> None:
        if self.server is not None:
            return  # already up (a block that would have stopped it did not get so far)
        with open(self.log, "ab") as out:
            proc = subprocess.Popen([str(self.cwd / ".venv" / "bin" / "python"), "-m",
                                     "workers.localstack"], cwd=self.cwd, env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.server = Server(proc, self.base, self.log)
        self.server.wait_ready()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
