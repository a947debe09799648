"""TaskStore and PolicyStore on fakeredis: records, indexes, transitions, policy versions."""

from __future__ import annotations

import json
import time
from typing import Any

import fakeredis
import pytest

from shared.env.envlist import EnvVar
from shared.errors import NotFound, SecretsUnavailable
from shared.policy.model import Policy, Protected
from shared.policy.store import PolicyStore
from shared.secrets import Cipher, new_key
from shared.store.tasks import TaskStore
from shared.task import records, states


@pytest.fixture
def tasks(redis_client: fakeredis.FakeRedis) -> TaskStore:
    return TaskStore(redis_client)


@pytest.fixture
def policies(redis_client: fakeredis.FakeRedis) -> PolicyStore:
    return PolicyStore(redis_client)


def new_doc(name: str = "train", owner: str = "alice",
            env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return records.new_task({"name": name, "steps": [["true"]], "env": env or []}, owner)


def create(tasks: TaskStore, **kwargs: Any) -> str:
    doc, created = tasks.create(new_doc(**kwargs))
    assert created
    return doc["id"]


def ids(page_items: list[dict[str, Any]]) -> list[str]:
    return [d["id"] for d in page_items]


def task_keys(redis_client: fakeredis.FakeRedis) -> list[str]:
    """Task records (one hash per task), not their revisions or logs."""
    return [k for k in redis_client.keys("taskenv:task:*") if k.count(":") == 2]


# --- create / get ------------------------------------------------------------------------

def test_create_without_a_key_always_makes_a_new_task(tasks: TaskStore) -> None:
    first, second = create(tasks), create(tasks)
    assert first != second
    assert tasks.get(first)["id"] == first


def test_create_stores_the_record_as_given(tasks: TaskStore) -> None:
    task_id = create(tasks, name="resnet", env=[{"name": "A", "value": "数据"}])
    doc = tasks.get(task_id)
    assert doc["name"] == "resnet" and doc["env"] == [{"name": "A", "value": "数据"}]
    assert doc["state"] == states.PENDING and doc["revision"] == 1


def test_same_idempotency_key_returns_the_same_task(tasks: TaskStore,
                                                    redis_client: fakeredis.FakeRedis) -> None:
    first, created_first = tasks.create(new_doc(), "key-1")
    again, created_again = tasks.create(new_doc(), "key-1")
    assert created_first and not created_again
    assert again["id"] == first["id"]
    assert len(task_keys(redis_client)) == 1
    assert ids(tasks.page().items) == [first["id"]]


def test_different_idempotency_keys_make_different_tasks(tasks: TaskStore) -> None:
    a, _ = tasks.create(new_doc(), "key-1")
    b, _ = tasks.create(new_doc(), "key-2")
    assert a["id"] != b["id"]


def test_idempotency_keys_are_per_owner(tasks: TaskStore) -> None:
    a, _ = tasks.create(new_doc(owner="alice"), "key")
    b, created = tasks.create(new_doc(owner="bob"), "key")
    assert created and a["id"] != b["id"]


def test_idempotency_key_expires(tasks: TaskStore, redis_client: fakeredis.FakeRedis) -> None:
    tasks.create(new_doc(), "key")
    ttl = redis_client.ttl(tasks.keys.idempotency("alice", "key"))
    assert 0 < ttl <= TaskStore.IDEMPOTENCY_TTL


def test_get_unknown_task_raises_not_found(tasks: TaskStore) -> None:
    with pytest.raises(NotFound):
        tasks.get("no-such-task")
    assert tasks.find("no-such-task") is None


# --- transitions -------------------------------------------------------------------------

def test_transition_from_the_expected_state_moves_and_records_an_event(tasks: TaskStore) -> None:
    task_id = create(tasks)
    doc = tasks.transition(task_id, 1, states.PENDING, states.VALIDATED)
    assert doc is not None and doc["state"] == states.VALIDATED
    stored = tasks.get(task_id)
    assert stored["state"] == states.VALIDATED
    assert [e["state"] for e in stored["events"]] == [states.PENDING, states.VALIDATED]


def test_transition_stores_the_changes(tasks: TaskStore) -> None:
    task_id = create(tasks)
    tasks.transition(task_id, 1, states.PENDING, states.REJECTED,
                     errors=[{"rule": "name.shell", "message": "m"}])
    assert tasks.get(task_id)["errors"] == [{"rule": "name.shell", "message": "m"}]


def test_second_identical_transition_is_a_no_op(tasks: TaskStore) -> None:
    task_id = create(tasks)
    assert tasks.transition(task_id, 1, states.PENDING, states.VALIDATED) is not None
    before = tasks.get(task_id)
    assert tasks.transition(task_id, 1, states.PENDING, states.VALIDATED) is None
    assert tasks.get(task_id) == before


def test_transition_from_another_state_is_a_no_op(tasks: TaskStore) -> None:
    task_id = create(tasks)
    assert tasks.transition(task_id, 1, states.VALIDATED, states.RESOLVED) is None
    assert tasks.get(task_id)["state"] == states.PENDING


def test_transition_for_another_revision_is_a_no_op(tasks: TaskStore) -> None:
    task_id = create(tasks)
    assert tasks.transition(task_id, 2, states.PENDING, states.VALIDATED) is None
    assert tasks.get(task_id)["state"] == states.PENDING


def test_transition_accepts_a_set_of_expected_states(tasks: TaskStore) -> None:
    task_id = create(tasks)
    moved = tasks.transition(task_id, 1, {states.PENDING, states.VALIDATED}, states.FAILED,
                             reason="r")
    assert moved is not None and moved["reason"] == "r"


def test_transition_of_an_unknown_task_raises_not_found(tasks: TaskStore) -> None:
    with pytest.raises(NotFound):
        tasks.transition("nope", 1, states.PENDING, states.VALIDATED)


def test_update_returning_none_writes_nothing(
        tasks: TaskStore, redis_client: fakeredis.FakeRedis) -> None:
    task_id = create(tasks)
    v = redis_client.hget(tasks.keys.task(task_id), "v")
    assert tasks.update(task_id, lambda doc: None) is None
    assert redis_client.hget(tasks.keys.task(task_id), "v") == v


def test_update_makes_a_new_revision(tasks: TaskStore) -> None:
    task_id = create(tasks, env=[{"name": "A", "value": "1"}])
    tasks.transition(task_id, 1, states.PENDING, states.REJECTED)
    doc = tasks.update(task_id, lambda d: records.new_revision(
        d, [{"name": "A", "value": "2"}], "alice", "patch"))
    assert doc is not None and doc["revision"] == 2
    assert tasks.get(task_id)["state"] == states.PENDING
    assert ids(tasks.page(state=states.PENDING).items) == [task_id]
    assert tasks.page(state=states.REJECTED).items == []


# --- state indexes -----------------------------------------------------------------------

WALK = [states.PENDING, states.VALIDATED, states.RESOLVED, states.LAUNCHING, states.RUNNING,
        states.SUCCEEDED]


def test_state_indexes_follow_every_transition(tasks: TaskStore) -> None:
    task_id = create(tasks)
    for old, new in zip(WALK, WALK[1:], strict=False):
        tasks.transition(task_id, 1, old, new)
        assert ids(tasks.page(state=new).items) == [task_id]
        assert tasks.page(state=old).items == []
        assert ids(tasks.page(owner="alice", state=new).items) == [task_id]
        assert tasks.page(owner="alice", state=old).items == []
        assert tasks.ids_in_state(new) == [task_id]
    assert ids(tasks.page().items) == [task_id]


def test_state_filter_keeps_other_tasks_out(tasks: TaskStore) -> None:
    rejected, pending = create(tasks), create(tasks)
    tasks.transition(rejected, 1, states.PENDING, states.REJECTED)
    assert ids(tasks.page(state=states.REJECTED).items) == [rejected]
    assert ids(tasks.page(state=states.PENDING).items) == [pending]


# --- listing -----------------------------------------------------------------------------

def all_pages(tasks: TaskStore, limit: int, **filters: Any) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        page = tasks.page(cursor=cursor, limit=limit, **filters)
        pages.append(ids(page.items))
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


def test_list_is_newest_first_across_pages_without_gaps_or_repeats(tasks: TaskStore) -> None:
    created = [create(tasks, name=f"t{i}") for i in range(7)]
    pages = all_pages(tasks, limit=3)
    assert [len(p) for p in pages] == [3, 3, 1]
    flat = [task_id for page in pages for task_id in page]
    assert flat == list(reversed(created))


def test_list_with_an_exact_multiple_of_the_limit_ends_cleanly(tasks: TaskStore) -> None:
    created = [create(tasks) for _ in range(4)]
    pages = all_pages(tasks, limit=2)
    assert pages == [list(reversed(created))[:2], list(reversed(created))[2:]]


def test_list_of_nothing_is_one_empty_page(tasks: TaskStore) -> None:
    page = tasks.page()
    assert page.items == [] and page.next_cursor is None


def test_list_pages_within_a_state(tasks: TaskStore) -> None:
    created = [create(tasks) for _ in range(6)]
    for task_id in created[::2]:
        tasks.transition(task_id, 1, states.PENDING, states.REJECTED)
    flat = [t for page in all_pages(tasks, limit=2, state=states.REJECTED) for t in page]
    assert flat == list(reversed(created[::2]))


def test_list_filters_by_owner(tasks: TaskStore) -> None:
    alice = [create(tasks, owner="alice") for _ in range(3)]
    bob = [create(tasks, owner="bob") for _ in range(2)]
    assert ids(tasks.page(owner="alice").items) == list(reversed(alice))
    assert ids(tasks.page(owner="bob").items) == list(reversed(bob))
    assert len(tasks.page().items) == 5
    assert tasks.page(owner="carol").items == []


def in_project(tasks: TaskStore, project: str, owner: str) -> str:
    doc, created = tasks.create({**new_doc(owner=owner), "project": project})
    assert created
    return str(doc["id"])


def test_list_of_a_project_pages_its_tasks_of_every_owner_and_state(
        tasks: TaskStore, redis_client: fakeredis.FakeRedis) -> None:
    vision = [in_project(tasks, "vision", owner) for owner in ("alice", "erin", "alice")]
    in_project(tasks, "speech", "bob")
    create(tasks, owner="alice")  # in no project
    tasks.transition(vision[0], 1, states.PENDING, states.REJECTED)
    assert all_pages(tasks, limit=2, project="vision") == [[vision[2], vision[1]], [vision[0]]]
    first = tasks.page(project="vision", limit=1).items[0]
    assert set(first) == {"id", "name", "owner", "project", "state", "revision",
                          "created_at", "updated_at"}  # a summary: no env
    redis_client.delete(tasks.keys.task(vision[1]))  # expired since the index was read
    assert ids(tasks.page(project="vision").items) == [vision[2], vision[0]]
    assert tasks.page(project="nowhere").items == []


def test_a_projects_index_is_not_split_by_owner_or_state(tasks: TaskStore) -> None:
    for split in ({"owner": "alice"}, {"state": states.PENDING}):
        with pytest.raises(ValueError, match="every state, of every owner"):
            tasks.page(project="vision", **split)


def test_list_pages_within_an_owner(tasks: TaskStore) -> None:
    alice = []
    for i in range(5):
        alice.append(create(tasks, owner="alice"))
        create(tasks, owner=f"other{i}")
    flat = [t for page in all_pages(tasks, limit=2, owner="alice") for t in page]
    assert flat == list(reversed(alice))


def test_load_many_leaves_what_creating_one_by_one_leaves(
        redis_client: fakeredis.FakeRedis) -> None:
    by_one, loaded = TaskStore(redis_client, prefix="one"), TaskStore(redis_client, prefix="many")
    docs = [new_doc(owner="alice" if n % 2 else "bob") for n in range(5)]
    for n, doc in enumerate(docs):
        by_one.create(dict(doc, id=f"t{n}"))
    loaded.load_many((dict(doc, id=f"t{n}") for n, doc in enumerate(docs)), batch=2)
    assert loaded.all_ids() == by_one.all_ids() == [f"t{n}" for n in range(5)]
    assert ids(loaded.page(owner="bob").items) == ids(by_one.page(owner="bob").items)
    assert ids(loaded.page(state=states.PENDING, limit=2).items) == ["t4", "t3"]
    assert loaded.get("t3") == by_one.get("t3")


# --- logs --------------------------------------------------------------------------------

def test_logs_append_and_read_per_revision(tasks: TaskStore) -> None:
    task_id = create(tasks)
    tasks.append_log(task_id, 1, "line one\n")
    tasks.append_log(task_id, 1, "数据 line two\n")
    tasks.append_log(task_id, 2, "revision two\n")
    assert tasks.read_log(task_id, 1) == "line one\n数据 line two\n"
    assert tasks.read_log(task_id, 2) == "revision two\n"
    assert tasks.read_log(task_id, 3) == ""


def test_logs_stop_growing_past_the_limit(tasks: TaskStore) -> None:
    tasks.LOG_LIMIT = 10
    task_id = create(tasks)
    for _ in range(5):
        tasks.append_log(task_id, 1, "12345678\n")
    assert len(tasks.read_log(task_id, 1)) < 10 + len("12345678\n")


# --- keys and secrets at rest ----------------------------------------------------------

SECRET = "s3cr3t-value-at-rest"


def everything_in_redis(redis_client: fakeredis.FakeRedis) -> str:
    """Every key and every string, hash and sorted-set member, as one text."""
    parts = []
    for key in redis_client.keys("*"):
        parts.append(key)
        kind = redis_client.type(key)
        if kind == "string":
            parts.append(redis_client.get(key))
        elif kind == "hash":
            parts += [f"{k}={v}" for k, v in redis_client.hgetall(key).items()]
        elif kind == "zset":
            parts += redis_client.zrange(key, 0, -1)
    return "\n".join(parts)


def secret_task(store: TaskStore) -> str:
    env = [{"name": "PLAIN", "value": "visible"},
           {"name": "TOKEN", "value": SECRET, "secret": True}]
    doc, _ = store.create(new_doc(env=env), "idem-key")
    return doc["id"]


def test_every_key_is_namespaced_and_no_key_holds_a_secret(
        redis_client: fakeredis.FakeRedis) -> None:
    cipher = Cipher([new_key()])
    store = TaskStore(redis_client, prefix="tenant-a", cipher=cipher)
    task_id = secret_task(store)
    store.transition(task_id, 1, states.PENDING, states.VALIDATED)
    store.append_log(task_id, 1, "x")
    PolicyStore(redis_client, prefix="tenant-a", cipher=cipher).put(
        Policy(defaults=(EnvVar("D", SECRET, True),)))
    keys = redis_client.keys("*")
    assert keys and all(k.startswith("tenant-a:") for k in keys), keys
    assert not any(SECRET in k for k in keys)


def test_secret_values_are_sealed_at_rest_and_opened_on_read(
        redis_client: fakeredis.FakeRedis) -> None:
    store = TaskStore(redis_client, cipher=Cipher([new_key()]))
    task_id = secret_task(store)
    store.transition(task_id, 1, states.PENDING, states.VALIDATED,
                     resolved=[{"name": "TOKEN", "value": SECRET, "source": "user",
                                "overrode": [], "secret": True}])
    store.update(task_id, lambda d: records.new_revision(d, d["env"], "alice", "rerun"))
    assert SECRET not in everything_in_redis(redis_client)
    doc = store.get(task_id)
    assert {e["name"]: e["value"] for e in doc["env"]} == {"PLAIN": "visible", "TOKEN": SECRET}
    assert store.revision(task_id, 1)["resolved"][0]["value"] == SECRET
    assert ids(store.page().items) == [task_id]
    assert "visible" in everything_in_redis(redis_client)  # only secrets are sealed


def test_policy_secrets_are_sealed_at_rest(redis_client: fakeredis.FakeRedis) -> None:
    policies = PolicyStore(redis_client, cipher=Cipher([new_key()]))
    policy = Policy(defaults=(EnvVar("D", SECRET, True),),
                    protected=(Protected("P", "reason", SECRET + "-p", True),))
    stored = policies.put(policy)
    assert SECRET not in everything_in_redis(redis_client)
    assert stored.defaults[0].value == SECRET
    assert stored.protected[0].value == SECRET + "-p"


def test_a_secret_without_a_key_is_refused(
        tasks: TaskStore, redis_client: fakeredis.FakeRedis) -> None:
    with pytest.raises(SecretsUnavailable):
        secret_task(tasks)
    assert SECRET not in everything_in_redis(redis_client)


def test_a_secret_sealed_with_another_key_cannot_be_read(redis_client: fakeredis.FakeRedis) -> None:
    task_id = secret_task(TaskStore(redis_client, cipher=Cipher([new_key()])))
    with pytest.raises(SecretsUnavailable):
        TaskStore(redis_client, cipher=Cipher([new_key()])).get(task_id)


def test_an_old_key_still_opens_after_rotation(redis_client: fakeredis.FakeRedis) -> None:
    old, new = new_key(), new_key()
    task_id = secret_task(TaskStore(redis_client, cipher=Cipher([old])))
    rotated = TaskStore(redis_client, cipher=Cipher([new, old]))
    assert rotated.get(task_id)["env"][1]["value"] == SECRET


# --- policies ----------------------------------------------------------------------------

def sample_policy(value: str = "WARN") -> Policy:
    return Policy(defaults=(EnvVar("NCCL_DEBUG", value),),
                  protected=(Protected("HTTPS_PROXY", "egress", "http://proxy"),
                             Protected("CUDA_VISIBLE_DEVICES", "scheduler")),
                  on_conflict="drop", author="admin", created_at=123.0)


def test_no_policy_yet_is_version_zero_and_empty(policies: PolicyStore) -> None:
    assert policies.current() == Policy()
    assert policies.current().version == 0
    assert policies.versions() == []


def test_version_zero_is_the_empty_policy(policies: PolicyStore) -> None:
    policies.put(sample_policy())
    assert policies.get(0) == Policy()


def test_put_numbers_versions_from_one(policies: PolicyStore) -> None:
    first = policies.put(sample_policy("WARN"))
    second = policies.put(sample_policy("INFO"))
    assert (first.version, second.version) == (1, 2)
    assert policies.versions() == [1, 2]
    assert policies.current() == second


def test_put_returns_what_was_stored(policies: PolicyStore) -> None:
    stored = policies.put(sample_policy())
    assert stored == Policy.from_dict({**sample_policy().to_dict(), "version": 1})


def test_old_versions_stay_as_written(policies: PolicyStore) -> None:
    first = policies.put(sample_policy("WARN"))
    policies.put(sample_policy("INFO"))
    assert policies.get(1) == first
    assert policies.get(1).defaults[0].value == "WARN"


def test_put_ignores_the_version_it_is_given(policies: PolicyStore) -> None:
    stored = policies.put(Policy(version=99))
    assert stored.version == 1


@pytest.mark.parametrize("version", [1, 5, -1])
def test_missing_version_raises_not_found(policies: PolicyStore, version: int) -> None:
    with pytest.raises(NotFound):
        policies.get(version)


# --- revisions in their own keys, migration, retention -----------------------------------

def written_bytes(redis_client: fakeredis.FakeRedis, action: Any) -> int:
    """Bytes of every command ``action`` sends to Redis (what a write costs)."""
    sent: list[int] = []
    real = redis_client.execute_command

    def counting(*args: Any, **kwargs: Any) -> Any:
        sent.append(sum(len(str(a)) for a in args))
        return real(*args, **kwargs)

    redis_client.execute_command = counting  # type: ignore[method-assign]
    try:
        action()
    finally:
        redis_client.execute_command = real  # type: ignore[method-assign]
    return sum(sent)


def test_a_state_change_costs_the_same_after_many_big_revisions(
        tasks: TaskStore, redis_client: fakeredis.FakeRedis) -> None:
    big = [{"name": f"VAR_{i}", "value": "x" * 200} for i in range(100)]
    young, _ = tasks.create(new_doc())
    old, _ = tasks.create(new_doc())
    for _ in range(30):
        tasks.update(old["id"], lambda d: records.new_revision(d, big, "alice", "patch"))
    revision = tasks.get(old["id"])["revision"]
    young_cost = written_bytes(redis_client, lambda: tasks.transition(
        young["id"], 1, states.PENDING, states.VALIDATED))
    old_cost = written_bytes(redis_client, lambda: tasks.transition(
        old["id"], revision, states.PENDING, states.VALIDATED))
    # The old task's current env is 20 KB: a transition must not carry it, nor history.
    assert old_cost < young_cost * 1.5, (young_cost, old_cost)
    assert len(redis_client.hget(tasks.keys.task(old["id"]), "revision")) < 10


def test_each_revision_keeps_its_env_and_outcome(tasks: TaskStore) -> None:
    doc, _ = tasks.create(new_doc(env=[{"name": "A", "value": "1"}]))
    tasks.transition(doc["id"], 1, states.PENDING, states.REJECTED,
                     errors=[{"rule": "x", "message": "m"}])
    tasks.update(doc["id"], lambda d: records.new_revision(
        d, [{"name": "A", "value": "2"}], "bob", "patch"))
    first, second = tasks.revision(doc["id"], 1), tasks.revision(doc["id"], 2)
    assert first["env"] == [{"name": "A", "value": "1"}]
    assert first["state"] == states.REJECTED and first["errors"][0]["rule"] == "x"
    assert second["env"] == [{"name": "A", "value": "2"}] and second["errors"] == []
    summary = tasks.revisions(doc["id"], 2)
    assert [(s["revision"], s["state"], s["how"]) for s in summary] == [
        (1, states.REJECTED, "create"), (2, states.PENDING, "patch")]
    assert summary[1]["made_by"] == "bob"


def test_a_record_from_before_revision_keys_is_read_and_converted(
        redis_client: fakeredis.FakeRedis) -> None:
    cipher = Cipher([new_key()])
    store = TaskStore(redis_client, cipher=cipher)
    sealed = [{"name": "TOKEN", "sealed": cipher.seal(SECRET), "secret": True}]
    legacy = {**records.new_task({"name": "old", "steps": [["true"]], "env": []}, "alice"),
              "id": "legacy1", "revision": 2, "state": states.SUCCEEDED, "env": sealed,
              "history": [{"revision": 1, "state": states.FAILED, "env": sealed,
                           "errors": [], "warnings": [], "resolved": None,
                           "policy_version": 3, "exit_code": 1, "reason": "boom"}]}
    redis_client.hset(store.keys.task("legacy1"), mapping={"doc": json.dumps(legacy),
                                                "state": states.SUCCEEDED, "v": 4, "seq": 1})
    redis_client.zadd(store.keys.index(), {"legacy1": 1})
    doc = store.get("legacy1")
    assert doc["revision"] == 2 and doc["state"] == states.SUCCEEDED
    assert doc["env"][0]["value"] == SECRET
    assert store.revision("legacy1", 1)["reason"] == "boom"
    assert redis_client.hget(store.keys.task("legacy1"), "doc") is None  # converted once
    assert SECRET not in everything_in_redis(redis_client)
    assert [t["name"] for t in store.page().items] == ["old"]


def test_finished_tasks_expire_whole_and_leave_no_index_entry(
        redis_client: fakeredis.FakeRedis) -> None:
    store = TaskStore(redis_client, retention_seconds=60)
    done, _ = store.create(new_doc())
    busy, _ = store.create(new_doc())
    store.transition(done["id"], 1, states.PENDING, states.REJECTED, errors=[])
    store.append_log(done["id"], 1, "output")
    now = time.time()
    assert store.expire_finished(now) == 0  # not yet due
    assert store.expire_finished(now + 61) == 1
    assert store.find(done["id"]) is None
    assert [k for k in redis_client.keys("*") if done["id"] in k] == []
    assert ids(store.page().items) == [busy["id"]]
    assert ids(store.page(state=states.REJECTED).items) == []
    assert store.find(busy["id"]) is not None


def test_a_rerun_takes_a_finished_task_off_the_expiry_schedule(
        redis_client: fakeredis.FakeRedis) -> None:
    store = TaskStore(redis_client, retention_seconds=60)
    doc, _ = store.create(new_doc())
    store.transition(doc["id"], 1, states.PENDING, states.REJECTED, errors=[])
    store.update(doc["id"], lambda d: records.new_revision(d, [], "alice", "rerun"))
    assert store.expire_finished(time.time() + 3600) == 0
    assert store.get(doc["id"])["revision"] == 2
