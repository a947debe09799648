"""The local launcher's warm start: each launch hands its revision to a runner the launch
before it started (docs/launchers.md, "How soon a step starts"), which is then that
revision's runner as a cold-started one is.  An idle spare knows no task and ends with
the process that kept it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.config import Settings
from shared.policy.model import Resolved
from shared.secrets import Cipher, new_key
from shared.store.tasks import TaskStore
from shared.task.workload import Workload
from workers.launchers.base import Hooks
from workers.launchers.local import spare
from workers.launchers.local.launcher import LocalLauncher, live_runner_pid
from workers.localstack import RedisServer

ROOT = Path(__file__).resolve().parents[4]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


class FakeProc:
    """A stand-in for a started runner (no process is started)."""

    def __init__(self) -> None:
        self.ended: int | None = None

    def poll(self) -> int | None:
        return self.ended


def test_a_spare_started_by_another_process_is_never_taken(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Celery worker's children fork from a parent that may have kept a spare: a child
    writing its revision into the parent's spare would run it in the parent's runner."""
    started: list[FakeProc] = []

    def start(warm: bool) -> FakeProc:
        started.append(FakeProc())
        return started[-1]

    monkeypatch.setattr(spare, "start", start)
    keeper = spare.Spare()
    keeper.refill()
    parents = started[-1]
    monkeypatch.setattr(spare.os, "getpid", lambda: -1)  # now in a forked child
    assert keeper.take() is not parents
    keeper.refill()
    assert keeper.proc is not parents and keeper.owner == -1
    dead = keeper.proc
    dead.ended = 1  # a spare that died idle (killed for memory, say) is not taken either
    assert keeper.take() is not dead


@pytest.mark.integration
def test_an_idle_spare_ends_with_the_process_that_kept_it() -> None:
    """Its stdin closes when that process ends, however it ends (here ``os._exit``: no
    clean-up runs), and a spare whose stdin ends without a spec exits doing nothing."""
    probe = ("import os, sys; from workers.launchers.local import spare; "
             "spare.SPARE.refill(); print(spare.SPARE.proc.pid, flush=True); os._exit(0)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=60)
    assert wait_gone(int(done.stdout))


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server.url
    server.stop()


def environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


@pytest.mark.sandbox
def test_a_launch_hands_its_revision_to_the_spare_the_last_launch_started(
        tmp_path: Path, redis_url: str) -> None:
    key, prefix = new_key(), f"spare-{uuid.uuid4().hex[:6]}"
    settings = Settings(redis_url=redis_url, key_prefix=prefix, work_dir=str(tmp_path / "w"),
                        local_max_running=0, secret_keys=key)
    tasks = TaskStore(redis.Redis.from_url(redis_url), prefix, Cipher.from_setting(key))
    launcher = LocalLauncher(settings)
    secret = f"spare-secret-{uuid.uuid4().hex}"

    def job(n: int) -> Workload:
        return Workload(task_id=f"spare-{uuid.uuid4().hex[:8]}", revision=1, name=f"j{n}",
                        steps=(("sh", "-c", 'test "$TOKEN" = "$WANT" && echo ran && sleep 1'),),
                        env=(Resolved("TOKEN", secret, "user", secret=True),
                             Resolved("WANT", secret, "user")), policy_version=0)

    def launched(work: Workload) -> int:
        launcher.launch(work, Hooks(started=lambda: None, log=lambda text: None))
        pid = live_runner_pid(launcher.run_dir(work))
        assert pid is not None
        return pid

    first = job(1)
    first_runner = launched(first)
    waiting = spare.SPARE.proc
    assert waiting is not None and waiting.poll() is None
    cmdline = Path(f"/proc/{waiting.pid}/cmdline")
    deadline = time.monotonic() + 10  # empty while its exec is still setting it up
    while not cmdline.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert spare.SPARE_FLAG.encode() in cmdline.read_bytes().split(b"\0")
    # Idle, it knows no task: no value in its environment, no task's directory as its cwd.
    assert secret.encode() not in environ(waiting.pid)
    assert os.readlink(f"/proc/{waiting.pid}/cwd") == "/"
    second = job(2)
    runner = launched(second)
    assert runner == waiting.pid  # the spare became the second revision's runner
    deadline = time.monotonic() + 30  # it moves there once it has read its spec
    while os.readlink(f"/proc/{runner}/cwd") != str(launcher.run_dir(second)):
        assert time.monotonic() < deadline, os.readlink(f"/proc/{runner}/cwd")
        time.sleep(0.01)
    for work in (first, second):
        def done(w: Any = work) -> bool:
            return "ran" in (tasks.read_log(w.task_id, 1) or "")
        deadline = time.monotonic() + 60
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert done(), tasks.read_log(work.task_id, 1)
    assert wait_gone(runner) and wait_gone(first_runner)
    assert (launcher.run_dir(second) / "runner.log").stat().st_mode & 0o077 == 0
    launcher.reap()


@pytest.mark.integration
def test_a_spare_that_died_idle_is_replaced_by_a_runner_started_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed between the look that found it waiting and the hand-over (its pipe is
    broken): the revision goes to a runner started there and then, not lost."""
    monkeypatch.setattr(spare, "SPARE", spare.Spare())
    spare.SPARE.refill()
    doomed = spare.SPARE.proc
    assert doomed is not None
    monkeypatch.setattr(doomed, "poll", lambda: None)  # it looks alive when taken
    doomed.kill()
    doomed.wait()
    handed: list[int] = []
    real = spare.hand_over

    def hand_over(proc: Any, spec: dict[str, Any]) -> None:
        handed.append(proc.pid)
        real(proc, spec)

    monkeypatch.setattr(spare, "hand_over", hand_over)
    runner = spare.run({})  # a spec the runner refuses: the test needs only who gets it
    assert handed == [doomed.pid, runner.pid] and runner.pid != doomed.pid
    runner.wait(timeout=60)
    spare.SPARE.drop()
