"""Thin Celery tasks: load the context, call the stage, hand off to the next queue.

Each message's log lines carry its task id and revision, and its queue wait and
processing time are measured, by the signals in ``workers.observe``.

Transient errors (Redis hiccups, a backend answering 429/5xx) are retried with
capped exponential backoff.  Anything else, or a transient error that outlasts
its retries, ends the revision as ``failed`` with the reason: a task never sits
in a stage forever, and a permanent error is never retried.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery import Task
from kombu.exceptions import OperationalError

from shared.errors import TransientError
from workers import outcomes, stages
from workers.celery_app import app
from workers.observe import CountingLauncher  # also connects the stages' log and timing signals
from workers.services import current

log = logging.getLogger(__name__)

# kombu's OperationalError: sending the next stage's message failed (the broker, Redis,
# away or failing over): retried, never a reason to fail the task.
TRANSIENT = (TransientError, redis.ConnectionError, redis.TimeoutError, OperationalError)


class StageTask(Task):
    autoretry_for = TRANSIENT
    retry_backoff = 2
    retry_backoff_max = 60
    retry_jitter = True
    max_retries = 8

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any,
                   einfo: Any) -> None:
        target, revision = args[0], args[1]
        reason = (f"{self.name} gave up after {self.max_retries} retries: {exc}"
                  if isinstance(exc, TRANSIENT) else f"{self.name} failed: {type(exc).__name__}")
        try:
            outcomes.fail(current().tasks, target, revision, reason)
        except Exception:  # Redis itself is away: the reconciler will find the task later
            log.exception("could not mark task %s r%s failed", target, revision)


@app.task(name="taskenv.validate", base=StageTask, time_limit=120)
def validate(task_id: str, revision: int) -> None:
    ctx = current()
    if stages.validate(ctx.tasks, ctx.limits, task_id, revision, ctx.policies):
        apply_policy.delay(task_id, revision)


@app.task(name="taskenv.policy", base=StageTask, time_limit=120)
def apply_policy(task_id: str, revision: int) -> None:
    ctx = current()
    if stages.apply_policy(ctx.tasks, ctx.policies, task_id, revision, ctx.hooks,
                           ctx.catalog):
        launch.delay(task_id, revision)


@app.task(name="taskenv.launch", base=StageTask)
def launch(task_id: str, revision: int) -> None:
    ctx = current()
    stages.launch(ctx.tasks, CountingLauncher(ctx.launcher), task_id, revision,
                  ctx.settings.heartbeat_seconds, ctx.settings.redis_min_replicas,
                  ctx.settings.redis_replica_wait_ms)


@app.task(name="taskenv.cancel", base=Task, autoretry_for=TRANSIENT, retry_backoff=1,
          retry_backoff_max=10, retry_jitter=False, max_retries=30, time_limit=300)
def cancel(task_id: str, revision: int) -> None:
    """Stop a cancelled revision's workload (on the launch queue: it talks to the backend)."""
    ctx = current()
    stages.stop(ctx.tasks, ctx.launcher, task_id, revision, ctx.enqueue)
