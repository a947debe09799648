"""Run one local task to its end, outside any worker (started as ``python -m workers.local_run``).

Started detached by :class:`workers.launchers.local.launcher.LocalLauncher`, which hands it,
on stdin as JSON, the workload, the step env, the task's home, the bwrap binary
(or null when unsandboxed) and the few settings it needs to reach Redis; nothing
of it is on a command line or in this process's environment.  It runs the steps
one after another, each in its sandbox, streams their output into the task's
log with secret values redacted (whole, however the output is cut), keeps the
revision's heartbeat alive so the reconciler leaves the task alone, kills a step
that runs over ``step_timeout_seconds`` and records the outcome.  Redis being away
never loses the outcome: each write is retried until Redis is back.

Sandboxed, every step is held in by the revision's :class:`~workers.launchers.
containment.Jail`: the exec helper puts it in the task's cgroup and network namespace
as the task's unprivileged user, bwrap loads the seccomp filter, /tmp and the home are
size-capped tmpfs that go when the revision ends.  Output is read in bounded chunks
whatever its line structure, and a revision's log keeps at most ``log_max_bytes``:
the rest is dropped, and the log and the record say how much.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from shared import logs
from shared.config import Settings
from shared.redis_conn import connect_for
from shared.secrets import Cipher, StreamRedactor
from shared.store.logtail import OutputCap
from shared.store.tasks import TaskStore
from shared.task.workload import Workload
from workers.heartbeat import keep_alive
from workers.launchers.base import Outcome
from workers.launchers.common.containment import Jail, Plan
from workers.launchers.common.run_dir import write_outcome_file
from workers.launchers.common.sandbox import bwrap_argv, env_file
from workers.launchers.local.launcher import host_slots, reserve_seconds
from workers.launchers.local.slots import admit_waiting
from workers.outcomes import patiently, record_outcome

log = logging.getLogger("taskenv.local_runner")

# The outcome waits in the run directory too (the reconciler reads it from there once
# this runner is gone), so Redis is waited for a while, not for ever.
OUTCOME_PATIENCE = 600.0
LOG_PATIENCE = 300.0
Write = Callable[[str], None]
READ_CHUNK = 64 * 1024  # what one read of a step's output may bring, lines or not


class Runner:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.workload = Workload.from_doc(spec["workload"])
        self.env: dict[str, str] = spec["env"]
        self.home = Path(spec["home"])
        self.bwrap: str | None = spec["bwrap"]
        self.runtime: str | None = spec.get("runtime")  # a runtime directory's root
        self.timeout = int(spec["settings"]["step_timeout_seconds"])
        self.step: subprocess.Popen[bytes] | None = None
        self.cancelled = False
        plan = spec.get("plan")
        self.jail = Jail(Plan.from_doc(plan), spec["cgroup_name"], self.home) \
            if plan and self.bwrap else None
        self.sandbox_home = self.home  # where the steps' home is, seen from here

    def cancel(self, signum: int = signal.SIGTERM, frame: Any = None) -> None:
        """The task was cancelled (``SIGTERM``): kill the step's group, start no other."""
        self.cancelled = True
        if self.step is not None and self.step.returncode is None:
            try:
                os.killpg(self.step.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def run(self, write_log: Write) -> Outcome:
        steps = self.workload.steps
        for number, step in enumerate(steps, start=1):
            if self.cancelled:
                return Outcome("cancelled", reason="cancelled")
            write_log(f"==> step {number}/{len(steps)}: {step[0]}\n")
            outcome = self.run_step(number, step, write_log)
            if outcome is not None:
                return outcome
        return Outcome("succeeded", exit_code=0)

    def argv(self, step: tuple[str, ...]) -> tuple[list[str], tuple[int, ...]]:
        """The step's command line, and the descriptors it must inherit.  Sandboxed, the
        step's env travels to bwrap as data (``env_file``): the processes outside the
        sandbox start with an empty environment (:meth:`process_env`)."""
        if self.bwrap is None:
            return list(step), ()
        env_fd = env_file(self.env)
        if self.jail is None:
            return bwrap_argv(step, self.home, self.workload.workdir, binary=self.bwrap,
                              env_sets_pwd="PWD" in self.env, env_fd=env_fd,
                              runtime=self.runtime), (env_fd,)
        plan = self.jail.plan
        argv, fds = self.jail.wrap(bwrap_argv(
            step, self.sandbox_home, self.workload.workdir, binary=self.bwrap,
            env_sets_pwd="PWD" in self.env, tmp_bytes=plan.limits.tmp_bytes,
            share_net=plan.own_netns, env_fd=env_fd, runtime=self.runtime), {})
        return argv, (*fds, env_fd)

    def process_env(self) -> dict[str, str]:
        """What the process the runner starts holds: the step's env only when no sandbox
        runs it (the unsafe development mode); else nothing."""
        return self.env if self.bwrap is None else {}

    def popen_options(self) -> dict[str, Any]:
        """More of how a step's process is started (a replica's: in its task's network)."""
        return {}

    def cwd(self) -> Path:
        # Sandboxed, bwrap changes into the workdir itself, inside the sandbox.
        return self.home / self.workload.workdir if self.bwrap is None and self.workload.workdir \
            else self.sandbox_home

    def run_step(self, number: int, step: tuple[str, ...], write_log: Write) -> Outcome | None:
        argv, fds = self.argv(step)
        options = self.popen_options()
        inherited = (*fds, *options.pop("pass_fds", ()))
        try:
            proc = subprocess.Popen(
                argv, env=self.process_env(), cwd=self.cwd(), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                pass_fds=inherited, **options)
        except OSError as exc:
            return Outcome("failed", reason=f"step {number} could not start: {exc.strerror}")
        finally:
            for fd in fds:
                os.close(fd)
        self.step = proc
        if self.cancelled:  # the signal came while the step was starting
            self.cancel()
        # A watchdog, because reading the output blocks until the step closes it.  Killing
        # bwrap's process group ends the sandbox's PID namespace, and everything in it.
        watchdog = threading.Timer(self.timeout, os.killpg, (proc.pid, signal.SIGKILL))
        watchdog.start()
        with proc:
            try:
                assert proc.stdout is not None
                copy_output(proc.stdout.fileno(), write_log)
                code = proc.wait()
            finally:
                timed_out = not watchdog.is_alive()
                watchdog.cancel()
        if self.cancelled:
            return Outcome("cancelled", reason="cancelled")
        if timed_out:
            return Outcome("failed", reason=f"step {number} ran over {self.timeout}s")
        killed = self.jail.why_killed() if self.jail is not None else None
        if code != 0 and killed:
            write_log(f"taskenv: step {number} {killed}\n")
            return Outcome("failed", exit_code=code, reason=f"step {number} {killed}")
        if code != 0:
            return Outcome("failed", exit_code=code, reason=f"step {number} exited with {code}")
        return None


def copy_output(fd: int, write_log: Write, chunk: int = READ_CHUNK) -> None:
    """Hand the output on in pieces of at most ``chunk`` bytes, whatever its lines: one
    300 MB line costs the runner what one chunk does.  A character cut by a chunk is
    decoded whole with the next one."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while data := os.read(fd, chunk):
        write_log(decoder.decode(data))
    write_log(decoder.decode(b"", final=True))


class LogWriter:
    """Stores a task's output in its log with secret values redacted on the stream.

    A secret cut by a line break or a pipe's chunk is still hidden whole: the text that
    could begin one is kept back until the next write shows what follows, or until
    :meth:`flush`, once the steps have ended.  What the log keeps is capped
    (:class:`~shared.store.logtail.OutputCap`): the start, a line saying how much was
    dropped, and the end.
    """

    def __init__(self, tasks: TaskStore, workload: Workload, limit: int = 0) -> None:
        self.tasks = tasks
        self.workload = workload
        self.redactor = StreamRedactor(v.value for v in workload.env if v.secret)
        self.cap = OutputCap(min(limit, tasks.LOG_LIMIT) if limit else tasks.LOG_LIMIT)

    def __call__(self, text: str) -> None:
        self._store(self.cap.feed(self.redactor.feed(text)))

    def flush(self) -> None:
        self._store(self.cap.feed(self.redactor.flush()))
        self._store(self.cap.finish())

    @property
    def dropped(self) -> int:
        return self.cap.dropped

    def _store(self, clean: str) -> None:
        task_id, revision = self.workload.task_id, self.workload.revision
        if clean and not patiently(lambda: self.tasks.append_log(task_id, revision, clean),
                                   LOG_PATIENCE):
            log.error("task %s r%s: output lost, Redis stayed away", task_id, revision)


def store_for(settings: dict[str, Any]) -> TaskStore:
    config = Settings(**settings)
    client = connect_for(config)
    return TaskStore(client, config.key_prefix, Cipher.from_setting(config.secret_keys))


def contained_run(runner: Runner, write_log: Write, mounts_failed: str | None) -> Outcome:
    """The steps, inside the revision's containment, which is taken down after them."""
    if runner.jail is None:
        return runner.run(write_log)
    if mounts_failed:
        return Outcome("failed", reason=f"the task's home could not be set up: {mounts_failed}")
    try:
        runner.jail.start()
    except OSError as exc:
        return Outcome("failed", reason=f"the task's limits could not be set up: {exc}")
    try:
        return runner.run(write_log)
    finally:
        runner.jail.end()


def with_dropped(outcome: Outcome, write_log: LogWriter) -> Outcome:
    """The outcome, saying in its reason when output was dropped."""
    if not write_log.dropped:
        return outcome
    note = write_log.cap.reason()
    return Outcome(outcome.state, outcome.exit_code,
                   f"{outcome.reason}; {note}" if outcome.reason else note)


Sender = Callable[[Settings], Callable[[str, str, int], None]]  # settings -> send(stage, ...)


@contextlib.contextmanager
def holding_slot(tasks: TaskStore, settings: dict[str, Any], workload: Workload,
                 sender: Sender | None) -> Iterator[None]:
    """Renew the revision's run-slot lease while the steps run; at the end give the slot
    back and hand it (and any other free one) to the oldest waiting revisions (with no
    ``sender``, the reconciler's next pass does that)."""
    config = Settings(**settings)
    if config.local_max_running <= 0:
        yield
        return
    slots = host_slots(config, tasks.r)
    task_id, revision = workload.task_id, workload.revision
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(config.heartbeat_seconds):
            try:
                slots.renew(task_id, revision, time.time())
            except redis.RedisError as exc:
                log.warning("run slot lease not renewed (%s): trying again", exc)

    renewer = threading.Thread(target=renew, name="slot-lease", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        patiently(lambda: slots.release(task_id, revision), OUTCOME_PATIENCE)
        if sender is not None:
            send = sender(config)
            patiently(lambda: admit_waiting(tasks, slots, send, reserve_seconds(config)),
                      OUTCOME_PATIENCE)


def main(sender: Sender | None = None) -> int:
    logs.configure(os.environ.get("TASKENV_LOG_FORMAT", "text"))
    spec = json.loads(sys.stdin.read())
    runner = Runner(spec)
    mounts_failed = None
    if runner.jail is not None:
        try:
            # Before any thread starts: a threaded process cannot unshare its mounts.
            runner.sandbox_home = runner.jail.enter_mounts()
        except OSError as exc:
            mounts_failed = str(exc)
    logs.bind(task_id=runner.workload.task_id, revision=runner.workload.revision)
    signal.signal(signal.SIGTERM, runner.cancel)  # before any step starts
    tasks = store_for(spec["settings"])
    task_id, revision = runner.workload.task_id, runner.workload.revision
    # The run slot goes back once the outcome is recorded (or given up on).
    with holding_slot(tasks, spec["settings"], runner.workload, sender):
        with keep_alive(tasks, task_id, revision, int(spec["settings"]["heartbeat_seconds"])):
            write_log = LogWriter(tasks, runner.workload, int(spec["settings"]["log_max_bytes"]))
            try:
                outcome = contained_run(runner, write_log, mounts_failed)
            finally:
                write_log.flush()
            outcome = with_dropped(outcome, write_log)
            # On the host first: a write Redis acknowledged can still be lost (a crash within
            # its fsync interval), and the reconciler then reads the outcome from here.
            write_outcome_file(runner.home.parent, outcome)
            run_dir = runner.home.parent
            recorded = patiently(lambda: record_outcome(tasks, task_id, revision, outcome.state,
                                                        outcome.exit_code, outcome.reason),
                                 OUTCOME_PATIENCE, wanted=run_dir.exists)
    log.info("task %s r%s %s (%s)", task_id, revision, outcome.state,
             "recorded" if recorded else "NOT recorded: Redis stayed away")
    return 0 if recorded else 1


if __name__ == "__main__":
    sys.exit(main())
