"""What the stages tell operators: log context, timings and launch errors.

Celery's signals carry it, so the stage bodies in ``workers.tasks`` stay thin:

* ``task_prerun`` binds the task id and revision to the worker's log lines and
  observes how long the message waited (from ``sent_at``, or its ``eta`` when a
  retry was delayed); ``task_postrun`` observes the stage's processing time;
* ``setup_logging`` makes a worker log as every taskenv process does
  (``TASKENV_LOG_FORMAT``), instead of Celery's own format.

A message's arguments are ``(task_id, revision)``: ids only, never a value.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextvars import Token
from datetime import datetime
from typing import Any

from celery import signals

from shared import logs, metrics
from shared.config import process_settings
from shared.task.workload import Workload
from workers.launchers.base import Change, Hooks, Launcher, Outcome
from workers.queues import SENT_AT, stage_of

_running: dict[str, tuple[float, Token[dict[str, Any]]]] = {}  # celery task id -> start, log


@signals.setup_logging.connect
def _setup_logging(**_: Any) -> None:
    logs.configure(process_settings().log_format)


def waited(sent_at: Any, eta: Any, now: float) -> float | None:
    """Seconds in the queue: since it was sent, or since its ``eta`` if it had to wait."""
    if not isinstance(sent_at, int | float):
        return None
    since = float(sent_at)
    if isinstance(eta, str):
        since = max(since, datetime.fromisoformat(eta).timestamp())
    return max(0.0, now - since)


@signals.task_prerun.connect
def _started(task_id: str, task: Any, args: tuple[Any, ...] | None = None, **_: Any) -> None:
    stage = stage_of(task.name)
    if stage is None:
        return
    request = task.request
    wait = waited(getattr(request, SENT_AT, None), getattr(request, "eta", None), time.time())
    if wait is not None:
        metrics.QUEUE_WAIT.labels(stage=stage).observe(wait)
    context = {"task_id": args[0], "revision": args[1]} if args and len(args) >= 2 else {}
    _running[task_id] = (time.monotonic(), logs.bind(stage=stage, **context))


@signals.task_postrun.connect
def _finished(task_id: str, task: Any, **_: Any) -> None:
    started = _running.pop(task_id, None)
    stage = stage_of(task.name)
    if started is None or stage is None:
        return
    metrics.STAGE_DURATION.labels(stage=stage).observe(time.monotonic() - started[0])
    logs.unbind(started[1])


class CountingLauncher:
    """A launcher that counts the errors its launches raise (by launcher and reason)."""

    def __init__(self, inner: Launcher) -> None:
        self.inner = inner
        self.name = inner.name
        self.sweep_every_pass = inner.sweep_every_pass
        self.never_starts = inner.never_starts

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        try:
            return self.inner.launch(workload, hooks)
        except Exception as exc:
            metrics.launch_failed(self.name, exc)
            raise

    def observe(self, workload: Workload) -> Outcome | None:
        return self.inner.observe(workload)

    def logs(self, workload: Workload) -> str | None:
        return self.inner.logs(workload)

    def changes(self) -> Iterable[Change]:
        return self.inner.changes()

    def seen(self, workload: Workload) -> Outcome | None:
        return self.inner.seen(workload)

    def cancel(self, workload: Workload) -> None:
        self.inner.cancel(workload)
