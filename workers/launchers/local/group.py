"""The local launcher's replicas: one runner supervising every replica of a task.

Each replica runs the task's steps in its own sandbox under the same containment as a
task of one (``workers.launchers.local.runner.Runner`` and its
:class:`~workers.launchers.common.containment.Jail`: unprivileged user, its own cgroup with the
task's limits, seccomp, its own private home), with its own identity, in one network
namespace private to the task (``workers.launchers.local.netns``): replica 0 listens on
``127.0.0.1:MASTER_PORT`` and the others reach it there, and nothing else.

The group's lifecycle (``workers.launchers.common.group``): the task runs while any replica
runs, succeeds once all have; the first replica to fail has the others killed at once,
and is the one the failure names.  Each replica's output is redacted on its own stream,
prefixed with its index (``shared.task.replica_logs``) and joins the task's one log,
capped as any task's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.secrets import StreamRedactor
from shared.store.logtail import OutputCap
from shared.task.replica_logs import LinePrefixer, as_printed, marked_note
from shared.task.workload import Workload
from workers.launchers.base import Outcome
from workers.launchers.common.group import group_outcome
from workers.launchers.local.netns import TaskNetwork, without_own_network
from workers.launchers.local.runner import Runner, contained_run, plan_uid

log = logging.getLogger("taskenv.local_runner")
Store = Callable[[str], None]


class ReplicaRunner(Runner):
    """One replica: a task's runner with the replica's env, home and cgroup, whose
    sandboxes start in the task's network namespace."""

    def __init__(self, spec: dict[str, Any], index: int, network: TaskNetwork) -> None:
        super().__init__({**spec, "env": spec["replica_envs"][index],
                          "home": spec["replica_homes"][index],
                          "cgroup_name": f"{spec.get('cgroup_name')}-{index}"})
        self.index = index
        self.network = network
        self.started_with: dict[str, str] | None = None  # the env its first step got
        if self.jail is not None:  # the exec helper joins the namespace
            self.jail.netns = str(network.path)

    def argv(self, step: tuple[str, ...]) -> tuple[list[str], tuple[int, ...]]:
        if self.started_with is None:  # the last look before the sandbox, outside it
            self.started_with = dict(self.env)
        argv, fds = super().argv(step)
        if self.bwrap and self.jail is None:  # no helper: bwrap keeps the runner's network
            argv = without_own_network(argv)
        return argv, fds

    def popen_options(self) -> dict[str, Any]:
        if self.jail is not None:
            return {}
        return {"preexec_fn": self.network.enter, "pass_fds": (self.network.fd,)}


class ReplicaLog:
    """One replica's output into the task's log: redacted on its own stream, then its
    lines prefixed; whole lines only, so replicas never interleave inside a line."""

    def __init__(self, index: int, secrets: list[str], store: Store) -> None:
        self.redactor = StreamRedactor(as_printed(secrets))
        self.prefixer = LinePrefixer(index)
        self.store = store

    def __call__(self, text: str) -> None:
        self._put(self.prefixer.feed(self.redactor.feed(text)))

    def flush(self) -> None:
        self._put(self.prefixer.feed(self.redactor.flush()) + self.prefixer.flush())

    def _put(self, text: str) -> None:
        if text:
            self.store(text)


class CappedLog:
    """The task's one log, written by every replica: one at a time, capped as any task's."""

    def __init__(self, store: Store, limit: int) -> None:
        self.store = store
        self.cap = OutputCap(limit)
        self.lock = threading.Lock()

    def __call__(self, text: str) -> None:
        with self.lock:
            self._put(self.cap.feed(text))

    def finish(self) -> None:
        with self.lock:
            self._put(marked_note(self.cap))

    def _put(self, text: str) -> None:
        if text:
            self.store(text)


