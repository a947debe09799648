"""Quotas: how much of the shared platform one subject may take.

A subject is who a quota counts for: ``user:<owner>`` today.  The decisions below
take the subject and its counts, not a user, so a project (``project:<name>``)
can get quotas of its own by counting its tasks the same way.

Three quotas, each off when set to 0 (``Settings.quota_*``):

* creations per clock minute: over it the API answers 429 with ``Retry-After``
  (the seconds left in the minute);
* tasks not yet finished (any state but succeeded, failed, rejected, cancelled),
  counted with one ZCARD per state on the owner's per-state indexes, O(1) each;
* revisions per task.

The last two answer 409.  Each refusal is a :class:`Problem` naming the rule
(``quota.creates_per_minute``, ``quota.unfinished_tasks``,
``quota.revisions_per_task``) and the limit.  Counting and refusing are two steps,
so requests racing each other may overshoot a count limit by the few in flight.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from shared import states
from shared.errors import Problem, QuotaExceeded, TooManyRequests
from shared.keys import Keys

WINDOW = 60  # seconds: creations are counted per clock minute
UNFINISHED = tuple(s for s in states.ALL if s not in states.FINAL)


@dataclass(frozen=True)
class Quotas:
    creates_per_minute: int = 300
    unfinished_tasks: int = 500
    revisions_per_task: int = 500

    @classmethod
    def from_settings(cls, settings: Any) -> Quotas:
        return cls(creates_per_minute=settings.quota_creates_per_minute,
                   unfinished_tasks=settings.quota_unfinished_tasks,
                   revisions_per_task=settings.quota_revisions_per_task)


def user(owner: str) -> str:
    """The subject one user's quotas are counted for."""
    return f"user:{owner}"


# --- decisions: pure ---------------------------------------------------------------------


def over_rate(quotas: Quotas, subject: str, created: int) -> Problem | None:
    """``created``: creations this minute, this one included."""
    limit = quotas.creates_per_minute
    if not limit or created <= limit:
        return None
    return Problem(rule="quota.creates_per_minute", limit=limit,
                   message=f"{subject} may create at most {limit} tasks per minute; "
                           "wait for the next minute (Retry-After)")


def over_unfinished(quotas: Quotas, subject: str, unfinished: int) -> Problem | None:
    """``unfinished``: tasks not yet finished before this one starts."""
    limit = quotas.unfinished_tasks
    if not limit or unfinished < limit:
        return None
    return Problem(rule="quota.unfinished_tasks", limit=limit,
                   message=f"{subject} has {unfinished} tasks not yet finished; at most "
                           f"{limit} may be at once: wait for some to finish")


def over_revisions(quotas: Quotas, task_id: str, revisions: int) -> Problem | None:
    """``revisions``: how many the task has before the new one."""
    limit = quotas.revisions_per_task
    if not limit or revisions < limit:
        return None
    return Problem(rule="quota.revisions_per_task", limit=limit,
                   message=f"task {task_id} has {revisions} revisions; at most {limit} are "
                           "allowed per task: create a new task instead")


def seconds_left(now: float) -> int:
    """Seconds until the next minute window begins, at least 1."""
    return max(1, math.ceil(WINDOW - now % WINDOW))


# --- counting: Redis ---------------------------------------------------------------------


class QuotaCounter:
    """Counts what a subject uses and refuses what would take it over a quota."""

    def __init__(self, client: redis.Redis, prefix: str = "taskenv",
                 quotas: Quotas | None = None, clock: Callable[[], float] = time.time) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self.quotas = quotas or Quotas()
        self.clock = clock

    def check_create(self, owner: str) -> None:
        """Count one creation by ``owner``; raise if it takes them over a quota."""
        if not (self.quotas.creates_per_minute or self.quotas.unfinished_tasks):
            return  # both off: not even a round trip
        subject, now = user(owner), self.clock()
        key = self.keys.quota_creates(subject, int(now // WINDOW))
        pipe = self.r.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, 2 * WINDOW)
        self._queue_unfinished(pipe, owner)
        created, _, *counts = pipe.execute()
        if problem := over_rate(self.quotas, subject, int(created)):
            raise TooManyRequests(problem.message, [problem], retry_after=seconds_left(now))
        if problem := over_unfinished(self.quotas, subject, sum(counts)):
            raise QuotaExceeded(problem.message, [problem])

    def check_revision(self, doc: Mapping[str, Any]) -> None:
        """Raise if a new revision of ``doc`` would take it, or its owner, over a quota.

        A finished task's new revision makes it unfinished again, so it counts too.
        """
        if problem := over_revisions(self.quotas, doc["id"], doc["revision"]):
            raise QuotaExceeded(problem.message, [problem])
        if doc["state"] in states.FINAL:
            owner = doc["owner"]
            problem = over_unfinished(self.quotas, user(owner), self.unfinished(owner))
            if problem:
                raise QuotaExceeded(problem.message, [problem])

    def unfinished(self, owner: str) -> int:
        pipe = self.r.pipeline(transaction=False)
        self._queue_unfinished(pipe, owner)
        return sum(int(n) for n in pipe.execute())

    def _queue_unfinished(self, pipe: Any, owner: str) -> None:
        for state in UNFINISHED:
            pipe.zcard(self.keys.index(owner, state))
