"""What a local runner reports to Redis: the task's log, the run slot's and the task uid's
leases, the outcome.

Kept apart from :mod:`workers.launchers.local.runner`, which starts the steps: this is
everything that imports Redis and the task store (the runner's slowest imports), and the
runner imports it only once its first step is already running.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis
from redis.sentinel import SentinelConnectionPool

from shared.access.quotas import LOG_FULL_NOTE
from shared.config import Settings
from shared.env.received import Look, Looks
from shared.redis_conn import connect_for
from shared.secrets import Cipher, StreamRedactor
from shared.store.logtail import OutputCap
from shared.store.tasks import TaskStore
from shared.task.replica_logs import as_printed, marked_note, platform_line
from shared.task.workload import Workload
from workers.launchers.local.launcher import (
    host_slots,
    reserve_seconds,
    task_uids,
    uid_lease_seconds,
)
from workers.launchers.local.slots import admit_waiting
from workers.outcomes import patiently

log = logging.getLogger("taskenv.local_runner")

# The outcome waits in the run directory too (the reconciler reads it from there once
# this runner is gone), so Redis is waited for a while, not for ever.
OUTCOME_PATIENCE = 600.0
LOG_PATIENCE = 300.0


class KeptOutput:
    """A runner's appends to its revision's log, and, behind sentinels (``keep_copy``), a
    copy of them to store again if a failover lost some: no more than the cap lets through
    (the runner's writer caps what it stores before it gets here)."""

    def __init__(self, tasks: TaskStore, task_id: str, revision: int,
                 keep_copy: bool = False) -> None:
        self.tasks, self.task_id, self.revision = tasks, task_id, revision
        self.copy: list[str] | None = [] if keep_copy else None
        self.end = 0  # the bytes the log kept after this runner's last append
        self.lost = False

    def __call__(self, clean: str) -> None:
        if not clean:
            return
        if self.copy is not None:
            self.copy.append(clean)
        if not patiently(lambda: self._append(clean), LOG_PATIENCE):
            log.error("task %s r%s: output lost, Redis stayed away", self.task_id,
                      self.revision)

    def _append(self, clean: str) -> None:
        size = self.tasks.append_log(self.task_id, self.revision, clean)
        if size is None or self.copy is None:
            return
        # Shorter than what it was given: a failover lost writes, unless the owner's quota
        # stopped the output (the log then ends with the note that says so).
        if size < self.end + len(clean.encode()) and not self.tasks.logs.ends_with(
                self.task_id, self.revision, LOG_FULL_NOTE):
            self.lost = True
        self.end = size

    def store_again(self) -> bool:
        """Once the steps have ended: if a failover lost some of what this runner stored
        (an append found the log shorter than it left it, or the log is now), the log is
        its copy again, saying so.  True if it was.  Only with ``keep_copy``."""
        if self.copy is None:
            return False
        if not self.lost:
            # An empty append, not a read: a write is what an old primary refuses
            # (NOREPLICAS), so the answer is the new primary's.
            self._append("")
        if not self.lost:
            return False
        text = STORED_AGAIN + "".join(self.copy)
        patiently(lambda: self.tasks.logs.replace(self.task_id, self.revision, text),
                  LOG_PATIENCE)
        log.warning("task %s r%s: a Redis failover lost part of the output; stored again",
                    self.task_id, self.revision)
        return True


class LogWriter:
    """Stores a task's output in its log with secret values redacted on the stream.

    A secret cut by a line break or a pipe's chunk is still hidden whole: the text that
    could begin one is kept back until the next write shows what follows, or until
    :meth:`flush`, once the steps have ended.  What the log keeps is capped
    (:class:`~shared.store.logtail.OutputCap`): the start, a line saying how much was
    dropped, and the end.  ``keep_copy``: see :class:`KeptOutput`.
    """

    def __init__(self, tasks: TaskStore, workload: Workload, limit: int = 0,
                 keep_copy: bool = False) -> None:
        # A secret as the step printed it: the runner shows the platform's mark in it.
        self.redactor = StreamRedactor(as_printed(v.value for v in workload.env if v.secret))
        self.cap = OutputCap(min(limit, tasks.LOG_LIMIT) if limit else tasks.LOG_LIMIT)
        self.output = KeptOutput(tasks, workload.task_id, workload.revision, keep_copy)

    def __call__(self, text: str) -> None:
        self.output(self.cap.feed(self.redactor.feed(text)))

    def flush(self) -> None:
        self.output(self.cap.feed(self.redactor.flush()))
        self.output(marked_note(self.cap))

    def store_again(self) -> bool:
        return self.output.store_again()

    @property
    def dropped(self) -> int:
        return self.cap.dropped


STORED_AGAIN = platform_line("taskenv: a Redis failover lost part of this output; it is "
                             "stored again from the runner's copy (the launcher's own lines "
                             "before it are not)")


def behind_sentinels(tasks: TaskStore) -> bool:
    """Whether the store's Redis can fail over (and so lose its last writes)."""
    return isinstance(tasks.r.connection_pool, SentinelConnectionPool)


def store_for(settings: dict[str, Any]) -> TaskStore:
    config = Settings(**settings)
    client = connect_for(config)
    return TaskStore(client, config.key_prefix, Cipher.from_setting(config.secret_keys))


Sender = Callable[[Settings], Callable[[str, str, int], None]]  # settings -> send(stage, ...)


@contextlib.contextmanager
def holding_slot(tasks: TaskStore, settings: dict[str, Any], workload: Workload,
                 sender: Sender | None, uid: int | None = None,
                 stop: Callable[[str], None] | None = None) -> Iterator[None]:
    """Renew the revision's run-slot lease, and its task uid's (``uid``), while the steps
    run; at the end give both back and hand the slot (and any other free one) to the
    oldest waiting revisions (with no ``sender``, the reconciler's next pass does that).

    The uid is never the holder of two live tasks: a runner that finds its uid lease gone,
    or that could not renew it for so long that it may end (Redis away), calls ``stop``
    with why, which ends the steps, before the uid can be given to another task."""
    config = Settings(**settings)
    slots = host_slots(config, tasks.r) if config.local_max_running > 0 else None
    uids = task_uids(config, tasks.r) if uid is not None else None
    if slots is None and uids is None:
        yield
        return
    task_id, revision = workload.task_id, workload.revision
    done = threading.Event()
    # Stop the steps this long after the last renewal: two heartbeats before the lease ends.
    fence = uid_lease_seconds(config) - 2.0 * config.heartbeat_seconds

    def renew() -> None:
        renewed = time.monotonic()
        while not done.wait(config.heartbeat_seconds):
            try:
                if slots is not None:
                    slots.renew(task_id, revision, time.time())
                if uids is not None:
                    held = uids.renew(task_id, revision, time.time())
                    if held != uid:
                        lost(f"its lease of host uid {uid} had ended")
                        return
                    renewed = time.monotonic()
            except redis.RedisError as exc:
                log.warning("run slot or uid lease not renewed (%s): trying again", exc)
            if uids is not None and time.monotonic() - renewed > fence:
                lost(f"its lease of host uid {uid} could not be renewed for {fence:.0f}s "
                     "(Redis away)")
                return

    def lost(why: str) -> None:
        log.error("stopping the steps: %s; the uid may go to another task", why)
        if stop is not None:
            stop(f"stopped: {why}, and a uid is never shared by two running tasks")

    renewer = threading.Thread(target=renew, name="slot-lease", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        done.set()
        renewer.join()
        if uids is not None:  # the steps have ended: nothing runs as the uid any more
            patiently(lambda: uids.release(task_id, revision), OUTCOME_PATIENCE)
        if slots is not None:
            patiently(lambda: slots.release(task_id, revision), OUTCOME_PATIENCE)
            if sender is not None:
                send = sender(config)
                patiently(lambda: admit_waiting(tasks, slots, send, reserve_seconds(config)),
                          OUTCOME_PATIENCE)


def received(workload: Workload, started_with: dict[int, dict[str, str]]
             ) -> dict[str, object] | None:
    """What each replica's first step was started with (``started_with``: by replica, the
    env the runner handed its sandbox), compared (``shared.env.received``), with the
    per-node defaults this host gave it; None when no step started."""
    import secrets

    from workers.launchers.local.launcher import HOST

    if not started_with:
        return None
    key = secrets.token_bytes(32)
    chosen = workload.node_env(HOST)
    looks = tuple(Look.of(k, env, key, HOST, {n: env[n] for n in chosen if n in env})
                  for k, env in sorted(started_with.items()))
    return Looks(key, looks, backend_names=("PATH", "HOME")).summary(workload.env_dict())