class GroupRunner:
    """Runs every replica at once and decides the task's outcome from theirs."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.workload = Workload.from_doc(spec["workload"])
        self.count = len(spec["replica_envs"])
        self.runners: list[ReplicaRunner] = []
        self.first_failed: int | None = None
        self.cancelled = False
        self.stopped: str | None = None
        self.lock = threading.Lock()

    def cancel(self, signum: int = 0, frame: Any = None) -> None:
        """The task was cancelled: stop every replica."""
        self.cancelled = True
        for runner in list(self.runners):
            runner.cancel()

    def stop(self, reason: str) -> None:
        """End every replica as :meth:`cancel` does, the task failing with ``reason``."""
        self.stopped = reason
        self.cancel()

    def run(self, log_: CappedLog) -> Outcome:
        with TaskNetwork() as network:
            self.runners = [ReplicaRunner(self.spec, k, network) for k in range(self.count)]
            mounts_failed = [self._enter_mounts(r) for r in self.runners]  # before threads
            if self.cancelled:  # the signal came before the runners existed
                self.cancel()
            outcomes: list[Outcome | None] = [None] * self.count
            secrets = [v.value for v in self.workload.env if v.secret]
            threads = [threading.Thread(
                target=self._replica, daemon=True,
                args=(k, ReplicaLog(k, secrets, log_), mounts_failed[k], outcomes))
                for k in range(self.count)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        log_.finish()
        if self.stopped is not None:
            return Outcome("failed", reason=self.stopped)
        if self.cancelled:
            return Outcome("cancelled", reason="cancelled")
        return group_outcome(outcomes, first=self.first_failed)

    def received(self) -> dict[str, object] | None:
        """What each replica's first step was started with, compared
        (``shared.env.received``); None before any step started."""
        from workers.launchers.local.report import received

        return received(self.workload, {r.index: r.started_with for r in self.runners
                                        if r.started_with is not None})

    @staticmethod
    def _enter_mounts(runner: ReplicaRunner) -> str | None:
        """The replica's private home; why it could not be had, if it could not."""
        if runner.jail is None:
            return None
        try:
            runner.sandbox_home = runner.jail.enter_mounts()
        except OSError as exc:
            return str(exc)
        return None

    def _replica(self, index: int, write: ReplicaLog, mounts_failed: str | None,
                 outcomes: list[Outcome | None]) -> None:
        runner = self.runners[index]
        try:
            outcome = contained_run(runner, write, mounts_failed)
        finally:
            write.flush()
        outcomes[index] = outcome
        if outcome.state == "failed":
            with self.lock:
                if self.first_failed is None:
                    self.first_failed = index
                    log.info("replica %s failed (%s): stopping the others", index,
                             outcome.reason)
                    for other in self.runners:
                        if other is not runner:
                            other.cancel()


def main(spec: dict[str, Any]) -> int:
    """A task of several replicas, run by ``workers.local_run`` as a task of one is, and
    ended the same way: the run slot held while it runs, the outcome in the run
    directory first, then in Redis."""
    import os
    import signal

    from shared import logs
    from workers.heartbeat import keep_alive
    from workers.launchers.common.run_dir import write_outcome_file
    from workers.launchers.local.report import (
        LOG_PATIENCE,
        OUTCOME_PATIENCE,
        KeptOutput,
        behind_sentinels,
        holding_slot,
        store_for,
    )
    from workers.outcomes import patiently, record_outcome

    logs.configure(os.environ.get("TASKENV_LOG_FORMAT", "text"))
    group = GroupRunner(spec)
    workload = group.workload
    task_id, revision = workload.task_id, workload.revision
    logs.bind(task_id=task_id, revision=revision)
    signal.signal(signal.SIGTERM, group.cancel)  # before any replica starts
    tasks = store_for(spec["settings"])

    store = KeptOutput(tasks, task_id, revision, keep_copy=behind_sentinels(tasks))
    limit = int(spec["settings"].get("log_max_bytes") or 0)
    run_dir = Path(spec["home"]).parent
    with holding_slot(tasks, spec["settings"], workload, None, plan_uid(spec), group.stop):
        with keep_alive(tasks, task_id, revision, int(spec["settings"]["heartbeat_seconds"])):
            try:
                outcome = group.run(CappedLog(store, min(limit, tasks.LOG_LIMIT) if limit
                                              else tasks.LOG_LIMIT))
            except OSError as exc:  # the namespace could not be made: say so in the task
                outcome = Outcome("failed", reason=f"the replicas could not start: {exc}")
            patiently(store.store_again, LOG_PATIENCE)
            write_outcome_file(run_dir, outcome)
            received = group.received()
            recorded = patiently(lambda: record_outcome(
                tasks, task_id, revision, outcome.state, outcome.exit_code, outcome.reason,
                outcome.replica_exit_codes, received), OUTCOME_PATIENCE, wanted=run_dir.exists)
    log.info("task %s r%s %s (%s)", task_id, revision, outcome.state,
             "recorded" if recorded else "NOT recorded: Redis stayed away")
    return 0 if recorded else 1
