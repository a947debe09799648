"""The three stages, as plain functions over the stores.

Each takes a task id and the revision its message was sent for, acts only if
the task is in the state the stage expects, and returns whether the next stage
should be enqueued.  A redelivered or stale message finds the task elsewhere
and does nothing, so no revision is processed twice.  The Celery tasks in
``workers.tasks`` only call these and enqueue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from shared import metrics
from shared.doctor.checkup import Doctor
from shared.doctor.store import CatalogStore
from shared.env.envlist import Limits
from shared.errors import NotFound, PermanentError, TransientError
from shared.policy.hooks import DEFAULT_HOOKS, StartupHooks
from shared.policy.store import PolicyStore
from shared.redis_conn import acknowledged, pinned
from shared.secrets import StreamRedactor
from shared.store.tasks import Doc, TaskStore
from shared.task import records, states
from shared.task.replica_logs import platform_line, platform_lines
from shared.task.resolution import decide_policy, decide_validation
from shared.task.workload import Workload
from workers.heartbeat import keep_alive
from workers.launchers.base import Hooks, Launcher, WaitForSlot
from workers.outcomes import fail, insist, move, record_outcome, started
from workers.sync import received_env

log = logging.getLogger(__name__)


def validate(tasks: TaskStore, limits: Limits, task_id: str, revision: int,
             policies: PolicyStore | None = None) -> bool:
    """With ``policies``, a list this stage rejects is judged against the current policy
    too, so the rejection names every problem at once (the policy's included)."""
    def decide(doc: Doc) -> tuple[str, dict[str, Any]]:
        state, decided = decide_validation(doc, limits)
        if state == states.REJECTED and policies is not None:  # read only when needed
            state, decided = decide_validation(doc, limits, policies.chain(doc))
        return state, decided

    doc = _advance(tasks, task_id, revision, states.PENDING, decide)
    if doc is None:
        _skip("validate", task_id, revision)
        return False
    if doc["state"] == states.REJECTED:
        log.info("task %s r%s rejected: %d validation problems", task_id, revision,
                 len(doc["errors"]))
        tasks.insights.rejected(doc["errors"], doc.get("project"))
        return False
    return True


def apply_policy(tasks: TaskStore, policies: PolicyStore, task_id: str, revision: int,
                 hooks: StartupHooks = DEFAULT_HOOKS,
                 catalogs: CatalogStore | None = None) -> bool:
    """Resolve with the platform's current policy and, for a task in a project, the
    project's current one (``policies`` is the platform's store, which reaches both);
    a project's value for a start-up hook name (``hooks``) is withheld.  With
    ``catalogs``, the doctor examines the revision too (advice, scripts)."""
    def decide(doc: Doc) -> tuple[str, dict[str, Any]]:
        if catalogs is None:
            chain, doctor = policies.chain(doc), None
        else:  # the chain and the doctor's catalog in one round trip
            chain, catalog = catalogs.applying_to(doc, policies)
            doctor = Doctor(catalog)
        return decide_policy(doc, chain, _rerun_of(tasks, doc), hooks, doctor=doctor)

    doc = _advance(tasks, task_id, revision, states.VALIDATED, decide)
    if doc is None:
        _skip("policy", task_id, revision)
        return False
    tasks.insights.near_misses(doc.get("warnings") or [], doc.get("project"))
    if doc["state"] == states.REJECTED:
        log.info("task %s r%s rejected by policies %s", task_id, revision,
                 doc.get("policy_versions"))
        tasks.insights.rejected(doc["errors"], doc.get("project"))
        return False
    return True


def _rerun_of(tasks: TaskStore, doc: Doc) -> Doc | None:
    """The earlier revision a rerun was made from, for its drift report."""
    if doc.get("rerun_of") is None:
        return None
    try:
        return tasks.revision(doc["id"], doc["rerun_of"])
    except NotFound:
        return None


def launch(tasks: TaskStore, launcher: Launcher, task_id: str, revision: int,
           heartbeat_seconds: int = 5, min_replicas: int = 0,
           replica_wait_ms: int = 1000) -> None:
    """Launch one revision; the reconciler relaunches it only if nothing ever started.

    With ``min_replicas``, only once the claim is on that many replicas (see
    :func:`_claim`)."""
    with keep_alive(tasks, task_id, revision, heartbeat_seconds):
        try:
            doc = _claim(tasks, task_id, revision, min_replicas, replica_wait_ms)
            if doc is None:
                _skip("launch", task_id, revision)
                return
            workload = Workload.from_doc(doc)
            # Secrets are hidden whole even when the launcher's messages cut one in pieces.
            redactor = StreamRedactor(v.value for v in workload.env if v.secret)
        except Exception as exc:
            # Failed before the backend was called (the record unreadable, its secrets
            # not opening with this worker's keys): a launch error all the same.
            metrics.launch_failed(launcher.name, exc)
            raise
        moved: list[bool] = []  # whether each move the launch made found the revision
        # Once the workload may be running, no write may fail the launch: each waits out
        # a Redis restart (heartbeat still beating) rather than leave the task behind.
        hooks = Hooks(
            started=lambda: insist(lambda: moved.append(started(tasks, task_id, revision))),
            log=lambda text: _append_log(tasks, task_id, revision,
                                         redactor.feed(platform_lines(text))),
        )
        try:
            outcome = launcher.launch(workload, hooks)
        except WaitForSlot as wait:
            _queue(tasks, workload, wait)
            return
        except TransientError:
            # Retried by the Celery task: give the revision back so the retry may claim it.
            move(tasks, task_id, revision, states.LAUNCHING, states.RESOLVED)
            raise
        except PermanentError as exc:
            fail(tasks, task_id, revision, f"launcher {launcher.name}: {exc.message}")
            return
        finally:
            _append_log(tasks, task_id, revision, redactor.flush())
        if outcome.state != states.RUNNING:
            # The outcome cannot be had again (the local steps ran once): hold on to it.
            received = received_env(launcher, workload)
            insist(lambda: moved.append(record_outcome(
                tasks, task_id, revision, outcome.state, outcome.exit_code, outcome.reason,
                outcome.replica_exit_codes, received)))
        if not (moved and all(moved)):  # a move refused (or none made): cancelled?
            _cancelled_meanwhile(tasks, launcher, workload)


def _queue(tasks: TaskStore, workload: Workload, wait: WaitForSlot) -> None:
    """Record the revision as waiting for a run slot, then put it in the host's queue: a
    slot freed in between finds it recorded, and a later pass of the promoter picks it."""
    task_id, revision = workload.task_id, workload.revision
    if not move(tasks, task_id, revision, states.LAUNCHING, states.QUEUED, waits_on=wait.host):
        return  # cancelled meanwhile
    place = wait.join()
    _append_log(tasks, task_id, revision,
                platform_line(f"{wait}: waiting for a run slot, {place - 1} task(s) ahead "
                              f"(at most {wait.cap} run at once on one host)"))


def _claim(tasks: TaskStore, task_id: str, revision: int, min_replicas: int = 0,
           replica_wait_ms: int = 1000) -> Doc | None:
    """The revision moved from resolved to launching, and its record: one round trip.

    With ``min_replicas`` > 0, the claim must also be on that many replicas (``WAIT`` on
    the connection that made it) before anything runs; else it is given back and the
    launch retried (TransientError).  This is what keeps a revision number from being
    made twice: replication is in order, so a revision with a run is on the replicas,
    survives a failover, and the next change makes the next number; a revision lost
    with a primary never ran anywhere, and its number, made again, adopts nothing."""
    try:
        with pinned(tasks.r):
            doc = tasks.claim(task_id, revision, states.RESOLVED, states.LAUNCHING)
            if doc is None or min_replicas <= 0 or acknowledged(tasks.r, min_replicas,
                                                                replica_wait_ms):
                return doc
    except NotFound:
        return None
    move(tasks, task_id, revision, states.LAUNCHING, states.RESOLVED)
    raise TransientError(f"task {task_id} r{revision}: its launch claim is not on "
                         f"{min_replicas} Redis replica(s) after {replica_wait_ms} ms; "
                         "the launch is retried")


def _append_log(tasks: TaskStore, task_id: str, revision: int, clean: str) -> None:
    """Store already redacted output, waiting out a Redis restart."""
    if clean:
        insist(lambda: tasks.append_log(task_id, revision, clean))


def _cancelled_meanwhile(tasks: TaskStore, launcher: Launcher, workload: Workload) -> bool:
    """A cancel that landed while the backend was starting the workload: stop it now.

    The cancel's own backend call may have found nothing yet to stop; this one cannot.
    """
    if tasks.position(workload.task_id) != (workload.revision, states.CANCELLED):
        return False
    log.info("task %s r%s was cancelled while it launched: stopping it", workload.task_id,
             workload.revision)
    launcher.cancel(workload)
    return True


def stop(tasks: TaskStore, launcher: Launcher, task_id: str, revision: int,
         enqueue: Callable[[str, int], None]) -> None:
    """Stop a cancelled revision's workload; then start the revision that restarts it, if any.

    Acts only on a revision whose state is ``cancelled``: a stray message cannot stop a
    run.  The next revision is enqueued only once the backend says the workload is gone
    (one container at a time); until then this raises ``TransientError`` and is retried.
    """
    doc = tasks.find(task_id)
    if doc is None:
        return
    old = doc if doc["revision"] == revision else {
        **doc, **tasks.revision(task_id, revision), "revision": revision}
    if old["state"] != states.CANCELLED:
        _skip("cancel", task_id, revision)
        return
    if old.get("resolved") is not None:  # never resolved: nothing was ever launched
        workload = Workload.from_doc(old)
        launcher.cancel(workload)
        seen = launcher.observe(workload)  # gone, or ended: the backend may keep its record
        if seen is not None and seen.state == states.RUNNING:
            raise TransientError(f"task {task_id} r{revision} is still stopping")
    if records.restart_waits_for(doc) == revision:
        log.info("task %s r%s stopped: starting r%s", task_id, revision, doc["revision"])
        enqueue(task_id, doc["revision"])


def _advance(tasks: TaskStore, task_id: str, revision: int, expected: str,
             decide: Callable[[Doc], tuple[str, dict[str, Any]]]) -> Doc | None:
    """The task moved on, or None when it is elsewhere or gone (deleted, expired)."""
    try:
        return tasks.advance(task_id, revision, expected, decide)
    except NotFound:
        return None


def _skip(stage: str, task_id: str, revision: int) -> None:
    log.info("%s: task %s r%s is not where this stage expects it (gone, moved on or "
             "revised): duplicate or stale message ignored", stage, task_id, revision)
