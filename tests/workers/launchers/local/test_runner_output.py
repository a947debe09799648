"""A step's output: read in bounded chunks, redacted across every cut, capped per revision."""

from __future__ import annotations

import dataclasses
import os
import threading

import fakeredis

from shared.access.quotas import LOG_FULL_NOTE, Quotas
from shared.policy.model import Resolved
from shared.secrets import REDACTED
from shared.store.logtail import TAIL_KEPT, OutputCap
from shared.store.tasks import TaskStore
from shared.task.workload import Workload
from tests.shared.store.test_store_bytes import create, resolve, store
from workers.launchers.local.report import LogWriter
from workers.launchers.local.runner import READ_CHUNK, copy_output

SECRET = "hunter2-very-secret-token"


def job() -> Workload:
    secret = Resolved("TOKEN", SECRET, "user", secret=True)
    return Workload("t1", 1, "n", (("true",),), (secret,), 0)


def pipe_through(data: bytes, write: object) -> None:
    """``data`` as a step's output, read by the runner's own copy loop."""
    read_end, write_end = os.pipe()

    def feed() -> None:
        with os.fdopen(write_end, "wb") as out:
            out.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        copy_output(read_end, write)  # type: ignore[arg-type]
    finally:
        writer.join()
        os.close(read_end)


def test_one_line_far_longer_than_a_chunk_arrives_in_bounded_pieces() -> None:
    pieces: list[str] = []
    pipe_through(b"x" * (5 * READ_CHUNK) + b"\xc3\xa9 done", pieces.append)
    assert max(len(p) for p in pieces) <= READ_CHUNK
    assert "".join(pieces) == "x" * (5 * READ_CHUNK) + "é done"  # a cut character, whole


def test_a_secret_cut_by_a_chunk_is_still_redacted() -> None:
    tasks = TaskStore(fakeredis.FakeRedis(), "t")
    writer = LogWriter(tasks, job(), limit=TaskStore.LOG_LIMIT)
    data = b"a" * (READ_CHUNK - 7) + SECRET.encode() + b"b" * 100  # no line break anywhere
    pipe_through(data, writer)
    writer.flush()
    log = tasks.read_log("t1", 1)
    assert SECRET not in log and REDACTED in log and SECRET[:7] not in log


def test_past_the_cap_the_log_keeps_its_start_its_end_and_says_what_was_dropped() -> None:
    cap = OutputCap(1024 * 1024)
    kept = cap.feed("head\n") + "".join(cap.feed("x" * 65536) for _ in range(100))
    kept += cap.feed("\nthe end\n") + cap.finish()
    assert kept.startswith("head\n") and kept.endswith("the end\n")
    assert len(kept.encode()) <= 1024 * 1024
    assert f"{cap.dropped} bytes were dropped" in kept
    assert cap.dropped == 5 + 100 * 65536 + 9 - (len(kept.encode()) - len(cap.note()) - 2)
    assert cap.tail_budget == TAIL_KEPT


def test_a_secret_is_redacted_in_the_kept_tail_too() -> None:
    tasks = TaskStore(fakeredis.FakeRedis(), "t")
    writer = LogWriter(tasks, job(), limit=256 * 1024)
    for _ in range(10):
        writer("y" * 65536)
    writer("tail " + SECRET + " tail\n")
    writer.flush()
    log = tasks.read_log("t1", 1)
    assert SECRET not in log and log.endswith(f"tail {REDACTED} tail\n") and writer.dropped


def test_under_the_cap_nothing_is_said() -> None:
    cap = OutputCap(1024 * 1024)
    assert cap.feed("short\n") + cap.finish() == "short\n" and cap.dropped == 0


def lose_the_log(tasks: TaskStore) -> None:
    """What a failover does to the last writes the old primary took: gone."""
    tasks.r.delete(tasks.keys.log("t1", 1))


def test_output_a_failover_lost_is_stored_again_from_the_runners_copy() -> None:
    tasks = TaskStore(fakeredis.FakeRedis(), "t")
    writer = LogWriter(tasks, job(), limit=TaskStore.LOG_LIMIT, keep_copy=True)
    tasks.append_log("t1", 1, "local: started\n")  # the launch worker's line, first
    writer(f"epoch 1 {SECRET}\n")
    lose_the_log(tasks)
    writer("epoch 2\n")  # the append finds the log shorter than it left it
    writer.flush()
    assert writer.store_again()
    log = tasks.read_log("t1", 1)
    assert log.endswith(f"epoch 1 {REDACTED}\nepoch 2\n") and SECRET not in log
    assert log.startswith("\x1ftaskenv: a Redis failover lost part of this output")  # marked


def test_output_the_owners_quota_stopped_is_not_taken_for_a_failover_loss() -> None:
    """Past the owner's stored-bytes quota the log keeps what fits and says so: the
    runner's copy is not stored again over it (which would say a failover lost it)."""
    tasks = store()
    task_id = create(tasks, [{"name": "A", "value": "1"}], owner="mallory",
                     budget=Quotas(0, 0, 0, stored_bytes=16 * 1024))
    resolve(tasks, task_id)
    workload = dataclasses.replace(job(), task_id=task_id)
    writer = LogWriter(tasks, workload, limit=TaskStore.LOG_LIMIT, keep_copy=True)
    for _ in range(10):
        writer("x" * 4095 + "\n")
    writer.flush()
    assert not writer.store_again()
    log = tasks.read_log(task_id, 1)
    assert log.endswith(LOG_FULL_NOTE) and "failover" not in log


def test_a_lost_last_append_is_found_at_the_end_and_nothing_is_rewritten_otherwise() -> None:
    tasks = TaskStore(fakeredis.FakeRedis(), "t")
    writer = LogWriter(tasks, job(), limit=TaskStore.LOG_LIMIT, keep_copy=True)
    writer("only line\n")
    writer.flush()
    tasks.append_log("t1", 1, "a line of another writer, after\n")
    assert not writer.store_again()  # a longer log is not a lost one
    lose_the_log(tasks)
    assert writer.store_again()
    assert tasks.read_log("t1", 1).endswith("\nonly line\n")
    plain = LogWriter(tasks, job(), limit=TaskStore.LOG_LIMIT)  # one Redis: no copy kept
    plain("x\n")
    assert plain.output.copy is None and not plain.store_again()


def test_a_group_of_replicas_keeps_its_copy_through_the_shared_log() -> None:
    """The group runner's one log (every replica's prefixed lines, capped) goes through the
    same KeptOutput: lost lines come back, prefixes and all."""
    from workers.launchers.local.group import CappedLog, ReplicaLog
    from workers.launchers.local.report import KeptOutput

    tasks = TaskStore(fakeredis.FakeRedis(), "t")
    output = KeptOutput(tasks, "t1", 1, keep_copy=True)
    shared = CappedLog(output, TaskStore.LOG_LIMIT)
    replicas = [ReplicaLog(k, [SECRET], shared) for k in range(2)]
    replicas[0]("step one\n")
    replicas[1](f"step one {SECRET}\n")
    lose_the_log(tasks)
    for replica in replicas:
        replica.flush()
    shared.finish()
    assert output.store_again()
    log = tasks.read_log("t1", 1)
    assert "step one\n" in log and REDACTED in log and SECRET not in log
    assert log.count("step one") == 2
