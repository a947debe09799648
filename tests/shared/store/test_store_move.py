"""TaskStore.move: a state change checked and written in one script, without a read."""

from __future__ import annotations

import json
import time

import fakeredis
import pytest

from shared.errors import NotFound
from shared.secrets import Cipher, new_key
from shared.store.insights import KEEP_SECONDS, Insights
from shared.store.tasks import TaskStore
from shared.task import records, states


def launched(tasks: TaskStore, owner: str = "alice", project: str | None = None) -> str:
    doc = records.new_task({"name": "train", "steps": [["true"]], "env": []}, owner)
    if project:
        doc["project"] = project
    doc["state"] = states.LAUNCHING
    return tasks.create(doc)[0]["id"]


def test_move_writes_the_state_its_timestamps_and_an_event(
        redis_client: fakeredis.FakeRedis) -> None:
    tasks = TaskStore(redis_client)
    task_id = launched(tasks)
    assert tasks.move(task_id, 1, states.LAUNCHING, states.RUNNING)
    assert tasks.move(task_id, 1, states.RUNNING, states.SUCCEEDED, exit_code=0)
    doc = tasks.get(task_id)
    assert (doc["state"], doc["exit_code"]) == (states.SUCCEEDED, 0)
    assert doc["started_at"] <= doc["ended_at"] <= time.time()
    assert [e["state"] for e in doc["events"]] == [states.PENDING, states.RUNNING,
                                                   states.SUCCEEDED]
    assert tasks.revision(task_id, 1)["state"] == states.SUCCEEDED


def test_move_keeps_every_index_in_step(redis_client: fakeredis.FakeRedis) -> None:
    tasks = TaskStore(redis_client)
    task_id = launched(tasks, owner="bob")
    tasks.move(task_id, 1, states.LAUNCHING, states.FAILED, reason="gone")
    assert tasks.ids_in_state(states.FAILED) == [task_id]
    assert tasks.ids_in_state(states.LAUNCHING) == []
    assert [t["id"] for t in tasks.page(owner="bob", state=states.FAILED).items] == [task_id]
    assert tasks.page(owner="bob", state=states.LAUNCHING).items == []


def test_move_is_a_compare_and_set_on_state_and_revision(redis_client: fakeredis.FakeRedis) -> None:
    tasks = TaskStore(redis_client)
    task_id = launched(tasks)
    assert not tasks.move(task_id, 1, states.RUNNING, states.SUCCEEDED)
    assert not tasks.move(task_id, 2, states.LAUNCHING, states.RUNNING)
    assert tasks.get(task_id)["state"] == states.LAUNCHING
    with pytest.raises(NotFound):
        tasks.move("nope", 1, states.LAUNCHING, states.RUNNING)


def test_a_finished_task_enters_the_expiry_index_only_with_retention(
        redis_client: fakeredis.FakeRedis) -> None:
    kept = TaskStore(redis_client, "kept")
    expiring = TaskStore(redis_client, "expiring", retention_seconds=60)
    for tasks in (kept, expiring):
        tasks.move(launched(tasks), 1, states.LAUNCHING, states.CANCELLED)
    assert redis_client.zcard(kept.keys.expiry()) == 0
    assert redis_client.zcard(expiring.keys.expiry()) == 1
    assert expiring.expire_finished(time.time() + 61) == 1


def test_move_counts_the_state_entered_for_insights(redis_client: fakeredis.FakeRedis) -> None:
    tasks = TaskStore(redis_client)
    task_id = launched(tasks, project="vision")
    tasks.move(task_id, 1, states.LAUNCHING, states.RUNNING)
    counters = Insights(redis_client)
    assert counters.states(1)[states.RUNNING] == 1
    assert counters.states(1, "vision") == {states.LAUNCHING: 1, states.RUNNING: 1}


def test_the_day_counters_the_scripts_write_expire_after_a_week_and_a_day(
        redis_client: fakeredis.FakeRedis) -> None:
    tasks = TaskStore(redis_client)
    task_id = launched(tasks, project="vision")
    tasks.move(task_id, 1, states.LAUNCHING, states.RUNNING)
    tasks.move(task_id, 1, states.RUNNING, states.SUCCEEDED, exit_code=0)
    keys = redis_client.keys(f"{tasks.keys.prefix}:insights:*")
    assert len(keys) == 2  # every task's and the project's
    assert all(0 < redis_client.ttl(k) <= KEEP_SECONDS for k in keys)


def test_claim_moves_and_answers_with_the_whole_record_in_one_round_trip(
        redis_client: fakeredis.FakeRedis) -> None:
    cipher = Cipher([new_key()])
    tasks = TaskStore(redis_client, cipher=cipher)
    doc = records.new_task({"name": "train", "steps": [["true"]],
                            "env": [{"name": "TOKEN", "value": "s3cr3t-value", "secret": True}]},
                           "alice")
    doc["state"] = states.RESOLVED
    task_id = tasks.create(doc)[0]["id"]
    claimed = tasks.claim(task_id, 1, states.RESOLVED, states.LAUNCHING)
    assert claimed is not None and claimed["state"] == states.LAUNCHING
    assert claimed["env"] == [{"name": "TOKEN", "value": "s3cr3t-value", "secret": True}]
    assert claimed == tasks.get(task_id)  # the record as stored after the move
    assert tasks.claim(task_id, 1, states.RESOLVED, states.LAUNCHING) is None  # claimed once


def test_a_move_converts_a_record_stored_before_revisions_had_their_own_keys(
        redis_client: fakeredis.FakeRedis) -> None:
    tasks = TaskStore(redis_client)
    old = {**records.new_task({"name": "old", "steps": [["true"]], "env": []}, "alice"),
           "id": "legacy1", "state": states.RESOLVED, "history": []}
    redis_client.hset(tasks.keys.task("legacy1"), mapping={"doc": json.dumps(old),
                                                "state": states.RESOLVED, "v": 4, "seq": 1})
    claimed = tasks.claim("legacy1", 1, states.RESOLVED, states.LAUNCHING)
    assert claimed is not None and claimed["name"] == "old"
    assert tasks.get("legacy1")["state"] == states.LAUNCHING


def test_a_new_revision_counts_as_entering_pending_so_the_states_add_up(
        redis_client: fakeredis.FakeRedis) -> None:
    tasks = TaskStore(redis_client)
    task_id = launched(tasks, project="vision")  # created straight in launching
    tasks.move(task_id, 1, states.LAUNCHING, states.SUCCEEDED, exit_code=0)
    tasks.update(task_id, lambda doc: records.new_revision(doc, [], "alice", "rerun"))
    assert tasks.move(task_id, 2, states.PENDING, states.VALIDATED)
    tasks.update(task_id, lambda doc: {**doc, "note": "not a new revision"})
    counted = Insights(redis_client).states(1, "vision")
    assert counted[states.PENDING] == counted[states.VALIDATED] == 1
    assert counted[states.LAUNCHING] == 1  # the note changed no state: nothing counted
