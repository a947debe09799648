"""A Slurm job's output: capped by the job program as the stored log is, its secrets hidden
in what is kept (a secret cut at either edge left out), and read by the reconciler a chunk
at a time.  No process holds more than a chunk, the cap's tail or a secret's length,
whatever the length of a line: sizes are asserted, not times."""

from __future__ import annotations

import ast
import os
import sys
import threading
from pathlib import Path

import pytest

from shared import secrets as shared_secrets
from shared.config import Settings
from shared.store.logtail import MAX_CHUNK
from shared.store.outputcap import RESERVED, TAIL_KEPT
from shared.task.limits import Limits
from shared.task.replica_logs import MARK, SHOWN_MARK, platform_line, step_output
from tests.workers.conftest import build_workload
from workers.launchers.base import MarksItsOutput, Outcome
from workers.launchers.slurm import job
from workers.launchers.slurm import launcher as slurm_launcher
from workers.launchers.slurm.launcher import READ_CHUNK, SlurmLauncher
from workers.launchers.slurm.submit import (
    OUTPUT,
    SlurmSettings,
    export_entries,
    job_program,
    job_spec,
)

MIB = 1024 * 1024
LIMIT = 1024 * 1024
SECRET = "hf_Zq8cut-secret-7d1e0b9a"
LIMITS = Limits(millicpu=1000, memory_bytes=2**26, gpus=0, pids=64, open_files=256,
                file_bytes=2**23, tmp_bytes=2**25, home_bytes=2**25)


def held(output: job.JobOutput) -> int:
    """What the job program holds of the output between writes."""
    return output.cap.tail_size + len(output.redactor.pending.encode())


def feed(output: job.JobOutput, data: bytes, chunk: int = job.READ_CHUNK) -> int:
    """``data`` written a pipe's chunk at a time; the most the output held meanwhile."""
    most = 0
    for start in range(0, len(data), chunk):
        output.write(data[start:start + chunk])
        most = max(most, held(output))
    return most


def kept(path: Path, output: job.JobOutput) -> str:
    output.finish()
    return path.read_bytes().decode()


@pytest.fixture
def out_file(tmp_path: Path) -> tuple[Path, int]:
    path = tmp_path / OUTPUT
    return path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


def test_one_huge_line_keeps_the_start_and_the_end_within_the_cap_holding_little(
        out_file: tuple[Path, int]) -> None:
    path, fd = out_file
    output = job.JobOutput(LIMIT, [SECRET], fd)
    line = b"start " + b"x" * (40 * MIB) + b" " + SECRET.encode() + b" the end"
    most = feed(output, line)
    assert most <= TAIL_KEPT + len(SECRET)  # never the line: the cap's tail and a secret
    assert path.stat().st_size <= LIMIT  # while it runs: the start only
    text = kept(path, output)
    assert len(text.encode()) <= LIMIT + MAX_CHUNK
    assert text.startswith("start xxx") and text.endswith(" [secret] the end")
    assert "taskenv: output cut: " in text and SECRET not in text


def test_the_platform_s_lines_are_marked_and_a_step_s_mark_is_text(
        out_file: tuple[Path, int]) -> None:
    """The job's ``==> step`` line carries the platform's mark; a step printing the mark
    and the same words gets a line that is plainly its own (as the local runner's)."""
    path, fd = out_file
    output = job.JobOutput(LIMIT, [], fd)
    output.say("==> step 1/2: train\nforged")
    output.write(f"{MARK}==> step 2/2: evil\n".encode())
    text = kept(path, output)
    assert text == (platform_line("==> step 1/2: train\nforged")
                    + step_output(f"{MARK}==> step 2/2: evil\n"))
    assert (job.MARK, job.SHOWN) == (MARK, SHOWN_MARK)
    assert isinstance(SlurmLauncher.__new__(SlurmLauncher), MarksItsOutput)


def test_the_cut_note_is_the_platform_s_line(out_file: tuple[Path, int]) -> None:
    path, fd = out_file
    output = job.JobOutput(LIMIT, [], fd)
    feed(output, b"z" * (3 * MIB))
    head, note, tail = kept(path, output).split("\n")
    assert note.startswith(f"{MARK}taskenv: output cut: ") and set(tail) == {"z"}
    assert len(tail) == TAIL_KEPT


def test_the_note_says_how_much_was_dropped(out_file: tuple[Path, int]) -> None:
    path, fd = out_file
    output = job.JobOutput(LIMIT, [], fd)
    data = b"y" * (3 * MIB)
    feed(output, data)
    text = kept(path, output)
    head, note, tail = text.split("\n")
    assert len(head) == LIMIT - TAIL_KEPT - RESERVED and len(tail) == TAIL_KEPT
    assert note.startswith(MARK)
    assert f"{len(data) - len(head) - len(tail)} bytes were dropped" in note


def test_output_within_the_cap_is_kept_whole_and_redacted(out_file: tuple[Path, int]) -> None:
    path, fd = out_file
    output = job.JobOutput(LIMIT, [SECRET], fd)
    lines = "".join(f"step {n}: token={SECRET} ✓\n" for n in range(1000)).encode()
    feed(output, lines, chunk=7)  # a secret and a character cut by every write
    assert kept(path, output) == lines.decode().replace(SECRET, "[secret]")


