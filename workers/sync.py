"""Record what a backend says of a launched workload.

A launcher such as podman (or kubernetes) returns ``running`` as soon as the
workload is started; nothing in the pipeline waits for it to end.  The
reconciler (``workers.reconcile``) takes what changed in the backend since its
last pass from the launcher's ``changes()`` (a watch, one listing), and what the
launcher last saw of each ``launching`` or ``running`` task that no live launch
worker holds from its ``seen()``, and hands each answer to
:func:`record_observed`: once the workload has finished, its output is stored
(once per revision, with secret values redacted) and the outcome recorded through
:func:`workers.outcomes.record_outcome`.  While a workload runs, :func:`stream_output`
appends what it printed since the last pass: the lines a launcher's files gained
(``StreamsOutput``: Slurm's), or what a launcher read of its backend's logs, redacted
and marked on each replica's stream already (``ReadsRunningOutput``: podman's
container log files, Kubernetes' pod logs); ``logs`` then gives the rest.
"""

from __future__ import annotations

from shared.secrets import redact
from shared.store.tasks import Doc, TaskStore
from shared.task import states
from shared.task.replica_logs import step_output
from shared.task.workload import Workload
from workers.launchers.base import (
    Launcher,
    LooksAtEnv,
    MarksItsOutput,
    Outcome,
    ReadsRunningOutput,
    StreamsOutput,
)
from workers.outcomes import record_outcome

WATCHED = (states.RUNNING, states.LAUNCHING)
LOGS_CLAIM = "logs_synced_revision"  # the revision whose backend logs were copied


def record_observed(tasks: TaskStore, launcher: Launcher, workload: Workload,
                    outcome: Outcome) -> bool:
    """Record what the backend said of a workload; True if it has finished."""
    task_id, revision = workload.task_id, workload.revision
    received = None
    if outcome.state != states.RUNNING and _claim_logs(tasks, task_id, revision):
        text = launcher.logs(workload)
        if text:
            secrets = [v.value for v in workload.env if v.secret]
            tasks.append_log(task_id, revision, _as_stored(launcher, redact(text, secrets)))
        received = received_env(launcher, workload)
    record_outcome(tasks, task_id, revision, outcome.state, outcome.exit_code, outcome.reason,
                   outcome.replica_exit_codes, received)
    return outcome.state != states.RUNNING


def received_env(launcher: Launcher, workload: Workload) -> dict[str, object] | None:
    """What each replica received of its env, compared (``shared.env.received``), where
    the launcher looks; None where it does not, or the look is gone."""
    if not isinstance(launcher, LooksAtEnv):
        return None
    looks = launcher.received(workload)
    return None if looks is None else looks.summary(workload.env_dict())


def _claim_logs(tasks: TaskStore, task_id: str, revision: int) -> bool:
    """Mark this revision's logs as copied; False if another pass already did."""

    def change(doc: Doc) -> Doc | None:
        if (doc["revision"] != revision or doc["state"] not in WATCHED
                or doc.get(LOGS_CLAIM) == revision):
            return None
        doc[LOGS_CLAIM] = revision
        return doc

    return tasks.update(task_id, change) is not None


def stream_output(tasks: TaskStore, launcher: StreamsOutput | ReadsRunningOutput) -> int:
    """Append what running workloads printed since the last pass to their logs, redacted;
    the number of workloads whose output grew.  A Redis read per such workload only (and,
    for a launcher that reads its backend's logs, one per workload it starts reading)."""
    if isinstance(launcher, ReadsRunningOutput):
        return _read_running(tasks, launcher)
    grew = 0
    for task_id, revision, text in launcher.new_output():
        doc = _watched(tasks, task_id, revision)
        if doc is None:
            continue
        secrets = [v.value for v in Workload.from_doc(doc).env if v.secret]
        tasks.append_log(task_id, revision, _as_stored(launcher, redact(text, secrets)))
        grew += 1
    return grew


def _read_running(tasks: TaskStore, launcher: ReadsRunningOutput) -> int:
    """What the launcher read of its running workloads' logs, stored as it gives it (it
    redacted, prefixed and marked it on each replica's stream)."""

    def workload_of(task_id: str, revision: int) -> Workload | None:
        doc = _watched(tasks, task_id, revision)
        return None if doc is None else Workload.from_doc(doc)

    grew = 0
    for task_id, revision, text in launcher.output_since(workload_of):
        if _watched(tasks, task_id, revision) is None:
            continue  # ended or superseded meanwhile: its log is settled
        tasks.append_log(task_id, revision, text)
        grew += 1
    return grew


def _watched(tasks: TaskStore, task_id: str, revision: int) -> Doc | None:
    """The task, if ``revision`` is its current one and launched or running."""
    doc = tasks.find(task_id)
    if doc is None or doc["revision"] != revision or doc["state"] not in WATCHED:
        return None
    return doc


def _as_stored(launcher: object, text: str) -> str:
    """A backend's output as the log keeps it: a step's, never the platform's mark,
    unless the backend's own program already marked its lines (Slurm's job)."""
    return launcher.as_stored(text) if isinstance(launcher, MarksItsOutput) \
        else step_output(text)
