"""Logs count in their owner's stored bytes: appended, trimmed, replaced and expired, the
counter always equals a recount; a full quota refuses the owner's next task (409, naming
the quota) and stops only that owner's output, with a line saying so."""

from __future__ import annotations

import random
import time
from typing import Any

import fakeredis
import pytest

from api.errors import status_for
from shared.access.quotas import LOG_FULL_NOTE, Quotas
from shared.errors import QuotaExceeded
from shared.store.logtail import MAX_CHUNK, pieces
from shared.store.tasks import TaskStore
from shared.task import states
from tests.shared.store.test_store_bytes import agree, create, finish, patch, resolve, store

KIB = 1024
OPS = ["create", "log", "log", "log", "again", "resolve", "finish", "patch", "expire"]


def small_task(tasks: TaskStore, owner: str, quota: Quotas | None = None) -> str:
    return create(tasks, [{"name": "A", "value": "1"}], owner=owner, budget=quota)


def log_of(tasks: TaskStore, task_id: str) -> str:
    return tasks.read_log(task_id, 1)


def test_a_log_append_counts_in_its_owners_stored_bytes_and_its_tasks_size() -> None:
    tasks = store()
    task_id = small_task(tasks, "mallory")
    before = agree(tasks)
    assert tasks.append_log(task_id, 1, "x" * 1000 + "✓\n") == 1004
    assert agree(tasks) == before + 1004
    assert tasks.r.hget(tasks.keys.task(task_id), "bytes") == str(before + 1004).encode()
    assert "bytes" not in tasks.get(task_id) and "bytes_allowed" not in tasks.get(task_id)


def test_a_trimmed_or_replaced_log_counts_what_it_keeps() -> None:
    tasks = store()
    tasks.LOG_LIMIT = 64
    task_id = small_task(tasks, "mallory")
    record = agree(tasks)
    for n in range(40):
        tasks.append_log(task_id, 1, f"line {n} ✓\n")
        assert agree(tasks) == record + len(log_of(tasks, task_id).encode())
    tasks.logs.replace(task_id, 1, "again\n")
    assert agree(tasks) == record + 6


def test_expiry_gives_the_logs_bytes_back() -> None:
    tasks = store(retention=1e-6)
    for n in range(3):
        task_id = small_task(tasks, "mallory")
        resolve(tasks, task_id)
        tasks.append_log(task_id, 1, f"output {n}\n" * 5000)
        finish(tasks, task_id)
        tasks.append_log(task_id, 1, "after the end\n")  # the reconciler's last read
    assert agree(tasks) > 3 * 40_000
    while tasks.expire_finished(time.time()):
        pass
    assert tasks.stored_bytes("mallory") == 0 == tasks.recount_bytes("mallory")
    assert not tasks.r.keys("*:log:*")


def test_a_full_quota_refuses_the_owners_next_task_with_a_409_naming_it() -> None:
    tasks = store()
    limit = 64 * KIB
    quota = Quotas(0, 0, 0, stored_bytes=limit)
    task_id = small_task(tasks, "mallory", quota)
    tasks.append_log(task_id, 1, "y" * limit)
    with pytest.raises(QuotaExceeded) as refused:
        small_task(tasks, "mallory", quota)
    (problem,) = refused.value.problems
    used = tasks.stored_bytes("mallory")
    assert (problem.rule, problem.limit) == ("quota.stored_bytes", limit)
    assert status_for(refused.value) == 409
    for said in ("quota.stored_bytes", "user:mallory", "logs", str(used), str(limit)):
        assert said in problem.message, said
    assert small_task(tasks, "bob", quota)  # another owner's is accepted


def test_a_full_quota_stops_the_owners_output_once_and_never_anothers() -> None:
    tasks = store()
    limit = 32 * KIB
    quota = Quotas(0, 0, 0, stored_bytes=limit)
    mine, theirs = small_task(tasks, "mallory", quota), small_task(tasks, "bob", quota)
    for _ in range(10):  # 40 KiB of output in 4 KiB lines: past the quota
        tasks.append_log(mine, 1, "m" * (4 * KIB - 1) + "\n")
        tasks.append_log(theirs, 1, "b" * 1023 + "\n")
    kept = log_of(tasks, mine)
    assert kept.endswith(LOG_FULL_NOTE) and kept.count("taskenv: output dropped") == 1
    assert set(kept[:-len(LOG_FULL_NOTE)]) <= {"m", "\n"}
    assert tasks.stored_bytes("mallory") <= limit
    assert agree(tasks) == tasks.recount_bytes("mallory")
    assert log_of(tasks, theirs) == ("b" * 1023 + "\n") * 10  # bob's output all kept
    assert agree(tasks, "bob") < limit


def test_output_past_the_quota_is_kept_to_a_characters_end() -> None:
    tasks = store()
    quota = Quotas(0, 0, 0, stored_bytes=8 * KIB)
    task_id = small_task(tasks, "mallory", quota)
    tasks.append_log(task_id, 1, "✓" * 4000)  # 12,000 bytes
    kept = log_of(tasks, task_id)  # decodes: no character was cut
    assert kept.endswith(LOG_FULL_NOTE) and set(kept[:-len(LOG_FULL_NOTE)]) == {"✓"}
    assert agree(tasks) <= 8 * KIB


