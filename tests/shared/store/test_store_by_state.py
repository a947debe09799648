"""The by-state indexes: one sorted set per scope, a state's tasks a range of its scores.

What the per-state sets did, these do (listing a state, newest first, page by page; the
ids of a state, oldest first; the owner's unfinished tasks), and a store written with the
per-state sets is adopted whole.
"""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest

from shared import state_scores
from shared.access.quotas import QuotaCounter, Quotas
from shared.store.tasks import TaskStore
from shared.task import records, states


def create(tasks: TaskStore, owner: str = "alice") -> str:
    doc, _ = tasks.create(records.new_task({"name": "t", "steps": [["true"]], "env": []},
                                           owner))
    return str(doc["id"])


def walk(tasks: TaskStore, task_id: str, *path: str) -> None:
    for old, new in zip(path, path[1:], strict=False):
        assert tasks.transition(task_id, 1, old, new) is not None


def listing(tasks: TaskStore, **filters: Any) -> list[str]:
    pages, cursor = [], None
    while True:
        page = tasks.page(cursor=cursor, limit=2, **filters)
        pages += [t["id"] for t in page.items]
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


@pytest.fixture
def tasks(redis_client: fakeredis.FakeRedis) -> TaskStore:
    return TaskStore(redis_client)


def test_scores_keep_states_apart_and_tasks_in_creation_order() -> None:
    ranked = [state_scores.score(s, seq) for s in states.ALL for seq in (1, 2, 10**12 - 1)]
    assert ranked == sorted(ranked) and len(set(ranked)) == len(ranked)
    assert all(state_scores.seq_of(s, state_scores.score(s, 7)) == 7 for s in states.ALL)
    finals = [state_scores.base(s) for s in states.FINAL]
    assert min(finals) == state_scores.UNFINISHED_END
    assert all(state_scores.base(s) < state_scores.UNFINISHED_END
               for s in states.ALL if s not in states.FINAL)


def test_a_state_change_moves_the_task_in_one_set_per_scope(
        tasks: TaskStore, redis_client: fakeredis.FakeRedis) -> None:
    task_id = create(tasks)
    walk(tasks, task_id, states.PENDING, states.VALIDATED, states.RESOLVED)
    assert tasks.move(task_id, 1, states.RESOLVED, states.LAUNCHING)
    for key in (tasks.keys.by_state(), tasks.keys.by_state("alice")):
        assert redis_client.zrange(key, 0, -1) == [task_id]  # one member, however it moved
    assert tasks.ids_in_state(states.LAUNCHING) == [task_id]
    assert [k for k in redis_client.keys("*:state:*")] == []  # no set per state


def test_listing_a_state_pages_newest_first_and_keeps_other_states_out(
        tasks: TaskStore) -> None:
    made = [create(tasks, owner="alice" if n % 2 else "bob") for n in range(7)]
    for task_id in made[::3]:
        walk(tasks, task_id, states.PENDING, states.REJECTED)
    pending = [t for t in made if t not in made[::3]]
    assert listing(tasks, state=states.PENDING) == pending[::-1]
    assert listing(tasks, state=states.REJECTED) == made[::3][::-1]
    assert listing(tasks, owner="alice", state=states.PENDING) == [
        t for t in pending[::-1] if tasks.get(t)["owner"] == "alice"]
    assert list(tasks.iter_ids_in_state(states.PENDING, page=2)) == pending
    assert listing(tasks) == made[::-1]  # every state, by creation


def test_the_unfinished_count_is_a_range_of_the_owners_set(
        tasks: TaskStore, redis_client: fakeredis.FakeRedis) -> None:
    counter = QuotaCounter(redis_client, quotas=Quotas(unfinished_tasks=10))
    made = [create(tasks) for _ in range(4)]
    walk(tasks, made[0], states.PENDING, states.REJECTED)
    walk(tasks, made[1], states.PENDING, states.VALIDATED, states.RESOLVED)
    create(tasks, owner="bob")
    assert counter.unfinished("alice") == 3
    assert counter.unfinished("bob") == 1


def old_layout(tasks: TaskStore, redis_client: fakeredis.FakeRedis) -> dict[str, list[str]]:
    """Rewrite the by-state sets as the per-state sets of before; what each held."""
    held: dict[str, list[str]] = {}
    for owner in (None, "alice", "bob"):
        key = tasks.keys.by_state(owner)
        for member, score in redis_client.zrange(key, 0, -1, withscores=True):
            state = next(s for s in reversed(states.ALL) if score >= state_scores.base(s))
            seq = state_scores.seq_of(state, score)
            redis_client.zadd(tasks.keys.old_state_index(state, owner), {member: seq})
            held.setdefault(f"{owner}:{state}", []).append(member)
        redis_client.delete(key)
    return held


def test_a_store_indexed_per_state_is_adopted_whole(
        tasks: TaskStore, redis_client: fakeredis.FakeRedis) -> None:
    made = [create(tasks, owner="alice" if n % 3 else "bob") for n in range(9)]
    for task_id in made[:4]:
        walk(tasks, task_id, states.PENDING, states.VALIDATED)
    walk(tasks, made[0], states.VALIDATED, states.REJECTED)
    before = {(owner, state): listing(tasks, owner=owner, state=state)
              for owner in (None, "alice", "bob") for state in states.ALL}
    held = old_layout(tasks, redis_client)
    assert sum(map(len, held.values())) == 2 * len(made)
    assert listing(tasks, state=states.VALIDATED) == []  # not found until adopted

    assert tasks.adopt_old_state_indexes(chunk=2) == 2 * len(made)
    assert {(owner, state): listing(tasks, owner=owner, state=state)
            for owner in (None, "alice", "bob") for state in states.ALL} == before
    assert redis_client.keys("*:state:*") == []
    assert tasks.adopt_old_state_indexes() == 0  # once adopted, nothing to do
    assert redis_client.exists(tasks.keys.state_indexes_adopted())
    # and a task created afterwards moves as any other
    walk(tasks, made[5], states.PENDING, states.VALIDATED)
    assert made[5] in listing(tasks, owner="alice" if 5 % 3 else "bob",
                              state=states.VALIDATED)
