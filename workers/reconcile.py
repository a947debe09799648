"""The reconciler: every task that got a 202 reaches a final state.

Messages can be lost (Redis restarted between the write and the enqueue, a
worker killed before it acknowledged) and workers can die mid-launch.  One pass:

* a task sitting in ``pending``, ``validated`` or ``resolved`` past
  ``stuck_after`` gets its stage's message again (stages ignore duplicates);
* the launcher's ``changes()`` (a Kubernetes watch, one podman listing: what
  changed in the backend since the last pass, at a cost that grows with what
  changed, never with what runs) are applied to their tasks (``workers.sync``): a
  finished workload's outcome and logs are recorded, a ``launching`` one the
  backend runs moves to ``running``, and a running task whose workload vanished
  (its Job deleted, its pod removed) ends ``failed``, saying so;
* then every ``launching`` task, and on a full sweep every ``running`` one,
  however many (the indexes are read in pages), is looked at against the
  launcher's ``seen()`` (what the last ``changes()`` left it knowing: no backend
  call per task).  One whose launch worker is alive (heartbeat) is left alone; a
  finished workload not yet recorded is recorded.  ``run_forever`` sweeps the
  running tasks about once a minute: changes keep them current in between, and
  the sweep only catches what needs time to pass (a worker lost with no backend
  record) at a Redis read per task.  A task whose container the backend said can
  never start is looked at every pass until it has waited ``stuck_after``;
* a ``launching`` task that nobody holds and the backend does not know was never
  started: it goes back to ``resolved`` and is launched again;
* a ``running`` task that nobody holds and the backend does not know was lost
  with its worker (local processes die with it): it ends ``failed``, saying so;
* a workload whose container cannot start (image not pullable, bad config) ends
  ``failed`` with the backend's reason, instead of waiting forever;
* a local host's run slots whose runners died (their leases lapsed) go to the oldest
  ``queued`` revisions, which are launched again; waiting revisions cost the pass
  nothing, except on a full sweep, which launches again a ``queued`` revision a lost
  write left neither waiting nor holding a slot (``workers.launchers.local.slots.rescue_stranded``).

``python -m workers.reconcile`` runs passes forever; a Redis lock lets several
replicas run without acting twice.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from shared import logs, metrics
from shared.config import Settings
from shared.store.tasks import TaskStore
from shared.task import records, states
from shared.task.workload import Workload
from workers.launchers.base import (
    AcknowledgesChanges,
    Change,
    HostsRunSlots,
    Launcher,
    Outcome,
    ReadsRunningOutput,
    StreamsOutput,
)
from workers.outcomes import fail
from workers.services import Services, current
from workers.sync import record_observed, stream_output

log = logging.getLogger(__name__)

Enqueue = Callable[[str, str, int], None]  # stage, task id, revision
FULL_SWEEP_SECONDS = 60  # how often run_forever looks at every running task
STAGE_FOR = {states.PENDING: "validate", states.VALIDATED: "policy", states.RESOLVED: "launch"}


def reconcile_once(tasks: TaskStore, launcher: Launcher, enqueue: Enqueue,
                   stuck_after: float, now: float | None = None,
                   heartbeat_ttl: float = 15.0, sweep_running: bool = True,
                   waiting: set[str] | None = None) -> Counter[str]:
    """One pass.  ``waiting``: the tasks whose container the backend said can never start
    (``launcher.never_starts``), kept between passes by the caller: they are looked at every pass,
    so each fails once ``stuck_after`` has passed, not at the next full sweep."""
    now = time.time() if now is None else now
    waiting = set() if waiting is None else waiting
    counts: Counter[str] = Counter()
    for state, stage in STAGE_FOR.items():
        for task_id in tasks.iter_ids_in_state(state):
            doc = tasks.find(task_id)
            if (doc and doc["state"] == state and now - doc["updated_at"] > stuck_after
                    and tasks.liveness.claim_requeue(task_id, doc["revision"], state,
                                                     int(stuck_after))):
                # Once per stuck_after: a long queue must not fill up with copies.
                enqueue(*_next_step(stage, doc))
                counts["requeued"] += 1
    counts["admitted"] = _admit_waiting(tasks, launcher, enqueue)
    if sweep_running:
        counts["rescued"] = _rescue_stranded(tasks, launcher, enqueue, stuck_after)
    if _apply_changes(tasks, launcher, counts, waiting):
        _check_waiting(tasks, launcher, enqueue, waiting, stuck_after, now, heartbeat_ttl,
                       counts)
        for state in (states.LAUNCHING, states.RUNNING) if sweep_running else (
                states.LAUNCHING,):
            for task_id in tasks.iter_ids_in_state(state):
                try:
                    counts[_check_launched(tasks, launcher, enqueue, task_id, stuck_after,
                                           now, heartbeat_ttl)] += 1
                except Exception:  # one task's trouble must not stop the pass
                    log.exception("reconcile: task %s could not be checked", task_id)
    counts["expired"] = tasks.expire_finished(now)
    counts = +counts  # drop zero counts
    counts.pop("", None)
    return counts


def _admit_waiting(tasks: TaskStore, launcher: Launcher, enqueue: Enqueue) -> int:
    """Slots that runners which died never gave back (their leases lapsed) go to the
    oldest waiting revisions: one look at the host's slots, never one per waiting task."""
    if not isinstance(launcher, HostsRunSlots):
        return 0
    try:
        return launcher.admit_waiting(tasks, enqueue)
    except Exception:  # the slots unreadable: the next pass tries again
        log.exception("reconcile: the host's run slots could not be read")
        return 0


