"""The reconciler, one pass at a time, on fakeredis."""

from __future__ import annotations

import threading

import pytest

from shared.errors import TransientError
from shared.policy.model import Resolved
from shared.secrets import REDACTED
from shared.store.tasks import TaskStore
from shared.task import records, states
from shared.task.workload import Workload
from workers.launchers.base import CONTAINER_NEVER_STARTS, Change, Hooks, Outcome
from workers.reconcile import reconcile_once

STUCK = 10.0
TTL = 3.0


class Backend:
    """A launcher whose backend view the test sets (task id → Outcome; absent: unknown).

    ``changes()`` reports what differs from what it reported last, as a watch would;
    ``seen()`` answers from the view.  The reconciler must never ask per task.
    """

    name = "backend"
    sweep_every_pass = False
    never_starts = CONTAINER_NEVER_STARTS

    def __init__(self) -> None:
        self.view: dict[str, Outcome] = {}
        self.output: dict[str, str] = {}
        self.log_reads = 0
        self.reported: dict[str, Outcome] = {}
        self.unreachable = False
        self.gone_reason = "the pod was removed"

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        raise AssertionError("the reconciler never launches itself; it enqueues")

    def observe(self, workload: Workload) -> Outcome | None:
        raise AssertionError("the reconciler reads changes, never one task at a time")

    def changes(self) -> list[Change]:
        if self.unreachable:
            raise TransientError("backend unreachable")
        out = [Change(t, 1, o) for t, o in self.view.items() if self.reported.get(t) != o]
        out += [Change(t, 1, None, self.gone_reason) for t in self.reported
                if t not in self.view]
        self.reported = dict(self.view)
        return out

    def seen(self, workload: Workload) -> Outcome | None:
        return self.view.get(workload.task_id)

    def logs(self, workload: Workload) -> str | None:
        self.log_reads += 1
        return self.output.get(workload.task_id)


class Queue:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, int]] = []

    def __call__(self, stage: str, task_id: str, revision: int) -> None:
        self.sent.append((stage, task_id, revision))


def task_in(tasks: TaskStore, state: str, secret: str | None = None) -> str:
    env = [{"name": "TOKEN", "value": secret, "secret": True}] if secret else []
    doc, _ = tasks.create(records.new_task({"name": "t", "steps": [["true"]], "env": env}, "u"))
    walk = [states.VALIDATED, states.RESOLVED, states.LAUNCHING, states.RUNNING]
    resolved = [Resolved("TOKEN", secret, "user", (), True).to_dict()] if secret else []
    current = states.PENDING
    for nxt in walk[:walk.index(state) + 1] if state in walk else []:
        extra = {"resolved": resolved, "policy_version": 0} if nxt == states.RESOLVED else {}
        tasks.transition(doc["id"], 1, current, nxt, **extra)
        current = nxt
    return str(doc["id"])


def age(tasks: TaskStore, task_id: str) -> float:
    return float(tasks.get(task_id)["updated_at"])


@pytest.mark.parametrize("state,stage", [(states.PENDING, "validate"),
                                         (states.VALIDATED, "policy"),
                                         (states.RESOLVED, "launch")])
def test_a_stuck_task_gets_its_stage_message_again_once_per_window(tasks, state, stage):
    task_id = task_in(tasks, state)
    queue = Queue()
    later = age(tasks, task_id) + STUCK + 1

    first = reconcile_once(tasks, Backend(), queue, STUCK, now=later)
    again = reconcile_once(tasks, Backend(), queue, STUCK, now=later + 1)

    assert queue.sent == [(stage, task_id, 1)]
    assert first["requeued"] == 1 and again["requeued"] == 0


def test_a_task_moving_along_is_left_alone(tasks):
    task_id = task_in(tasks, states.PENDING)
    queue = Queue()

    counts = reconcile_once(tasks, Backend(), queue, STUCK, now=age(tasks, task_id) + 1)

    assert queue.sent == [] and not counts


def test_a_launch_with_a_live_heartbeat_is_never_touched(tasks):
    task_id = task_in(tasks, states.LAUNCHING)
    tasks.liveness.heartbeat(task_id, 1, ttl=60)
    queue = Queue()

    reconcile_once(tasks, Backend(), queue, STUCK, now=age(tasks, task_id) + 1000,
                   heartbeat_ttl=TTL)

    assert queue.sent == [] and tasks.get(task_id)["state"] == states.LAUNCHING


def test_an_abandoned_launch_is_relaunched_only_after_the_heartbeat_stays_dead(tasks):
    task_id = task_in(tasks, states.LAUNCHING)
    queue = Queue()
    t0 = age(tasks, task_id) + STUCK + 1

    reconcile_once(tasks, Backend(), queue, STUCK, now=t0, heartbeat_ttl=TTL)
    assert queue.sent == []  # first sight of a missing heartbeat: maybe a blip
    counts = reconcile_once(tasks, Backend(), queue, STUCK, now=t0 + TTL + 1,
                            heartbeat_ttl=TTL)

    assert counts["relaunched"] == 1
    assert queue.sent == [("launch", task_id, 1)]
    assert tasks.get(task_id)["state"] == states.RESOLVED


