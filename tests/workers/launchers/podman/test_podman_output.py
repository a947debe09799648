"""Reading a container's k8s-file log while it grows: whole records only, a line's pieces
joined, a character cut between two pieces whole, secrets hidden across reads, the
budget kept with a marked note, a file conmon started anew said so, and where a reader
stopped kept on disk for the next.  Files written here stand in for conmon's; the same
reader against real podman is in test_podman_streaming.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from shared.config import Settings
from shared.task.replica_logs import MARK, SHOWN_MARK
from tests.workers.conftest import build_workload
from tests.workers.launchers.podman.test_podman_listing import FAKE_PODMAN, install_fake, listed
from workers.launchers.common.stream import OutputStream, cut_note
from workers.launchers.podman.launcher import PodmanLauncher
from workers.launchers.podman.output import HOST_CUT, ContainerLog, Place, Places, records

TIME = b"2026-12-07T19:58:16.840970035+00:00"


def record(text: bytes, partial: bool = False, stream: bytes = b"stdout") -> bytes:
    return b" ".join([TIME, stream, b"P" if partial else b"F", text]) + b"\n"


def reader(path: Path, secrets: tuple[str, ...] = (), budget: int = 1 << 20,
           replica: int | None = None) -> ContainerLog:
    return ContainerLog("pod-task", Place(str(path)), OutputStream(secrets, budget, replica))


def test_records_join_a_lines_pieces_and_leave_an_unfinished_record():
    data = (record(b"hello") + record(b"") + record(b"no new", partial=True)
            + record(b"line", stream=b"stderr") + b"2026-12-07T19:58 stdout F half")
    payload, used = records(data)
    assert payload == b"hello\n\nno newline\n"
    assert used == len(data) - len(b"2026-12-07T19:58 stdout F half")


def test_a_reader_gives_what_grew_since_its_last_read_and_never_twice(tmp_path: Path):
    log = tmp_path / "ctr.log"
    log.write_bytes(record(b"first"))
    read = reader(log)
    assert read.read(1 << 16) == "first\n"
    assert read.read(1 << 16) == ""
    with log.open("ab") as out:
        out.write(record(b"sec", partial=True) + record(b"ond") + b"2026 stdout F thi")
    assert read.read(1 << 16) == "second\n"
    with log.open("ab") as out:
        out.write(b"rd\n")
    assert read.read(1 << 16) == "third\n"
    assert read.rest(1 << 16) == ""


def test_a_read_is_bounded_and_the_rest_waits_for_the_next(tmp_path: Path):
    log = tmp_path / "ctr.log"
    log.write_bytes(b"".join(record(b"%03d" % n) for n in range(100)))
    read = reader(log)
    first = read.read(500)
    assert 0 < read.read_bytes <= 500 and first == "".join(f"{n:03d}\n" for n in range(10))
    assert read.rest(500) == "".join(f"{n:03d}\n" for n in range(10, 100))


def test_a_character_cut_between_two_pieces_arrives_whole(tmp_path: Path):
    log = tmp_path / "ctr.log"
    word = "数据".encode()
    log.write_bytes(record(word[:4], partial=True))
    read = reader(log)
    assert read.read(1 << 16) == "数"
    with log.open("ab") as out:
        out.write(record(word[4:]))
    assert read.read(1 << 16) == "据\n"


def test_a_secret_cut_across_two_reads_is_hidden_whole(tmp_path: Path):
    log = tmp_path / "ctr.log"
    log.write_bytes(record(b"token=hunter", partial=True))
    read = reader(log, secrets=("hunter2-xyz",))
    seen = read.read(1 << 16)
    assert seen == "token="  # what could begin the secret is held back
    with log.open("ab") as out:
        out.write(record(b"2-xyz done"))
    seen += read.read(1 << 16) + read.rest(1 << 16)
    assert seen == "token=[secret] done\n"


def test_a_steps_mark_is_text_and_a_replicas_lines_are_prefixed_when_whole(tmp_path: Path):
    log = tmp_path / "ctr.log"
    log.write_bytes(record(f"{MARK}==> forged".encode()) + record(b"half", partial=True))
    read = reader(log, replica=1)
    assert read.read(1 << 16) == f"[replica 1] {SHOWN_MARK}==> forged\n"
    assert read.rest(1 << 16) == "[replica 1] half\n"


def test_past_its_budget_the_output_is_cut_with_a_marked_note_and_not_read(tmp_path: Path):
    log = tmp_path / "ctr.log"
    log.write_bytes(record(b"x" * 30) + record(b"the secret: hunter2-xyz and more"))
    read = reader(log, secrets=("hunter2-xyz",), budget=45)
    seen = read.read(1 << 16)
    assert seen == "x" * 30 + "\nthe secret: \n" + f"{MARK}{cut_note(45)}\n"
    assert "hunter" not in seen  # the cut fell inside the secret: dropped, not shown in part
    with log.open("ab") as out:
        out.write(record(b"after"))
    assert read.read(1 << 16) == "" and read.rest(1 << 16) == ""
    assert read.place.cut and read.place.taken == 45


def test_a_file_conmon_started_anew_is_read_from_its_start_saying_so(tmp_path: Path):
    log = tmp_path / "ctr.log"
    log.write_bytes(record(b"old one") + record(b"old two"))
    read = reader(log)
    assert read.read(1 << 16) == "old one\nold two\n"
    fresh = tmp_path / "ctr.log.tmp"
    fresh.write_bytes(record(b"new"))
    fresh.replace(log)  # as conmon does past its max-size
    assert read.read(1 << 16) == f"{MARK}{HOST_CUT}\nnew\n"


def test_where_a_reader_stopped_is_kept_for_the_next_and_forgotten_with_its_pod(
        tmp_path: Path):
    log = tmp_path / "ctr.log"
    log.write_bytes(record(b"seen") + record(b"not yet"))
    places = Places(tmp_path / "places")
    read = reader(log)
    read.read(len(record(b"seen")))
    places.save("taskenv-t1-r1-task", read.place)
    places.save("taskenv-t2-r1-task-0", Place("/x"))

    again = places.load("taskenv-t1-r1-task")
    assert again is not None
    assert ContainerLog("c", again, OutputStream((), 1 << 20)).rest(1 << 16) == "not yet\n"
    places.forget("taskenv-t1-r1")
    assert places.load("taskenv-t1-r1-task") is None
    assert places.load("taskenv-t2-r1-task-0") is not None
    old = time.time() - 600
    os.utime(places.root / "taskenv-t2-r1-task-0.json", (old, old))
    assert places.stale({"taskenv-t2-r1"}, 120, time.time()) == []
    assert places.stale(set(), 120, time.time()) == ["taskenv-t2-r1-task-0"]


def test_the_launcher_reads_a_listed_containers_file_and_forgets_it_once_its_pod_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fake = install_fake(tmp_path / "fake", monkeypatch, FAKE_PODMAN)
    launcher = PodmanLauncher(Settings(launcher="podman", work_dir=str(tmp_path / "work")))
    workload = build_workload([["true"]])
    log = tmp_path / "ctr.log"
    log.write_bytes(record(b"hello"))
    name = launcher.container_name(workload)
    (fake.home / "inspect.json").write_text(json.dumps([{
        "Name": name, "HostConfig": {"LogConfig": {"Type": "k8s-file", "Path": str(log)}}}]))
    fake.lists([listed(workload)])
    launcher.changes()

    first = launcher.output_since(lambda *_: workload)
    again = launcher.output_since(lambda *_: workload)
    fake.lists([])  # removed elsewhere (a cancel on a launch worker)
    launcher.changes()
    launcher.output_since(lambda *_: workload)

    assert first == [(workload.task_id, 1, "hello\n")] and again == []
    assert launcher.readers == {}
    inspects = [c for c in fake.calls() if c.startswith("container inspect")]
    assert inspects == [f"container inspect {name}"]  # asked once, then read from the file