def test_output_goes_on_once_finished_tasks_expire() -> None:
    tasks = store(retention=1e-6)
    quota = Quotas(0, 0, 0, stored_bytes=32 * KIB)
    old, running = small_task(tasks, "mallory", quota), small_task(tasks, "mallory", quota)
    tasks.append_log(old, 1, "o" * 20 * KIB)
    resolve(tasks, old)
    finish(tasks, old)
    tasks.append_log(running, 1, "r" * 20 * KIB)
    assert log_of(tasks, running).endswith(LOG_FULL_NOTE)
    while tasks.expire_finished(time.time()):
        pass
    tasks.append_log(running, 1, "again\n")
    assert log_of(tasks, running).endswith(LOG_FULL_NOTE + "again\n")
    assert agree(tasks) == tasks.recount_bytes("mallory")


def bytes_per_command(tasks: TaskStore) -> list[int]:
    """From now on, the size of each text the log's script is sent, in order."""
    sent: list[int] = []
    script = tasks.logs._append

    def spy(keys: Any, args: Any, client: Any = None) -> Any:
        sent.append(len(args[0]))
        return script(keys=keys, args=args)

    tasks.logs._append = spy  # type: ignore[assignment]
    return sent


def test_a_long_text_reaches_redis_a_chunk_per_command() -> None:
    tasks = store()
    task_id = small_task(tasks, "mallory")
    sent = bytes_per_command(tasks)
    text = ("é" * 100_000 + "\n") * 3
    tasks.append_log(task_id, 1, text)
    assert max(sent) <= MAX_CHUNK and sum(sent) == len(text.encode())
    assert log_of(tasks, task_id) == text


def test_a_log_stored_again_reaches_redis_a_chunk_per_command_and_is_counted() -> None:
    tasks = store()
    task_id = small_task(tasks, "mallory")
    record = agree(tasks)
    tasks.append_log(task_id, 1, "lost to a failover\n" * 100)
    sent = bytes_per_command(tasks)
    text = "ü" * (MAX_CHUNK + 10)  # over two chunks: its length is twice that in bytes
    tasks.logs.replace(task_id, 1, text)
    assert log_of(tasks, task_id) == text and max(sent) <= MAX_CHUNK and len(sent) == 3
    assert agree(tasks) == record + len(text.encode())
    assert not tasks.r.exists(tasks.keys.log_cut(task_id, 1))


def test_pieces_end_on_a_characters_end() -> None:
    text = "a€" * 1000
    found = list(pieces(text, 7))
    assert all(len(p) <= 7 for p in found) and b"".join(found) == text.encode()
    assert "".join(p.decode() for p in found) == text
    assert list(pieces("")) == []


def test_a_log_without_a_counted_task_is_kept_and_counted_nowhere() -> None:
    r = fakeredis.FakeRedis()
    tasks = TaskStore(r, "t")
    assert tasks.append_log("a" * 32, 1, "hello\n") == 6
    assert not r.keys("t:quota:*")


@pytest.mark.parametrize("seed", range(8))
def test_the_count_equals_a_recount_after_any_mix_of_logs_and_changes(seed: int) -> None:
    """Appends (trimmed past a small limit, stopped by a small quota), logs stored again,
    new revisions with logs of their own, ends and expiries: after each, every owner's
    count equals a recount; once all has expired, both are 0."""
    rng = random.Random(seed)
    tasks = store(retention=1e-6)
    tasks.LOG_LIMIT = 6 * KIB
    quotas = {"mallory": Quotas(0, 0, 0, stored_bytes=24 * KIB), "bob": None}
    made: list[str] = []
    for _ in range(120):
        op, owner = rng.choice(OPS), rng.choice(sorted(quotas))
        live = [t for t in made if tasks.find(t) is not None]
        if op == "create" or not live:
            try:
                made.append(small_task(tasks, owner, quotas[owner]))
            except QuotaExceeded:
                pass
            continue
        doc = tasks.get(rng.choice(live))
        task_id, revision = doc["id"], doc["revision"]
        text = "".join(rng.choice("ab✓\n") for _ in range(rng.randint(0, 3000)))
        if op == "log":
            tasks.append_log(task_id, revision, text)
        elif op == "again":
            tasks.logs.replace(task_id, revision, text)
        elif op == "resolve" and doc["state"] == states.PENDING:
            resolve(tasks, task_id)
        elif op == "finish" and doc["state"] == states.RESOLVED:
            finish(tasks, task_id)
        elif op == "patch" and doc["state"] in states.FINAL:
            patch(tasks, task_id, "A", str(rng.random()))
        elif op == "expire":
            tasks.expire_finished(time.time())
        for who in quotas:
            agree(tasks, who)
    for task_id in made:
        if (doc := tasks.find(task_id)) is not None and doc["state"] == states.PENDING:
            resolve(tasks, task_id)
        if (doc := tasks.find(task_id)) is not None and doc["state"] == states.RESOLVED:
            finish(tasks, task_id)
    while tasks.expire_finished(time.time()):
        pass
    for who in quotas:
        assert tasks.stored_bytes(who) == 0 == tasks.recount_bytes(who)
    assert not tasks.r.keys("*:log:*")
