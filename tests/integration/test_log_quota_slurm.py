"""One huge line from a Slurm step, on a real one-node Slurm cluster with the whole stack
(Redis, workers, the reconciler process, the API): the job's output file never grows past
the log's cap and a chunk, the stored log keeps the line's start and end (its secret
hidden) and is counted in its owner's stored bytes, the reconciler's memory does not grow
with the line, and a second tenant's task beside it finishes normally."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.store.logtail import MAX_CHUNK
from shared.store.tasks import TaskStore
from tests.integration.conftest import Stack, running_stack
from tests.support.slurm import SlurmCluster
from workers.localstack import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

CAP = 1024 * 1024  # TASKENV_LOG_MAX_BYTES's default: the stored log's cap
LINE_BYTES = 20 * 1024 * 1024
SECRET = "hf_slurm-huge-line-secret-4be2"
# One line, written a MiB at a time (the step's own memory stays small).
HUGE = ["python3", "-c", "import os, sys; s = os.environ['HF_TOKEN']; "
        "sys.stdout.write('start ' + s + ' '); "
        f"[sys.stdout.write('x' * 2**20) for _ in range({LINE_BYTES} // 2**20)]; "
        "sys.stdout.write(' ' + s + ' the end')"]
SMALL = ["python3", "-c", "print('hello from bob')"]


@pytest.fixture(scope="module")
def slurm_stack(redis_server: RedisServer, slurm_cluster: SlurmCluster,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("slurm-huge")
    with running_stack(redis_server, root, TASKENV_LAUNCHER="slurm",
                       TASKENV_SLURM_DIR=str(root / "slurm"),
                       TASKENV_RECONCILE_INTERVAL_SECONDS="1",
                       SLURM_CONF=slurm_cluster.env["SLURM_CONF"]) as stack:
        yield stack


def reconciler_pid(stack: Stack) -> int:
    """The stack's reconciler process: ``workers.reconcile`` with the stack's key prefix."""
    mark = f"TASKENV_KEY_PREFIX={stack.env['TASKENV_KEY_PREFIX']}".encode()
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and b"workers.reconcile" in (entry / "cmdline").read_bytes()
                    and mark in (entry / "environ").read_bytes().split(b"\0")):
                return int(entry.name)
        except OSError:
            continue
    raise AssertionError("no reconciler process found")


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


class Watch:
    """The largest size a file reaches while a task runs: sampled, as a reader on the
    shared filesystem would see it (the job removes nothing: the reconciler does, after)."""

    def __init__(self, path_of: Path) -> None:
        self.root, self.largest = path_of, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.02):
            for found in self.root.glob("*/r1/output.log"):
                try:
                    self.largest = max(self.largest, os.stat(found).st_size)
                except OSError:
                    continue

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return self.largest


def test_a_huge_line_is_capped_on_disk_in_redis_and_in_memory(slurm_stack: Stack) -> None:
    alice, bob = slurm_stack.new_token("alice-huge"), slurm_stack.new_token("bob-small")
    reconciler = reconciler_pid(slurm_stack)
    rss_before = peak_rss_kib(reconciler)
    watch = Watch(Path(slurm_stack.env["TASKENV_SLURM_DIR"]))
    huge = slurm_stack.create({"name": "huge-line", "steps": [HUGE],
                               "env": [{"name": "HF_TOKEN", "value": SECRET, "secret": True}]},
                              token=alice)
    small = slurm_stack.create({"name": "beside", "steps": [SMALL]}, token=bob)

    done_small = slurm_stack.wait(small["id"], timeout=180)
    done_huge = slurm_stack.wait(huge["id"], timeout=180)
    largest = watch.stop()

    assert done_small["status"] == "succeeded", done_small
    assert "hello from bob" in slurm_stack.call(
        "GET", f"/api/v1/tasks/{small['id']}/logs", token=bob).text
    assert done_huge["status"] == "succeeded", done_huge
    assert 0 < largest <= CAP + MAX_CHUNK, largest  # the file on the shared filesystem

    logs = slurm_stack.call("GET", f"/api/v1/tasks/{huge['id']}/logs", token=alice).text
    assert len(logs.encode()) <= TaskStore.LOG_LIMIT
    assert "start [secret] xxxx" in logs and logs.rstrip("\n").endswith("x [secret] the end")
    assert "taskenv: output cut: " in logs and SECRET not in logs

    tasks = TaskStore(slurm_stack.redis, slurm_stack.env["TASKENV_KEY_PREFIX"])
    assert tasks.stored_bytes("alice-huge") == tasks.recount_bytes("alice-huge") \
        > len(logs.encode())
    grown = peak_rss_kib(reconciler) - rss_before
    print(f"output file at most {largest} bytes; reconciler's peak RSS {rss_before} KiB -> "
          f"{rss_before + grown} KiB; stored log {len(logs.encode())} bytes")
    assert grown < 64 * 1024, f"the reconciler's peak memory grew by {grown} KiB"
