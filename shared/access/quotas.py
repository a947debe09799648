"""Quotas: how much of the shared platform one subject may take.

A subject is who a quota counts for: ``user:<owner>`` today.  The decisions below
take the subject and its counts, not a user, so a project (``project:<name>``)
can get quotas of its own by counting its tasks the same way.

Four quotas, each off when set to 0 (``Settings.quota_*``):

* creations per clock minute: over it the API answers 429 with ``Retry-After``
  (the seconds left in the minute);
* tasks not yet finished (any state but succeeded, failed, rejected, cancelled),
  counted replica by replica: one ZCOUNT of the unfinished states' range of the owner's
  by-state index (``shared.state_scores``: each task once), O(log n), plus a counter of
  the replicas beyond each task's first that the scripts moving tasks between states
  keep (``Keys.extra_replicas``);
  creations are counted replica by replica too, so one task of 8 replicas takes what
  8 tasks would;
* revisions per task;
* stored bytes: what the subject's tasks take in Redis: their records (every revision's
  env, resolved env and outcome, and the values they share) and their logs (the bytes
  each revision's log keeps), kept as a counter by the store's Lua scripts
  (``shared.store.scripts``, and ``shared.store.logtail``'s append), which measure every
  write they make: it always equals a recount
  (:meth:`shared.store.tasks.TaskStore.recount_bytes`), and drops to 0 once the
  subject's tasks have expired (a task's log goes with it).  A full quota refuses new
  tasks (409) and stops the output of the running ones where it is reached
  (:data:`LOG_FULL_NOTE` says so in the log, once, which may take the count past the
  limit by that line): an append is never refused, and never another owner's.  A log
  is judged against the limit its task was created under (the task's
  ``bytes_allowed``).

The last three answer 409.  Each refusal is a :class:`Problem` naming the rule
(``quota.creates_per_minute``, ``quota.unfinished_tasks``,
``quota.revisions_per_task``, ``quota.stored_bytes``) and the limit.

A creation is counted and judged inside the script that stores the task
(:class:`CreateBudget` hands it the keys and limits): concurrent creations cannot
overshoot either creation quota, and a refused one stores nothing.  The script only
compares the counts with the limits, as :func:`over_rate` and :func:`over_unfinished`
do; the refusal it reports is worded by them.  A new revision is judged inside the
store's compare-and-set that makes it (:meth:`QuotaCounter.check_revision`), so one
task's racing changes cannot pass its revisions quota; the unfinished-tasks count a
reopened task adds to is read there too, so only reopenings of different tasks racing
each other could pass that one by the few in flight.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from shared import state_scores
from shared.config import DEFAULTS
from shared.errors import Problem, QuotaExceeded, TooManyRequests
from shared.keys import Keys
from shared.task import states
from shared.task.replica_logs import platform_line

WINDOW = 60  # seconds: creations are counted per clock minute
# Written in a log where its owner's stored bytes stopped the output, marked as the
# platform's line (a fixed text: the store writes it once, and not again while the log
# still ends with it).
LOG_FULL_NOTE = "\n" + platform_line(
    "taskenv: output dropped from here: the owner's tasks and logs take all of their "
    "stored-bytes quota (quota.stored_bytes); output is kept again once finished tasks "
    "expire")


@dataclass(frozen=True)
class Quotas:
    creates_per_minute: int = DEFAULTS.quota_creates_per_minute
    unfinished_tasks: int = DEFAULTS.quota_unfinished_tasks
    revisions_per_task: int = DEFAULTS.quota_revisions_per_task
    stored_bytes: int = DEFAULTS.quota_stored_bytes

    @classmethod
    def from_settings(cls, settings: Any) -> Quotas:
        return cls(creates_per_minute=settings.quota_creates_per_minute,
                   unfinished_tasks=settings.quota_unfinished_tasks,
                   revisions_per_task=settings.quota_revisions_per_task,
                   stored_bytes=settings.quota_stored_bytes)


def user(owner: str) -> str:
    """The subject one user's quotas are counted for."""
    return f"user:{owner}"


# --- decisions: pure ---------------------------------------------------------------------


def over_rate(quotas: Quotas, subject: str, created: int) -> Problem | None:
    """``created``: creations this minute (each replica one), this task's included."""
    limit = quotas.creates_per_minute
    if not limit or created <= limit:
        return None
    return Problem(rule="quota.creates_per_minute", limit=limit,
                   message=f"{subject} may create at most {limit} tasks per minute (a task "
                           "counts once per replica); wait for the next minute (Retry-After)")


def over_unfinished(quotas: Quotas, subject: str, unfinished: int,
                    replicas: int = 1) -> Problem | None:
    """``unfinished``: replicas of tasks not yet finished before this task of ``replicas``
    starts."""
    limit = quotas.unfinished_tasks
    if not limit or unfinished + replicas <= limit:
        return None
    this = f"; this task's {replicas} replicas would take it over" if replicas > 1 else ""
    return Problem(rule="quota.unfinished_tasks", limit=limit,
                   message=f"{subject} has {unfinished} task replicas not yet finished (a "
                           f"task counts once per replica); at most {limit} may be at "
                           f"once{this}: wait for some to finish")