def _rescue_stranded(tasks: TaskStore, launcher: Launcher, enqueue: Enqueue,
                     stuck_after: float) -> int:
    """Waiting revisions a lost write left out of the host's queue are launched again."""
    if not isinstance(launcher, HostsRunSlots):
        return 0
    try:
        return launcher.rescue_stranded(tasks, enqueue, stuck_after)
    except Exception:  # Redis restarting: the next sweep tries again
        log.exception("reconcile: the waiting revisions could not be checked")
        return 0


def _next_step(stage: str, doc: dict[str, Any]) -> tuple[str, str, int]:
    """A restart's revision waits for its predecessor to stop: drive that stop again
    (it starts the new revision once the old workload is gone), never the validation."""
    waits_for = records.restart_waits_for(doc)
    if waits_for is not None:
        return "cancel", doc["id"], waits_for
    return stage, doc["id"], doc["revision"]


def _apply_changes(tasks: TaskStore, launcher: Launcher, counts: Counter[str],
                   waiting: set[str]) -> bool:
    """Record what changed in the backend; False if it could not be read this pass."""
    try:
        changes = list(launcher.changes())
    except Exception:  # the backend unreachable: knowing nothing, decide nothing
        log.exception("reconcile: the %s backend could not be read", launcher.name)
        return False
    # Before the ends, whose logs() take the rest.
    if isinstance(launcher, (StreamsOutput, ReadsRunningOutput)):
        try:
            counts["output"] += stream_output(tasks, launcher)
        except Exception:
            log.exception("reconcile: output could not be streamed")
    for change in changes:
        if change.outcome is not None and change.outcome.reason in launcher.never_starts:
            waiting.add(change.task_id)
        try:
            counts[_apply(tasks, launcher, change)] += 1
        except Exception:
            log.exception("reconcile: task %s could not be updated", change.task_id)
            continue
        if isinstance(launcher, AcknowledgesChanges):  # what the backend may now forget
            launcher.applied(change)
    return True


def _apply(tasks: TaskStore, launcher: Launcher, change: Change) -> str:
    if change.outcome == Outcome(states.RUNNING):
        return ""  # news only to a launching task, and the sweep of those reads seen()
    doc = tasks.find(change.task_id)
    if (doc is None or doc["revision"] != change.revision
            or doc["state"] not in (states.LAUNCHING, states.RUNNING)):
        return ""  # a task of another revision, or one already settled
    if change.outcome is not None:
        workload = Workload.from_doc(doc)
        return "finished" if record_observed(tasks, launcher, workload, change.outcome) else ""
    if doc["state"] != states.RUNNING:
        return ""  # a launch in progress: the sweep relaunches it if nobody holds it
    fail(tasks, change.task_id, change.revision,
         change.gone_reason or f"the {launcher.name} backend no longer has this workload")
    return "vanished"


def _check_waiting(tasks: TaskStore, launcher: Launcher, enqueue: Enqueue, waiting: set[str],
                   stuck_after: float, now: float, heartbeat_ttl: float,
                   counts: Counter[str]) -> None:
    """Look at the tasks whose container cannot start; forget those that started, ended or
    were failed."""
    for task_id in list(waiting):
        doc = tasks.find(task_id)
        seen = launcher.seen(Workload.from_doc(doc)) if doc is not None and doc["state"] in (
            states.LAUNCHING, states.RUNNING) else None
        if seen is None or seen.reason not in launcher.never_starts:
            waiting.discard(task_id)
            continue
        acted = _check_launched(tasks, launcher, enqueue, task_id, stuck_after, now,
                                heartbeat_ttl)
        if acted:
            waiting.discard(task_id)
            counts[acted] += 1