def test_a_heartbeat_seen_again_resets_the_suspicion(tasks):
    task_id = task_in(tasks, states.RUNNING)
    t0 = age(tasks, task_id) + STUCK + 1
    reconcile_once(tasks, Backend(), Queue(), STUCK, now=t0, heartbeat_ttl=TTL)
    tasks.liveness.heartbeat(task_id, 1, ttl=60)
    reconcile_once(tasks, Backend(), Queue(), STUCK, now=t0 + 1, heartbeat_ttl=TTL)
    tasks.liveness.stop_heartbeat(task_id, 1)

    reconcile_once(tasks, Backend(), Queue(), STUCK, now=t0 + TTL + 2, heartbeat_ttl=TTL)

    assert tasks.get(task_id)["state"] == states.RUNNING  # a new suspicion starts now


def test_a_running_task_nobody_holds_and_the_backend_does_not_know_is_lost(tasks):
    task_id = task_in(tasks, states.RUNNING)
    t0 = age(tasks, task_id) + STUCK + 1

    reconcile_once(tasks, Backend(), Queue(), STUCK, now=t0, heartbeat_ttl=TTL)
    counts = reconcile_once(tasks, Backend(), Queue(), STUCK, now=t0 + TTL + 1,
                            heartbeat_ttl=TTL)

    doc = tasks.get(task_id)
    assert counts["lost"] == 1
    assert doc["state"] == states.FAILED and doc["reason"].startswith("lost")


def test_a_workload_the_backend_still_runs_is_left_running(tasks):
    task_id = task_in(tasks, states.RUNNING)
    backend = Backend()
    backend.view[task_id] = Outcome(states.RUNNING)
    t0 = age(tasks, task_id) + STUCK + 1

    for step in range(3):
        reconcile_once(tasks, backend, Queue(), STUCK, now=t0 + step * (TTL + 1),
                       heartbeat_ttl=TTL)

    assert tasks.get(task_id)["state"] == states.RUNNING


def test_a_finished_workload_is_recorded_with_its_logs_redacted_and_copied_once(tasks):
    task_id = task_in(tasks, states.RUNNING, secret="s3cr3t-token-value")
    backend = Backend()
    backend.view[task_id] = Outcome(states.FAILED, exit_code=137, reason="OOMKilled")
    backend.output[task_id] = "loading with s3cr3t-token-value\n"
    now = age(tasks, task_id) + 1

    assert reconcile_once(tasks, backend, Queue(), STUCK, now=now)["finished"] == 1
    assert not reconcile_once(tasks, backend, Queue(), STUCK, now=now)  # already final

    doc = tasks.get(task_id)
    assert (doc["state"], doc["exit_code"], doc["reason"]) == (states.FAILED, 137, "OOMKilled")
    assert tasks.read_log(task_id, 1) == f"loading with {REDACTED}\n"
    assert backend.log_reads == 1


def test_two_racing_passes_copy_the_logs_once(tasks):
    ids = [task_in(tasks, states.RUNNING) for _ in range(5)]
    backend = Backend()
    for task_id in ids:
        backend.view[task_id] = Outcome(states.SUCCEEDED, exit_code=0)
        backend.output[task_id] = "done\n"

    passes = [threading.Thread(target=reconcile_once, args=(tasks, backend, Queue(), STUCK))
              for _ in range(2)]
    for t in passes:
        t.start()
    for t in passes:
        t.join()

    assert all(tasks.read_log(t, 1) == "done\n" for t in ids)
    assert all(tasks.get(t)["state"] == states.SUCCEEDED for t in ids)


def test_a_launching_task_the_backend_reports_running_moves_to_running(tasks):
    task_id = task_in(tasks, states.LAUNCHING)
    backend = Backend()
    backend.view[task_id] = Outcome(states.RUNNING)

    reconcile_once(tasks, backend, Queue(), STUCK, now=age(tasks, task_id) + 1)

    assert tasks.get(task_id)["state"] == states.RUNNING


def test_a_container_that_can_never_start_fails_the_task_with_the_reason(tasks):
    task_id = task_in(tasks, states.RUNNING)
    backend = Backend()
    backend.view[task_id] = Outcome(states.RUNNING, reason="ImagePullBackOff")

    early = reconcile_once(tasks, backend, Queue(), STUCK, now=age(tasks, task_id) + 1)
    late = reconcile_once(tasks, backend, Queue(), STUCK, now=age(tasks, task_id) + STUCK + 1)

    doc = tasks.get(task_id)
    assert not early and late["never_started"] == 1
    assert doc["state"] == states.FAILED and "ImagePullBackOff" in doc["reason"]