def never_admitted(quotas: Quotas, subject: str, replicas: int) -> list[Problem]:
    """The quotas a task of ``replicas`` exceeds on its own: it could never be admitted
    whole, so it is refused at creation whatever else runs."""
    found: list[Problem] = []
    for rule, limit, what in (("quota.unfinished_tasks", quotas.unfinished_tasks,
                               "not yet finished at once"),
                              ("quota.creates_per_minute", quotas.creates_per_minute,
                               "created per minute")):
        if limit and replicas > limit:
            found.append(Problem(
                rule=rule, field="replicas", limit=limit,
                message=f"a task of {replicas} replicas can never run: {subject} may have "
                        f"at most {limit} task replicas {what}"))
    return found


def over_revisions(quotas: Quotas, task_id: str, revisions: int) -> Problem | None:
    """``revisions``: how many the task has before the new one."""
    limit = quotas.revisions_per_task
    if not limit or revisions < limit:
        return None
    return Problem(rule="quota.revisions_per_task", limit=limit,
                   message=f"task {task_id} has {revisions} revisions; at most {limit} are "
                           "allowed per task: create a new task instead")


def over_bytes(quotas: Quotas, subject: str, stored: int, adding: int) -> Problem | None:
    """``stored``: the bytes the subject's task records take; ``adding``: what the write
    would add."""
    limit = quotas.stored_bytes
    if not limit or adding <= 0 or stored + adding <= limit:
        return None
    return Problem(rule="quota.stored_bytes", limit=limit,
                   message=f"quota.stored_bytes: {subject}'s tasks and their logs take "
                           f"{stored} bytes in the task store and this would add {adding}, "
                           f"over the limit of {limit} bytes: use smaller values, print "
                           "less, or wait for finished tasks to expire")


def refuse_bytes(quotas: Quotas, subject: str, stored: int, adding: int) -> None:
    """Raise the refusal for the counts the store's script found over the limit."""
    problem = over_bytes(quotas, subject, stored, adding)
    if problem is None:
        raise AssertionError(f"refused within quota: {stored} stored, {adding} more")
    raise QuotaExceeded(problem.message, [problem])


def seconds_left(now: float) -> int:
    """Seconds until the next minute window begins, at least 1."""
    return max(1, math.ceil(WINDOW - now % WINDOW))


# --- counting: Redis ---------------------------------------------------------------------


@dataclass(frozen=True)
class CreateBudget:
    """What the creation script counts a new task against: the subject's creations this
    minute (``rate_key``, "" when that quota is off) and, where that quota is on, its
    unfinished tasks (a range of the owner's by-state index, which the script knows)."""

    quotas: Quotas
    subject: str
    now: float
    rate_key: str = ""

    def refuse_bytes(self, stored: int, adding: int) -> None:
        refuse_bytes(self.quotas, self.subject, stored, adding)

    def refuse(self, created: int, unfinished: int, replicas: int = 1) -> None:
        """Raise the refusal for the counts the script found over a limit."""
        if problem := over_rate(self.quotas, self.subject, created):
            raise TooManyRequests(problem.message, [problem],
                                  retry_after=seconds_left(self.now))
        if problem := over_unfinished(self.quotas, self.subject, unfinished, replicas):
            raise QuotaExceeded(problem.message, [problem])
        raise AssertionError(f"refused within quota: {created} created, {unfinished} open")


class QuotaCounter:
    """Counts what a subject uses and refuses what would take it over a quota."""

    def __init__(self, client: redis.Redis, prefix: str = "taskenv",
                 quotas: Quotas | None = None, clock: Callable[[], float] = time.time) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self.quotas = quotas or Quotas()
        self.clock = clock

    def budget(self, owner: str) -> CreateBudget:
        """What a new task of ``owner`` is counted against, in the script that stores it."""
        subject, now = user(owner), self.clock()
        q = self.quotas
        rate_key = self.keys.quota_creates(subject, int(now // WINDOW)) \
            if q.creates_per_minute else ""
        return CreateBudget(q, subject, now, rate_key)

    def stored(self, owner: str) -> int:
        """The bytes ``owner``'s task records take, as the store's scripts count them."""
        return int(self.r.get(self.keys.quota_bytes(user(owner))) or 0)

    def check_revision(self, doc: Mapping[str, Any]) -> None:
        """Raise if a new revision of ``doc`` would take it, or its owner, over a quota.

        A finished task's new revision makes it unfinished again, so it counts too.
        """
        if problem := over_revisions(self.quotas, doc["id"], doc["revision"]):
            raise QuotaExceeded(problem.message, [problem])
        if doc["state"] in states.FINAL:
            owner = doc["owner"]
            problem = over_unfinished(self.quotas, user(owner), self.unfinished(owner),
                                      int(doc.get("replicas") or 1))
            if problem:
                raise QuotaExceeded(problem.message, [problem])

    def unfinished(self, owner: str) -> int:
        """Replicas of ``owner``'s unfinished tasks: one score range of the owner's
        by-state index (each task once) and the counter of replicas beyond the first."""
        pipe = self.r.pipeline(transaction=False)
        pipe.zcount(self.keys.by_state(owner), *state_scores.unfinished())
        pipe.get(self.keys.extra_replicas(owner))
        return sum(int(n or 0) for n in pipe.execute())
