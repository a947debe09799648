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

A step waits on the least its guarantees cost: this module imports nothing that talks to
Redis, and :func:`main` brings the containment up and starts the first step before it
imports what reports (:mod:`workers.launchers.local.report`: the task store, Redis,
Celery's sender), which takes longer than the start itself.  The step's first output
waits in its pipe meanwhile; the crash model is unchanged, as this is still the one
process that runs the steps and leaves the outcome.
"""

from __future__ import annotations

import codecs
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared import logs
from shared.task.replica_logs import platform_line, step_output
from workers.launchers.base import Outcome
from workers.launchers.common.containment import Jail, Plan
from workers.launchers.common.sandbox import bwrap_argv, env_file

if TYPE_CHECKING:
    from workers.launchers.local.report import LogWriter, Sender

log = logging.getLogger("taskenv.local_runner")

Write = Callable[[str], None]
READ_CHUNK = 64 * 1024  # what one read of a step's output may bring, lines or not
# A step started (its process and its timeout's watchdog), or why it could not start.
Started = tuple[subprocess.Popen[bytes], threading.Timer] | Outcome


@dataclass(frozen=True)
class Job:
    """What the runner needs of its workload to run the steps.  The whole
    :class:`~shared.task.workload.Workload` (its resolved env, files, policy) is read
    by what reports, once the first step runs: building it imports the policy model."""

    task_id: str
    revision: int
    steps: tuple[tuple[str, ...], ...]
    workdir: str | None

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Job:
        return cls(doc["id"], int(doc["revision"]), tuple(tuple(s) for s in doc["steps"]),
                   doc.get("workdir"))


class Runner:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.job = Job.from_doc(spec["workload"])
        self.env: dict[str, str] = spec["env"]
        self.home = Path(spec["home"])
        self.bwrap: str | None = spec["bwrap"]
        self.runtime: str | None = spec.get("runtime")  # a runtime directory's root
        self.timeout = int(spec["settings"]["step_timeout_seconds"])
        self.step: subprocess.Popen[bytes] | None = None
        self.first: Started | None = None  # step 1, when begin() started it
        self.cancelled = False
        self.stopped: str | None = None  # why the platform stopped the steps (stop())
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

    def stop(self, reason: str) -> None:
        """End the steps as :meth:`cancel` does, the task failing with ``reason``."""
        self.stopped = reason
        self.cancel()

    def ended_early(self) -> Outcome:
        """The outcome of steps that were cancelled or stopped."""
        if self.stopped is not None:
            return Outcome("failed", reason=self.stopped)
        return Outcome("cancelled", reason="cancelled")

    def begin(self, mounts_failed: str | None = None) -> Outcome | None:
        """Bring the revision's containment up and start the first step; the Outcome
        if the steps cannot begin.  Its output waits in the step's pipe for :meth:`run`."""
        if self.jail is not None:
            if mounts_failed:
                return Outcome("failed",
                               reason=f"the task's home could not be set up: {mounts_failed}")
            try:
                self.jail.start()
            except OSError as exc:
                return Outcome("failed", reason=f"the task's limits could not be set up: {exc}")
        if self.job.steps and not self.cancelled:
            self.first = self.start_step(1, self.job.steps[0])
        return None

    def end(self) -> None:
        """Take the containment down (after :meth:`begin` brought it up)."""
        if self.jail is not None:
            self.jail.end()

    def run(self, write_log: Write) -> Outcome:
        steps = self.job.steps
        for number, step in enumerate(steps, start=1):
            started = self.first if number == 1 else None
            if started is None:
                if self.cancelled:
                    return self.ended_early()
                started = self.start_step(number, step)
            write_log(platform_line(f"==> step {number}/{len(steps)}: {step[0]}"))
            outcome = started if isinstance(started, Outcome) else \
                self.finish_step(number, started, write_log)
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
            return bwrap_argv(step, self.home, self.job.workdir, binary=self.bwrap,
                              env_sets_pwd="PWD" in self.env, env_fd=env_fd,
                              runtime=self.runtime), (env_fd,)
        plan = self.jail.plan
        argv, fds = self.jail.wrap(bwrap_argv(
            step, self.sandbox_home, self.job.workdir, binary=self.bwrap,
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
        return self.home / self.job.workdir if self.bwrap is None and self.job.workdir \
            else self.sandbox_home

    def start_step(self, number: int, step: tuple[str, ...]) -> Started:
        """The step's process, started (with its timeout's watchdog), or why it could not."""
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
        return proc, watchdog

    def finish_step(self, number: int, started: tuple[subprocess.Popen[bytes], threading.Timer],
                    write_log: Write) -> Outcome | None:
        """The step's output into the log until it ends; its Outcome if it ends the run."""
        proc, watchdog = started
        with proc:
            try:
                assert proc.stdout is not None
                copy_output(proc.stdout.fileno(), write_log)
                code = proc.wait()
            finally:
                timed_out = not watchdog.is_alive()
                watchdog.cancel()
        if self.cancelled:
            return self.ended_early()
        if timed_out:
            return Outcome("failed", reason=f"step {number} ran over {self.timeout}s")
        killed = self.jail.why_killed() if self.jail is not None else None
        if code != 0 and killed:
            write_log(platform_line(f"taskenv: step {number} {killed}"))
            return Outcome("failed", exit_code=code, reason=f"step {number} {killed}")
        if code != 0:
            return Outcome("failed", exit_code=code, reason=f"step {number} exited with {code}")
        return None


def copy_output(fd: int, write_log: Write, chunk: int = READ_CHUNK) -> None:
    """Hand the output on in pieces of at most ``chunk`` bytes, whatever its lines: one
    300 MB line costs the runner what one chunk does.  A character cut by a chunk is
    decoded whole with the next one.  Never the platform's mark (``replica_logs``): a step
    cannot print a line that passes for the platform's."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while data := os.read(fd, chunk):
        write_log(step_output(decoder.decode(data)))
    write_log(step_output(decoder.decode(b"", final=True)))


def contained_run(runner: Runner, write_log: Write, mounts_failed: str | None) -> Outcome:
    """The steps, inside the revision's containment, which is taken down after them."""
    return finish(runner, write_log, runner.begin(mounts_failed))


def finish(runner: Runner, write_log: Write, failed: Outcome | None) -> Outcome:
    """The rest of :func:`contained_run` once :meth:`Runner.begin` has answered ``failed``."""
    if failed is not None:
        return failed
    try:
        return runner.run(write_log)
    finally:
        runner.end()


def with_dropped(outcome: Outcome, write_log: LogWriter) -> Outcome:
    """The outcome, saying in its reason when output was dropped."""
    if not write_log.dropped:
        return outcome
    note = write_log.cap.reason()
    return Outcome(outcome.state, outcome.exit_code,
                   f"{outcome.reason}; {note}" if outcome.reason else note)


def plan_uid(spec: dict[str, Any]) -> int | None:
    """The host uid the revision's steps run as, held from the pool (None: not one of its
    own, as in warn mode)."""
    plan = spec.get("plan") or {}
    return plan.get("uid") if spec.get("bwrap") and plan.get("uid") is not None else None


def main(spec: dict[str, Any], sender: Sender | None = None) -> int:
    """Run the revision ``spec`` describes (``workers.local_run`` reads it on stdin)."""
    logs.configure(os.environ.get("TASKENV_LOG_FORMAT", "text"))
    runner = Runner(spec)
    mounts_failed = None
    if runner.jail is not None:
        try:
            # Before any thread starts: a threaded process cannot unshare its mounts.
            runner.sandbox_home = runner.jail.enter_mounts()
        except OSError as exc:
            mounts_failed = str(exc)
    task_id, revision = runner.job.task_id, runner.job.revision
    logs.bind(task_id=task_id, revision=revision)
    signal.signal(signal.SIGTERM, runner.cancel)  # before any step starts
    failed = runner.begin(mounts_failed)  # the first step runs from here on

    from shared.task.workload import Workload
    from workers.heartbeat import keep_alive
    from workers.launchers.common.run_dir import write_outcome_file
    from workers.launchers.local import report
    from workers.outcomes import patiently, record_outcome

    tasks = report.store_for(spec["settings"])
    workload = Workload.from_doc(spec["workload"])
    # The run slot goes back once the outcome is recorded (or given up on).
    with report.holding_slot(tasks, spec["settings"], workload, sender, plan_uid(spec),
                             runner.stop):
        with keep_alive(tasks, task_id, revision, int(spec["settings"]["heartbeat_seconds"])):
            write_log = report.LogWriter(tasks, workload, int(spec["settings"]["log_max_bytes"]),
                                         keep_copy=report.behind_sentinels(tasks))
            try:
                outcome = finish(runner, write_log, failed)
            finally:
                write_log.flush()
                patiently(write_log.store_again, report.LOG_PATIENCE)
            outcome = with_dropped(outcome, write_log)
            # On the host first: a write Redis acknowledged can still be lost (a crash within
            # its fsync interval), and the reconciler then reads the outcome from here.
            run_dir = runner.home.parent
            write_outcome_file(run_dir, outcome)
            # A task of one is looked at only where the host gave it per-node defaults.
            looked = report.received(workload, {0: runner.env}) if workload.per_node else None
            recorded = patiently(lambda: record_outcome(tasks, task_id, revision, outcome.state,
                                                        outcome.exit_code, outcome.reason,
                                                        received=looked),
                                 report.OUTCOME_PATIENCE, wanted=run_dir.exists)
    log.info("task %s r%s %s (%s)", task_id, revision, outcome.state,
             "recorded" if recorded else "NOT recorded: Redis stayed away")
    return 0 if recorded else 1