def _check_launched(tasks: TaskStore, launcher: Launcher, enqueue: Enqueue, task_id: str,
                    stuck_after: float, now: float, heartbeat_ttl: float) -> str:
    doc = tasks.find(task_id)
    if doc is None or doc["state"] not in (states.LAUNCHING, states.RUNNING):
        return ""
    revision = doc["revision"]
    if tasks.liveness.is_alive(task_id, revision):
        tasks.liveness.seen_alive(task_id, revision)
        return ""  # a launch worker holds it
    workload = Workload.from_doc(doc)
    observed = launcher.seen(workload)  # what the last changes() told: no backend call
    # Only news is written: a task already running that the backend runs costs no write.
    news = observed is not None and (observed.state != states.RUNNING
                                     or doc["state"] == states.LAUNCHING)
    if news and observed is not None and record_observed(tasks, launcher, workload, observed):
        return "finished"
    if now - doc["updated_at"] <= stuck_after:
        return ""
    if observed is not None and observed.reason in launcher.never_starts:
        fail(tasks, task_id, revision, f"the container never started: {observed.reason}")
        return "never_started"
    if observed is not None:
        return ""  # the backend runs it; a later pass records the end
    # Act only on a heartbeat missing for longer than it lives: one missed beat (Redis
    # restarting, say) must not make a live launch look dead, or it would run twice.
    if tasks.liveness.dead_for(task_id, revision, now, int(stuck_after + 3 * heartbeat_ttl)) \
            <= heartbeat_ttl:
        return ""
    if doc["state"] == states.LAUNCHING:
        if tasks.transition(task_id, revision, states.LAUNCHING, states.RESOLVED):
            enqueue("launch", task_id, revision)
            return "relaunched"
        return ""
    fail(tasks, task_id, revision, "lost: the worker running this task stopped, and the "
                                   f"{launcher.name} backend has no record of it")
    return "lost"


def run_forever(svc: Services) -> None:
    """A pass every interval; each pass's actions are counted (``taskenv_reconciler_*``)
    and its end is written to Redis, where ``/readyz`` checks that passes keep coming."""
    settings = svc.settings
    lock = svc.keys.reconciler_lock()
    interval = settings.reconcile_interval_seconds
    sweep_every = 1 if svc.launcher.sweep_every_pass else max(
        1, round(FULL_SWEEP_SECONDS / max(1, interval)))
    passes = 0
    waiting: set[str] = set()
    adopted = False  # the indexes of a store written before the by-state ones, once
    while True:
        try:
            if not adopted:
                svc.tasks.adopt_old_state_indexes()
                adopted = True
            if svc.redis.set(lock, "1", nx=True, ex=max(1, interval)):
                counts = reconcile_once(svc.tasks, svc.launcher, svc.send,
                                        settings.stuck_after_seconds,
                                        heartbeat_ttl=3 * settings.heartbeat_seconds,
                                        sweep_running=passes % sweep_every == 0,
                                        waiting=waiting)
                passes += 1
                _passed(svc, counts)
        except Exception:  # Redis restarting: try again next interval
            metrics.RECONCILER_PASSES.labels(result="failed").inc()
            log.exception("reconcile pass failed")
        time.sleep(interval)


def last_pass_ttl(settings: Settings) -> int:
    """How long a pass counts as recent: a few intervals, so one slow pass is no alarm."""
    return max(30, 6 * settings.reconcile_interval_seconds)


def _passed(svc: Services, counts: Counter[str]) -> None:
    svc.redis.set(svc.keys.reconciler_last_pass(), repr(time.time()),
                  ex=last_pass_ttl(svc.settings))
    metrics.RECONCILER_PASSES.labels(result="ok").inc()
    for action, count in counts.items():
        metrics.RECONCILER_ACTIONS.labels(action=action).inc(count)
    if counts:
        log.info("reconcile: %s", dict(counts))


def main() -> None:
    svc = current()
    logs.configure(svc.settings.log_format)
    # It asks the launcher where tasks stand and redacts their output with their secrets:
    # what the launch worker needs, it needs.
    from workers.startup import refuse_unless_ready

    refuse_unless_ready(svc.settings, "the reconciler", ["launch"], svc.redis)
    from workers import observe  # noqa: F401 - stamps the messages a pass re-enqueues

    if svc.settings.metrics_port:
        metrics.serve(svc.settings.metrics_port, svc.settings.host)
    run_forever(svc)


if __name__ == "__main__":
    main()
