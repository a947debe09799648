"""Bring tasks to a final state when their launcher only starts them.

A launcher such as podman (or kubernetes) returns ``running`` as soon as the
workload is started; nothing in the pipeline waits for it to end.
:func:`sync_running` asks the launcher about every task that is ``running`` (or
still ``launching``) and, once the backend says it finished, stores its output
(once per revision, with secret values redacted) and records the outcome through
:func:`workers.stages.record_outcome`.  It is plain code over the store and the
launcher; the reconciler (``workers.reconcile``) calls it on every pass.
"""

from __future__ import annotations

import logging

from shared import states
from shared.secrets import redact
from shared.store import Doc, TaskStore
from shared.workload import Workload
from workers.launchers.base import Launcher, Outcome
from workers.stages import record_outcome

log = logging.getLogger(__name__)

WATCHED = (states.RUNNING, states.LAUNCHING)
LOGS_CLAIM = "logs_synced_revision"  # the revision whose backend logs were copied


def sync_running(tasks: TaskStore, launcher: Launcher, limit: int = 100) -> int:
    """One pass over running and launching tasks; returns how many were found finished."""
    finished = 0
    for task_id in _watched_ids(tasks, limit):
        try:
            finished += sync_one(tasks, launcher, task_id)
        except Exception:  # one task's trouble must not stop the others' sync
            log.exception("sync: task %s could not be synced; next pass retries", task_id)
    return finished


def sync_one(tasks: TaskStore, launcher: Launcher, task_id: str) -> bool:
    """Ask the backend about one task; True if it finished and its outcome was recorded."""
    doc = tasks.find(task_id)
    if doc is None or doc["state"] not in WATCHED:
        return False
    workload = Workload.from_doc(doc)
    outcome = launcher.observe(workload)
    return outcome is not None and record_observed(tasks, launcher, workload, outcome)


def record_observed(tasks: TaskStore, launcher: Launcher, workload: Workload,
                    outcome: Outcome) -> bool:
    """Record what the backend said of a workload; True if it has finished."""
    task_id, revision = workload.task_id, workload.revision
    if outcome.state != states.RUNNING and _claim_logs(tasks, task_id, revision):
        text = launcher.logs(workload)
        if text:
            secrets = [v.value for v in workload.env if v.secret]
            tasks.append_log(task_id, revision, redact(text, secrets))
    record_outcome(tasks, task_id, revision, outcome.state, outcome.exit_code, outcome.reason)
    return outcome.state != states.RUNNING


def _watched_ids(tasks: TaskStore, limit: int) -> list[str]:
    ids: list[str] = []
    for state in WATCHED:
        room = limit - len(ids)
        if room <= 0:
            break
        ids.extend(tasks.ids_in_state(state, limit=room))
    return ids


def _claim_logs(tasks: TaskStore, task_id: str, revision: int) -> bool:
    """Mark this revision's logs as copied; False if another pass already did."""

    def change(doc: Doc) -> Doc | None:
        if (doc["revision"] != revision or doc["state"] not in WATCHED
                or doc.get(LOGS_CLAIM) == revision):
            return None
        doc[LOGS_CLAIM] = revision
        return doc

    return tasks.update(task_id, change) is not None