def test_a_secret_cut_at_either_edge_of_the_dropped_part_is_left_out(
        out_file: tuple[Path, int]) -> None:
    path, fd = out_file
    limit = 64 * 1024
    output = job.JobOutput(limit, [SECRET], fd)
    head_room, tail = output.cap.head_room, output.cap.tail_budget
    # A secret across the head's end, and another across the kept end's start.
    data = (b"w" * (head_room - 10) + SECRET.encode() + b"m" * (3 * limit)
            + SECRET.encode() + b"t" * (tail - 9))
    feed(output, data, chunk=4096)
    head, note, end = kept(path, output).split("\n")
    assert head == "w" * (head_room - 10) and "dropped" in note
    assert end == "t" * (tail - 9)
    for k in range(1, len(SECRET)):  # no part of the secret at either edge
        assert not head.endswith(SECRET[:k]) and not end.startswith(SECRET[k:])


def test_the_job_hides_what_the_platform_hides() -> None:
    values = [SECRET, "pässwörd with spaces+&/=", "-----BEGIN KEY-----\nAAAAbbbbCCCC\n-----END\n",
              "short"]
    assert job.redaction_targets(values) == shared_secrets.redaction_targets(values)


def test_a_replicas_huge_line_is_relayed_in_pieces_each_attributed() -> None:
    source, sink = os.pipe()
    into, out = os.pipe()
    got: list[bytes] = []

    def drain() -> None:
        while chunk := os.read(into, 1 << 16):
            got.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    def write() -> None:
        os.write(sink, b"a\n" + b"z" * (5 * MIB))
        os.close(sink)

    writer = threading.Thread(target=write)
    writer.start()
    job.relay(source, 3, fd=out)
    writer.join()
    os.close(out)
    reader.join()
    lines = b"".join(got).split(b"\n")[:-1]
    assert lines[0] == b"[replica 3] a"
    assert all(line.startswith(b"[replica 3] ") for line in lines)
    assert max(len(line) for line in lines) <= job.RELAY_LINE + job.READ_CHUNK + 12
    assert sum(len(line) - 12 for line in lines) == 1 + 5 * MIB


def test_the_spec_names_the_secrets_and_the_cap_and_the_program_needs_no_taskenv() -> None:
    workload = build_workload([["true"]], env={"A": "1"}, secrets={"HF_TOKEN": SECRET})
    config = SlurmSettings(python="/usr/bin/python3", log_bytes=256 * 1024)
    spec = job_spec(config, workload, Path("/runs/r1"), ["A", "HF_TOKEN"], LIMITS)
    assert spec["secret_names"] == ["HF_TOKEN"] and spec["log_bytes"] == 256 * 1024
    output = job.job_output(spec, export_entries({"A": "1", "HF_TOKEN": SECRET}))
    assert SECRET in output.redactor.targets and output.cap.limit == 256 * 1024
    program = job_program(config, spec)
    imported = set()
    for node in ast.walk(ast.parse(program)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names) and "class OutputCap" in program
    assert SECRET not in program


def test_the_cap_is_the_stored_logs() -> None:
    assert SlurmSettings(log_bytes=0).output_cap() == 1024 * 1024
    assert SlurmSettings(log_bytes=64 * MIB).output_cap() == 1024 * 1024
    assert SlurmSettings(log_bytes=100_000).output_cap() == 100_000


# -- the reconciler's side ----------------------------------------------------------------

@pytest.fixture
def reader(tmp_path: Path) -> SlurmLauncher:
    return SlurmLauncher(Settings(slurm_dir=str(tmp_path)))  # no Slurm call is made below


def job_file(launcher: SlurmLauncher, task_id: str, data: bytes) -> Path:
    run_dir = launcher._dir(task_id, 1)
    run_dir.mkdir(parents=True)
    (run_dir / OUTPUT).write_bytes(data)
    launcher.listed[(task_id, 1)] = (1, Outcome("running"))
    return run_dir


def test_a_huge_line_is_streamed_a_chunk_at_a_time(reader: SlurmLauncher) -> None:
    line = ("é" * (3 * MIB) + "\n").encode()
    job_file(reader, "a" * 32, line)
    pieces = []
    while found := reader.new_output():
        ((_, _, text),) = found
        assert len(text.encode()) <= READ_CHUNK
        pieces.append(text)
    assert "".join(pieces).encode() == line  # no character cut, nothing lost


def test_a_pass_reads_a_bounded_amount_and_every_job_gets_its_turn(
        reader: SlurmLauncher) -> None:
    ids = [f"{n:032d}" for n in range(40)]
    for task_id in ids:
        job_file(reader, task_id, b"line\n" * (READ_CHUNK // 5 * 2))
    seen: set[str] = set()
    for _ in range(10):
        found = reader.new_output()
        assert sum(len(text) for _, _, text in found) <= slurm_launcher.PASS_BYTES + READ_CHUNK
        seen |= {task_id for task_id, _, _ in found}
    assert seen == set(ids)


def test_the_rest_is_read_up_to_the_cap_and_said_so(reader: SlurmLauncher) -> None:
    workload = build_workload([["true"]], secrets={"HF_TOKEN": SECRET})
    budget = reader.config.output_cap()
    data = b"w" * (budget - 10) + SECRET.encode() + b"v" * (5 * MIB)
    job_file(reader, workload.task_id, data)
    text = reader.logs(workload)
    assert text is not None and text.startswith("w" * (budget - 10))
    assert "the rest was not read" in text and "hf_" not in text
    assert len(text.encode()) <= budget + 200
