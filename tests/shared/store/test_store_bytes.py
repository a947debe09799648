"""What a task's records take in Redis: revisions share unchanged long values, and each
owner's stored-bytes counter always equals a recount, down to 0 once their tasks expire.

The attacks of the review: forty creations of 8 x 120 KiB values; a PATCH of one variable
storing the whole env again; finished tasks counted against nothing.
"""

from __future__ import annotations

import base64
import json
import random
import time
from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.access.quotas import QuotaCounter, Quotas
from shared.errors import QuotaExceeded
from shared.secrets import Cipher, new_key
from shared.store.pool import POOL_OVER
from shared.store.tasks import TaskStore
from shared.task import records, states

KIB = 1024
BIG = 120 * KIB


def store(r: Any = None, retention: float = 60, prefix: str = "taskenv") -> TaskStore:
    return TaskStore(r or fakeredis.FakeRedis(), prefix, cipher=Cipher([new_key()]),
                     retention_seconds=retention)


def noise(size: int, seed: str) -> str:
    """Text that does not deflate, as real tokens and data do not: repeated characters
    would be stored in a few bytes and hide what a revision costs.  Base64 of random
    bytes (6 bits a character, as incompressible as letters and digits drawn one by one,
    and 40 times faster to make: the quota tests draw megabytes)."""
    rng = random.Random(seed)
    return base64.b64encode(rng.randbytes(size * 3 // 4 + 3)).decode()[:size]


def big_env(n: int = 8, size: int = BIG, tag: str = "") -> list[dict[str, Any]]:
    return [{"name": f"V{i}", "value": noise(size, f"{tag}{i}")} for i in range(n)]


def create(tasks: TaskStore, env: list[dict[str, Any]], owner: str = "mallory",
           budget: Quotas | None = None) -> str:
    doc = records.new_task({"name": "fill", "steps": [["true"]], "env": env}, owner)
    made = QuotaCounter(tasks.r, quotas=budget).budget(owner) if budget else None
    return str(tasks.create(doc, budget=made)[0]["id"])


def patch(tasks: TaskStore, task_id: str, name: str, value: str,
          budget: Quotas | None = None) -> None:
    def change(doc: dict[str, Any]) -> dict[str, Any]:
        env, _ = records.patch_env(doc["env"], [{"name": name, "value": value}], [])
        return records.new_revision(doc, env, doc["owner"], "patch")
    tasks.update(task_id, change, budget=budget)


def resolve(tasks: TaskStore, task_id: str) -> None:
    """Both stages' writes, as the workers make them: the resolved env holds every value."""
    revision = tasks.get(task_id)["revision"]
    tasks.transition(task_id, revision, states.PENDING, states.VALIDATED, warnings=[])

    def decide(doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        resolved = [{"name": e["name"], "value": e["value"], "source": "user",
                     "overrode": [], "secret": bool(e.get("secret"))} for e in doc["env"]]
        return states.RESOLVED, {"resolved": resolved, "policy_version": 0}
    tasks.advance(task_id, revision, states.VALIDATED, decide)


def finish(tasks: TaskStore, task_id: str) -> None:
    revision = tasks.get(task_id)["revision"]
    tasks.move(task_id, revision, states.RESOLVED, states.LAUNCHING)
    tasks.move(task_id, revision, states.LAUNCHING, states.RUNNING)
    tasks.move(task_id, revision, states.RUNNING, states.SUCCEEDED, exit_code=0)


def agree(tasks: TaskStore, owner: str = "mallory") -> int:
    counted = tasks.stored_bytes(owner)
    assert counted == tasks.recount_bytes(owner)
    return counted


def test_a_patch_of_one_variable_stores_that_variable_not_the_whole_env() -> None:
    tasks = store()
    task_id = create(tasks, big_env())
    resolve(tasks, task_id)
    first = agree(tasks)
    # Deflated where that is shorter; the resolved env shares the env's values.
    assert 8 * BIG * 0.6 < first < 8 * BIG * 1.1
    for n in range(5):
        finish(tasks, task_id)
        patch(tasks, task_id, "V0", noise(BIG, str(n)))
        resolve(tasks, task_id)
    per_revision = (agree(tasks) - first) / 5
    assert 0.6 * BIG < per_revision < BIG + 8 * KIB, per_revision  # was the whole env
    doc = tasks.get(task_id)
    assert {e["name"]: e["value"] for e in doc["env"]}["V0"] == noise(BIG, "4")
    assert [e["value"] for e in tasks.revision(task_id, 1)["env"]] == \
        [e["value"] for e in big_env()]
    assert [v["value"] for v in doc["resolved"]][1:] == [e["value"] for e in big_env()][1:]


def test_a_secret_is_shared_sealed_and_its_id_says_nothing_about_it() -> None:
    r = fakeredis.FakeRedis()
    tasks = store(r)
    secret = "s3cr3t-" * 100
    env = [{"name": "TOKEN", "value": secret, "secret": True}, *big_env(1)]
    a, b = create(tasks, env), create(tasks, env, owner="bob")
    patch(tasks, a, "V0", "changed" * 100)
    assert tasks.get(a)["env"][0]["value"] == secret
    assert tasks.revision(a, 1)["env"][0]["value"] == secret
    dump = b"".join(k + b"".join(x for pair in r.hgetall(k).items() for x in pair)
                    if r.type(k) == b"hash" else k for k in r.keys("*"))
    assert secret[:20].encode() not in dump  # sealed everywhere, the pool included
    pool_a = set(r.hkeys(f"taskenv:task:{a}:vals"))
    pool_b = set(r.hkeys(f"taskenv:task:{b}:vals"))
    assert len(pool_a) == 3 and len(pool_b) == 2  # the secret shared by both revisions
    assert not pool_a & pool_b  # the same secret in two tasks: nothing in common


def test_short_values_stay_where_they_are_used() -> None:
    r = fakeredis.FakeRedis()
    tasks = store(r)
    create(tasks, [{"name": "LR", "value": "x" * (POOL_OVER - 1)}])
    assert not r.keys("*:vals")


def test_the_bytes_quota_refuses_creations_and_revisions_naming_it() -> None:
    tasks = store()
    limit = 3 * 8 * BIG + 16 * KIB  # three tasks of 8 x 120 KiB, with their records
    quota = Quotas(0, 0, 0, stored_bytes=limit)
    made = [create(tasks, big_env(tag=str(i)), budget=quota) for i in range(2)]
    with pytest.raises(QuotaExceeded) as refused:
        for i in range(2, 40):  # the review's forty creations
            create(tasks, big_env(tag=str(i)), budget=quota)
    (problem,) = refused.value.problems
    assert (problem.rule, problem.limit) == ("quota.stored_bytes", limit)
    assert "mallory" in problem.message
    stored = agree(tasks)
    assert stored <= limit and len(tasks.all_ids()) == 3
    patch(tasks, made[0], "V0", "small")  # a change that stores little passes
    with pytest.raises(QuotaExceeded, match="stored_bytes|bytes"):
        patch(tasks, made[0], "V1", noise(2 * BIG, "grow"), budget=quota)
    assert tasks.get(made[0])["revision"] == 2  # the refused change wrote nothing
    assert agree(tasks) > stored


def test_the_count_is_zero_once_the_owners_tasks_have_expired() -> None:
    r = fakeredis.FakeRedis()
    tasks = store(r, retention=1e-6)
    for i in range(3):
        task_id = create(tasks, big_env(2, tag=str(i)))
        resolve(tasks, task_id)
        finish(tasks, task_id)
    assert agree(tasks) > 0
    while tasks.expire_finished(time.time()):
        pass
    assert tasks.stored_bytes("mallory") == 0 == tasks.recount_bytes("mallory")
    assert not r.exists("taskenv:quota:bytes:user:mallory")
    assert not r.keys("taskenv:task:*")


def test_a_record_stored_before_counting_loads_and_is_counted_from_its_next_write() -> None:
    r = fakeredis.FakeRedis()
    tasks = store(r)
    task_id = create(tasks, big_env(2))
    # As stored before: no count, no pool; every value inline in the revision's hash.
    r.hdel(f"taskenv:task:{task_id}", "bytes")
    r.delete("taskenv:quota:bytes:user:mallory")
    r.hset(f"taskenv:task:{task_id}:rev:1", "env", json.dumps(big_env(2)))
    r.hdel(f"taskenv:task:{task_id}:rev:1", "refs")
    r.delete(f"taskenv:task:{task_id}:vals")
    assert tasks.get(task_id)["env"] == big_env(2)
    assert tasks.stored_bytes("mallory") == 0 == tasks.recount_bytes("mallory")
    resolve(tasks, task_id)  # its first write measures it whole
    assert agree(tasks) > 2 * BIG
    finish(tasks, task_id)
    patch(tasks, task_id, "V0", "new")
    assert tasks.get(task_id)["env"][1]["value"] == big_env(2)[1]["value"]
    agree(tasks)


def test_rotation_reseals_pooled_secrets_and_keeps_the_count() -> None:
    r = fakeredis.FakeRedis()
    old = new_key()
    tasks = TaskStore(r, cipher=Cipher([old]))
    secret = "k" * 400
    task_id = create(tasks, [{"name": "KEY", "value": secret, "secret": True}])
    resolve(tasks, task_id)
    before = agree(tasks)
    fresh = new_key()
    TaskStore(r, cipher=Cipher([fresh, old])).reseal(task_id)
    only_new = TaskStore(r, cipher=Cipher([fresh]))  # the old key dropped
    assert only_new.get(task_id)["env"][0]["value"] == secret
    assert only_new.get(task_id)["resolved"][0]["value"] == secret
    assert agree(tasks) == before


def test_a_reseal_between_a_stages_read_and_its_write_makes_the_write_read_again() -> None:
    """A stage's write replaces fields of the sizes it read (the script trusts them at an
    unchanged ``v``); a reseal rewrites the revision's hash meanwhile, so it must move
    ``v``: the stage's write is refused, read again and counted from the new sizes."""
    r = fakeredis.FakeRedis()
    old, fresh = new_key(), new_key()
    tasks = TaskStore(r, cipher=Cipher([old, fresh]))  # opens what the reseal seals
    task_id = create(tasks, [{"name": "KEY", "value": "k" * 300, "secret": True},
                             {"name": "LR", "value": "0.1"}])
    revision = tasks.get(task_id)["revision"]
    tasks.transition(task_id, revision, states.PENDING, states.VALIDATED, warnings=[])
    decided = []

    def decide(doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        decided.append(doc["state"])
        if len(decided) == 1:  # between this read and its write
            TaskStore(r, cipher=Cipher([fresh, old])).reseal(task_id)
        resolved = [{"name": e["name"], "value": e["value"], "source": "user",
                     "overrode": [], "secret": bool(e.get("secret"))} for e in doc["env"]]
        return states.RESOLVED, {"resolved": resolved, "policy_version": 0}

    assert tasks.advance(task_id, revision, states.VALIDATED, decide) is not None
    assert decided == [states.VALIDATED, states.VALIDATED]
    agree(tasks)


# --- the counter against a recount, after any mix of what changes a record ---------------

OPS = st.lists(st.tuples(st.sampled_from(["create", "patch", "resolve", "finish", "expire",
                                          "secret"]),
                         st.integers(0, 5), st.integers(1, 700)), min_size=1, max_size=25)


# 40 mixes, or fewer when the active profile asks for fewer (make check)
@settings(max_examples=min(40, settings.default.max_examples), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_the_counter_equals_a_recount_after_any_mix_of_operations(
        ops: list[tuple[str, int, int]]) -> None:
    run_mix(store(fakeredis.FakeRedis(), retention=1e-6), ops)


def run_mix(tasks: TaskStore, ops: list[tuple[str, int, int]]) -> None:
    """Apply ``ops``; after each, every owner's counter equals a recount; at the end,
    with every task finished and expired, both are 0."""
    owners = ["mallory", "bob"]
    made: list[str] = []
    for op, pick, size in ops:
        owner = owners[pick % 2]
        live = [t for t in made if tasks.find(t) is not None]
        target = live[pick % len(live)] if live else None
        doc = tasks.get(target) if target else None
        if op == "create" or target is None or doc is None:
            made.append(create(tasks, big_env(1 + pick % 3, size * 3, tag=str(size)),
                               owner=owner))
        elif op == "secret" and doc["state"] in states.FINAL:
            def change(d: dict[str, Any], size: int = size) -> dict[str, Any]:
                env = [*d["env"], {"name": f"S{size}", "value": "q" * (size + 8),
                                   "secret": True}]
                env = list({e["name"]: e for e in env}.values())
                return records.new_revision(d, env, d["owner"], "patch")
            tasks.update(target, change)
        elif op == "patch" and doc["state"] in states.FINAL:
            patch(tasks, target, f"V{pick % 4}", "p" * size)
        elif op == "resolve" and doc["state"] == states.PENDING:
            resolve(tasks, target)
        elif op == "finish" and doc["state"] == states.RESOLVED:
            finish(tasks, target)
        elif op == "expire":
            tasks.expire_finished(time.time())
        for who in owners:
            agree(tasks, who)
    for task_id in made:
        doc = tasks.find(task_id)
        if doc is None:
            continue
        if doc["state"] == states.PENDING:
            resolve(tasks, task_id)
        if tasks.get(task_id)["state"] == states.RESOLVED:
            finish(tasks, task_id)
    while tasks.expire_finished(time.time()):
        pass
    for who in owners:
        assert tasks.stored_bytes(who) == 0 == tasks.recount_bytes(who)
