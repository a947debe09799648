"""What a revision's outcome does to its record, from wherever it is reported.

The launch stage, the local runner (a process of its own, outside any worker), the
status sync and the reconciler all end revisions through these few functions, so a
final state is written the same way whoever saw it.  Writes that must land are
retried patiently: a runner that lost Redis for a minute still records its outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from shared.errors import NotFound
from shared.store.tasks import TaskStore
from shared.task import states

log = logging.getLogger(__name__)


def patiently(write: Callable[[], object], give_up_after: float = 300.0,
              wanted: Callable[[], bool] = lambda: True) -> bool:
    """Retry a Redis write until it lands; False if Redis stayed away ``give_up_after`` s,
    or once the write is no longer ``wanted`` (say, the task's run directory is gone)."""
    deadline = time.monotonic() + give_up_after
    delay = 0.2
    while True:
        try:
            write()
            return True
        except (redis.ConnectionError, redis.TimeoutError):
            if time.monotonic() > deadline or not wanted():
                return False
            log.warning("Redis unavailable; retrying in %.1fs", delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def insist(write: Callable[[], object]) -> None:
    """:func:`patiently`, then one last try whose error is the caller's (Celery retries)."""
    if not patiently(write):
        write()


def fail(tasks: TaskStore, task_id: str, revision: int, reason: str) -> None:
    """End a revision as failed from wherever it is, unless it has already ended."""
    in_progress = set(states.ALL) - states.FINAL
    if move(tasks, task_id, revision, in_progress, states.FAILED, reason=reason):
        log.warning("task %s r%s failed: %s", task_id, revision, reason)


def record_outcome(tasks: TaskStore, task_id: str, revision: int, state: str,
                   exit_code: int | None, reason: str | None,
                   replica_exit_codes: Sequence[int | None] | None = None,
                   received: dict[str, object] | None = None) -> bool:
    """What a launcher or the backend reported: a final state ends the revision; ``running``
    moves it on from ``launching`` (a start the launch worker did not live to record).
    ``replica_exit_codes``: each replica's, for a task of several (kept with the revision);
    ``received``: what each replica received of its env, compared (kept with it too).
    False if the revision was elsewhere (cancelled, say) or the task gone."""
    if state == states.RUNNING:
        return started(tasks, task_id, revision)
    codes: dict[str, Any] = {} if replica_exit_codes is None else {
        "replica_exit_codes": list(replica_exit_codes)}
    if received is not None:
        codes["received"] = received
    moved = move(tasks, task_id, revision, {states.LAUNCHING, states.RUNNING}, state,
                 exit_code=exit_code, reason=reason, **codes)
    if moved:
        log.info("task %s r%s %s (exit code %s)", task_id, revision, state, exit_code)
    return moved


def started(tasks: TaskStore, task_id: str, revision: int) -> bool:
    return move(tasks, task_id, revision, states.LAUNCHING, states.RUNNING)


def move(tasks: TaskStore, task_id: str, revision: int, expected: str | set[str],
          new_state: str, **changes: Any) -> bool:
    """A change decided by the state alone, in one round trip; False when the revision is
    elsewhere or the task gone (deleted, expired)."""
    try:
        return tasks.move(task_id, revision, expected, new_state, **changes)
    except NotFound:
        return False