def test_a_container_still_being_created_is_left_to_start(tasks):
    task_id = task_in(tasks, states.RUNNING)
    backend = Backend()
    backend.view[task_id] = Outcome(states.RUNNING, reason="ContainerCreating")

    reconcile_once(tasks, backend, Queue(), STUCK, now=age(tasks, task_id) + STUCK + 1)

    assert tasks.get(task_id)["state"] == states.RUNNING


def test_a_running_task_whose_workload_vanishes_fails_with_the_backends_reason(tasks):
    task_id = task_in(tasks, states.RUNNING)
    backend = Backend()
    backend.view[task_id] = Outcome(states.RUNNING)
    reconcile_once(tasks, backend, Queue(), STUCK, now=age(tasks, task_id) + 1)
    del backend.view[task_id]

    counts = reconcile_once(tasks, backend, Queue(), STUCK, now=age(tasks, task_id) + 2)

    doc = tasks.get(task_id)
    assert counts["vanished"] == 1
    assert (doc["state"], doc["reason"]) == (states.FAILED, "the pod was removed")


def test_a_change_of_another_revision_is_ignored(tasks):
    task_id = task_in(tasks, states.RUNNING)
    backend = Backend()
    backend.changes = lambda: [Change(task_id, 2, Outcome(states.FAILED, 1, "old"))]

    reconcile_once(tasks, backend, Queue(), STUCK, now=age(tasks, task_id) + 1)

    assert tasks.get(task_id)["state"] == states.RUNNING


def test_a_backend_that_cannot_be_read_loses_no_task(tasks):
    task_id = task_in(tasks, states.RUNNING)
    backend = Backend()
    backend.unreachable = True
    t0 = age(tasks, task_id) + STUCK + 1

    for step in range(3):
        reconcile_once(tasks, backend, Queue(), STUCK, now=t0 + step * (TTL + 1),
                       heartbeat_ttl=TTL)

    assert tasks.get(task_id)["state"] == states.RUNNING  # silence is not absence


@pytest.mark.slow
def test_every_launched_task_is_looked_at_however_many(tasks):
    docs = []
    for _ in range(1_050):
        doc = records.new_task({"name": "t", "steps": [["true"]], "env": []}, "u")
        docs.append({**doc, "state": states.LAUNCHING, "resolved": [], "policy_version": 0})
    tasks.load_many(docs)
    queue = Queue()
    stuck = 600.0  # the suspects' marks live this long in real time: a slow pass keeps them
    t0 = max(d["updated_at"] for d in docs) + stuck + 1

    reconcile_once(tasks, Backend(), queue, stuck, now=t0, heartbeat_ttl=TTL)
    counts = reconcile_once(tasks, Backend(), queue, stuck, now=t0 + TTL + 1, heartbeat_ttl=TTL)

    assert counts["relaunched"] == 1_050 and len(queue.sent) == 1_050


def test_a_container_that_can_never_start_fails_at_stuck_after_without_a_full_sweep(tasks):
    task_id, other = task_in(tasks, states.RUNNING), task_in(tasks, states.RUNNING)
    backend = Backend()
    backend.view[task_id] = Outcome(states.RUNNING, reason="ImagePullBackOff")
    backend.view[other] = Outcome(states.RUNNING)
    waiting: set[str] = set()
    start = age(tasks, task_id)

    first = reconcile_once(tasks, backend, Queue(), STUCK, now=start + 1, waiting=waiting,
                           sweep_running=False)
    assert not first and waiting == {task_id}
    late = reconcile_once(tasks, backend, Queue(), STUCK, now=start + STUCK + 1,
                          waiting=waiting, sweep_running=False)  # no news from the backend

    assert late["never_started"] == 1 and waiting == set()
    assert tasks.get(task_id)["state"] == states.FAILED
    assert tasks.get(other)["state"] == states.RUNNING


def test_a_container_that_started_after_all_is_forgotten_and_left_running(tasks):
    task_id = task_in(tasks, states.RUNNING)
    backend = Backend()
    backend.view[task_id] = Outcome(states.RUNNING, reason="ErrImagePull")
    waiting: set[str] = set()
    start = age(tasks, task_id)
    reconcile_once(tasks, backend, Queue(), STUCK, now=start + 1, waiting=waiting,
                   sweep_running=False)
    backend.view[task_id] = Outcome(states.RUNNING)  # the image arrived

    reconcile_once(tasks, backend, Queue(), STUCK, now=start + STUCK + 1, waiting=waiting,
                   sweep_running=False)
    assert waiting == set() and tasks.get(task_id)["state"] == states.RUNNING
