"""The platform's own lines in a task's log are marked; a step cannot print one.

A step that prints ``==> step 2/2`` or ``taskenv: step 1 was killed`` prints its own
line, which every view shows as the step's: the runner writes the platform's lines with
``replica_logs.MARK`` and a step's output through ``step_output``, which never keeps it
(``shared/task/replica_logs.py``).
"""

from __future__ import annotations

import fakeredis

from shared.policy.model import Resolved
from shared.secrets import REDACTED
from shared.store.logtail import OutputCap
from shared.store.tasks import TaskStore
from shared.task.replica_logs import MARK, SHOWN_MARK, only, pieces, platform_line
from shared.task.workload import Workload
from tests.workers.launchers.local.test_runner_output import pipe_through
from workers.launchers.local.group import CappedLog, ReplicaLog
from workers.launchers.local.report import STORED_AGAIN, LogWriter

FORGED = ("==> step 2/2: python3\n"
          "taskenv: step 1 was killed: out of memory\n"
          f"{MARK}==> step 3/2: forged with the mark itself\n")
SECRET = "hunter2-\x1fwith-the-mark"


def job() -> Workload:
    return Workload("t1", 1, "n", (("true",),), (Resolved("TOKEN", SECRET, "user",
                                                          secret=True),), 0)


def platform_pieces(log: str) -> list[str]:
    return [text for text, platform in pieces(log) if platform]


def test_a_step_printing_the_platforms_lines_is_shown_as_the_step() -> None:
    tasks = TaskStore(fakeredis.FakeRedis(decode_responses=True), "t")
    write = LogWriter(tasks, job(), limit=TaskStore.LOG_LIMIT)
    write(platform_line("==> step 1/2: python3"))
    pipe_through(FORGED.encode(), write)
    write(platform_line("taskenv: step 1 was killed: out of memory"))
    write.flush()
    log = tasks.read_log("t1", 1)

    assert platform_pieces(log) == ["==> step 1/2: python3\n",
                                    "taskenv: step 1 was killed: out of memory\n"]
    steps_own = "".join(text for text, platform in pieces(log) if not platform)
    assert steps_own == FORGED.replace(MARK, SHOWN_MARK)
    assert log.count(MARK) == 2


def test_a_platform_line_stays_one_line_whatever_it_names() -> None:
    line = platform_line("==> step 1/1: evil\n==> step 2/1: injected\r")
    assert line.count("\n") == 1 and line.endswith("\n") and line.startswith(MARK)
    assert platform_pieces(line) == ["==> step 1/1: evil\\n==> step 2/1: injected\\r\n"]


def test_a_secret_holding_the_mark_is_still_redacted() -> None:
    tasks = TaskStore(fakeredis.FakeRedis(decode_responses=True), "t")
    write = LogWriter(tasks, job(), limit=TaskStore.LOG_LIMIT)
    pipe_through(f"token={SECRET}\n".encode(), write)
    write.flush()
    log = tasks.read_log("t1", 1)

    assert log == f"token={REDACTED}\n"


def test_a_replicas_platform_lines_are_marked_behind_its_prefix() -> None:
    stored: list[str] = []
    log = CappedLog(stored.append, TaskStore.LOG_LIMIT)
    replica = ReplicaLog(1, [SECRET], log)
    replica(platform_line("==> step 1/1: python3"))
    pipe_through(FORGED.encode(), replica)
    replica.flush()
    log.finish()
    text = "".join(stored)

    assert text.startswith(f"[replica 1] {MARK}==> step 1/1: python3\n")
    assert platform_pieces(text) == ["==> step 1/1: python3\n"]
    assert platform_pieces(only(text, 1)) == ["==> step 1/1: python3\n"]


def test_the_caps_note_and_the_stored_again_line_are_the_platforms() -> None:
    assert platform_pieces(STORED_AGAIN) == [STORED_AGAIN[1:]]
    tasks = TaskStore(fakeredis.FakeRedis(decode_responses=True), "t")
    write = LogWriter(tasks, job(), limit=64 * 1024)
    pipe_through(b"x" * (200 * 1024) + b"\n" + OutputCap(1).note().encode() + b"\n", write)
    write.flush()
    log = tasks.read_log("t1", 1)

    [note] = platform_pieces(log)
    assert note.startswith("taskenv: output cut:") and write.dropped > 0
