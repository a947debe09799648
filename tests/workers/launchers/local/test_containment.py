"""Local steps attack what they share, as a hostile user would, and stay held in.

Real bwrap sandboxes, real runner processes, the kernel's real cgroup v1 controllers of
this host and a real redis-server: each test launches a task through the launch stage
and reads the outcome the runner recorded.  Sizes are scaled down to limits set for
the test (a 64 MiB memory limit and 256 MiB allocated, say): the limit makes the point.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.config import Settings
from shared.env.envlist import Limits as EnvLimits
from shared.policy.store import PolicyStore
from shared.redis_conn import connect
from shared.store.tasks import TaskStore
from shared.task import records, states
from shared.task.workload import Workload
from workers import stages
from workers.launchers.common.containment import ENTER
from workers.launchers.common.containment.cgroups import Cgroups, own_cgroups
from workers.launchers.local.launcher import (
    LocalLauncher,
    SandboxUnavailable,
    cgroup_name,
    runner_alive,
)
from workers.localstack import RedisServer
from workers.reconcile import reconcile_once

pytestmark = pytest.mark.sandbox  # real bwrap sandboxes, runner processes and cgroups


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def settings(redis_server: RedisServer, tmp_path: Path) -> Settings:
    return Settings(redis_url=redis_server.url, key_prefix=f"c{time.monotonic_ns()}",
                    work_dir=str(tmp_path / "work"), heartbeat_seconds=1)


@pytest.fixture
def tasks(settings: Settings) -> TaskStore:
    return TaskStore(connect(settings.redis_url), settings.key_prefix)


def launch(tasks: TaskStore, settings: Settings, steps: list[list[str]],
           resources: dict[str, Any] | None = None, owner: str = "mallory",
           **overrides: Any) -> Workload:
    """A task of ``owner`` created, validated and resolved by the real stages, then
    launched."""
    settings = Settings(**{**settings.__dict__, **overrides})
    data = {"name": "attack", "steps": steps, "env": [], "resources": resources}
    doc, _ = tasks.create(records.new_task(data, owner))
    policies = PolicyStore(tasks.r, f"unused-{time.monotonic_ns()}")
    assert stages.validate(tasks, EnvLimits(), doc["id"], 1)
    assert stages.apply_policy(tasks, policies, doc["id"], 1)
    stages.launch(tasks, LocalLauncher(settings), doc["id"], 1, settings.heartbeat_seconds)
    return Workload.from_doc(tasks.get(doc["id"]))


def final(tasks: TaskStore, task_id: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (doc := tasks.get(task_id))["state"] not in states.FINAL:
        assert time.monotonic() < deadline, doc["state"]
        time.sleep(0.05)
    return doc


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def shell(script: str) -> list[str]:
    return ["sh", "-c", script]


def test_a_task_over_its_memory_is_failed_naming_the_limit_and_another_carries_on(
        tasks: TaskStore, settings: Settings) -> None:
    neighbour = launch(tasks, settings, [shell("sleep 2; echo still here")])
    hog = launch(tasks, settings, [["python3", "-c", "x = bytearray(256 << 20); print('GOT')"]],
                 resources={"memory": "64Mi"})
    doc = final(tasks, hog.task_id)
    assert doc["state"] == states.FAILED
    assert "memory limit of 64Mi" in doc["reason"] and "resources.memory" in doc["reason"]
    log = tasks.read_log(hog.task_id, 1)
    assert "GOT" not in log and "memory limit of 64Mi" in log
    assert final(tasks, neighbour.task_id)["state"] == states.SUCCEEDED
    assert "still here" in tasks.read_log(neighbour.task_id, 1)


def test_a_fork_bomb_stops_at_the_task_s_process_limit(tasks: TaskStore,
                                                       settings: Settings) -> None:
    bomb = shell("i=0; while [ $i -lt 3000 ]; do sleep 60 & i=$((i+1)); done; echo MADE $i")
    job = launch(tasks, settings, [bomb], task_max_processes=64)
    doc = final(tasks, job.task_id)
    assert doc["state"] == states.FAILED
    assert "limit of 64 processes" in doc["reason"]
    assert "MADE 3000" not in tasks.read_log(job.task_id, 1)
    # Nothing it started outlives it: its cgroup is gone with every process in it.
    assert Cgroups().existing(cgroup_name(job)) is None


def test_the_step_runs_as_an_unprivileged_host_user_under_the_task_s_cpu_limit(
        tasks: TaskStore, settings: Settings) -> None:
    job = launch(tasks, settings, [["sleep", "3"]], resources={"cpu": "500m"})
    deadline = time.monotonic() + 10
    while not (group := Cgroups().existing(cgroup_name(job))) or "sleep" not in {
            comm(pid) for pid in group.processes()}:  # the step itself has started
        assert time.monotonic() < deadline
        time.sleep(0.05)
    uids = {Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0]
            for pid in group.processes()}
    first = settings.task_uid_first  # as the host sees them: the task's own uid, never root
    assert len(uids) == 1 and first <= int(uids.pop()) < first + settings.task_uid_count
    assert (group.dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
    assert final(tasks, job.task_id)["state"] == states.SUCCEEDED


def test_tmp_and_home_are_capped_and_nothing_written_outlives_the_revision(
        tasks: TaskStore, settings: Settings) -> None:
    script = ("dd if=/dev/zero of=/tmp/fill bs=1M count=2000; "
              "dd if=/dev/zero of=$HOME/fill bs=1M count=2000; "
              "cp /bin/sh $HOME/rootsh; chmod 4755 $HOME/rootsh; echo LEFT")
    job = launch(tasks, settings, [shell(script)], task_tmp_size="32Mi",
                 task_home_size="48Mi")
    doc = final(tasks, job.task_id)
    log = tasks.read_log(job.task_id, 1)
    assert doc["state"] == states.SUCCEEDED and "LEFT" in log
    assert log.count("No space left on device") >= 2
    assert "33554432 bytes" in log and "50331648 bytes" in log  # 32 and 48 MiB, no more
    run_dir = Path(settings.work_dir).resolve() / job.task_id / "r1"
    left = sorted(p.name for p in run_dir.rglob("*"))
    assert left == ["made_at", "outcome.json", "runner.log", "runner.pid"]  # no home, no rootsh


def test_nested_user_namespaces_and_the_riskiest_calls_are_refused(
        tasks: TaskStore, settings: Settings) -> None:
    calls = ("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
             "[print(n, libc.syscall(nr, 0, 0, 0, 0, 0), os.strerror(ctypes.get_errno())) "
             "for n, nr in (('keyctl', 250), ('bpf', 321), ('io_uring_setup', 425), "
             "('perf_event_open', 298))]")
    job = launch(tasks, settings, [shell("unshare -U true || echo NO-USERNS; "
                                         "unshare -r true || echo NO-ROOT-MAP"),
                                   ["python3", "-c", calls]])
    assert final(tasks, job.task_id)["state"] == states.SUCCEEDED
    log = tasks.read_log(job.task_id, 1)
    assert "NO-USERNS" in log and "NO-ROOT-MAP" in log
    for name in ("keyctl", "bpf", "io_uring_setup", "perf_event_open"):
        assert f"{name} -1 Operation not permitted" in log


TRACE = """
import ctypes, os, signal, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
def attach(pid):
    done = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
    return done, os.strerror(ctypes.get_errno()) if done else "attached"
print("init", *attach(1), flush=True)
child = subprocess.Popen(["sleep", "30"])
print("own child", *attach(child.pid), flush=True)
os.waitpid(child.pid, 0)
libc.ptrace(17, child.pid, None, None)  # PTRACE_DETACH
child.kill()
"""


def test_the_sandbox_s_init_cannot_be_traced_but_a_step_s_own_processes_can(
        tasks: TaskStore, settings: Settings) -> None:
    job = launch(tasks, settings, [["python3", "-c", TRACE]])
    doc = final(tasks, job.task_id)
    log = tasks.read_log(job.task_id, 1)
    assert doc["state"] == states.SUCCEEDED, log
    assert "init -1 Operation not permitted" in log
    assert "own child 0 attached" in log


def test_proc_hides_the_host_s_kernel_and_the_host_paths(tasks: TaskStore,
                                                         settings: Settings) -> None:
    job = launch(tasks, settings, [shell("cat /proc/kallsyms | head -c 100; "
                                         "cat /proc/self/mountinfo; ls /proc/acpi")])
    final(tasks, job.task_id)
    log = tasks.read_log(job.task_id, 1)
    assert " T " not in log  # no kernel symbol
    assert settings.work_dir not in log and str(Path(settings.work_dir).resolve()) not in log


def test_open_files_stop_at_the_limit(tasks: TaskStore, settings: Settings) -> None:
    code = ("import os\nn = 0\ntry:\n    while n < 20000:\n        os.open('/dev/null', 0); "
            "n += 1\nexcept OSError as e:\n    print('STOPPED', e.strerror)\n")
    job = launch(tasks, settings, [["python3", "-c", code]], task_max_open_files=256)
    final(tasks, job.task_id)
    assert "STOPPED Too many open files" in tasks.read_log(job.task_id, 1)


def test_the_runner_s_cpu_is_the_task_s_own(tasks: TaskStore, settings: Settings) -> None:
    """What the runner spends reading, redacting and storing a task's output counts in
    the task's cpu quota: a step printing as fast as it can at ``cpu: 100m`` slows
    itself, never the host.  The runner is in the task's cpu cgroup while the steps
    run (never counted among the task's processes), and the output is redacted."""
    flood = shell("yes 'output the runner reads, redacts and stores' | head -c 20000000; "
                  "echo FLOODED")
    job = launch(tasks, settings, [flood], resources={"cpu": "100m"})
    pid = int((Path(settings.work_dir).resolve() / job.task_id / "r1" / "runner.pid")
              .read_text().split()[0])
    deadline = time.monotonic() + 30
    while not (group := Cgroups().existing(cgroup_name(job))) or not group.processes():
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.05)
    assert group.version == 1  # this host's; the v2 layout is checked on a fake tree
    cpu = group.dirs["cpu"]
    assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "10000"
    runner_in = own_cgroups(Path(f"/proc/{pid}/cgroup").read_text())["cpu"]
    assert Cgroups().root / "cpu" / runner_in.lstrip("/") == cpu
    assert pid not in group.processes()  # the runner is never killed as the task's
    doc = final(tasks, job.task_id, timeout=120)
    assert doc["state"] == states.SUCCEEDED, doc
    assert tasks.read_log(job.task_id, 1).rstrip().endswith("FLOODED")


def test_one_huge_line_keeps_the_runner_small_and_the_log_says_what_was_cut(
        tasks: TaskStore, settings: Settings) -> None:
    line = shell("head -c 300000000 /dev/zero | tr '\\0' x; echo; echo THE-END")
    job = launch(tasks, settings, [line])
    pid = int((Path(settings.work_dir).resolve() / job.task_id / "r1" / "runner.pid")
              .read_text().split()[0])
    peak = 0
    while tasks.get(job.task_id)["state"] not in states.FINAL:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            peak = max(peak, int(status.split("VmRSS:")[1].split()[0]))
        except (OSError, IndexError):
            pass
        time.sleep(0.02)
    doc = tasks.get(job.task_id)
    assert peak < 120 * 1024, f"the runner held {peak} KiB"
    assert doc["state"] == states.SUCCEEDED
    assert "output cut" in doc["reason"] and "bytes were dropped" in doc["reason"]
    log = tasks.read_log(job.task_id, 1)
    assert len(log.encode()) <= TaskStore.LOG_LIMIT
    assert "output cut" in log and log.rstrip().endswith("THE-END")
    assert tasks.r.get(tasks.keys.log_cut(job.task_id, 1)) is None  # never trimmed in Redis


def test_a_finished_run_directory_goes_once_the_reconciler_has_seen_its_end(
        tasks: TaskStore, settings: Settings) -> None:
    job = launch(tasks, settings, [["true"]])
    final(tasks, job.task_id)
    run_dir = Path(settings.work_dir).resolve() / job.task_id / "r1"
    launcher = LocalLauncher(Settings(**{**settings.__dict__, "stuck_after_seconds": 2}))
    deadline = time.monotonic() + 10
    while not (run_dir / "outcome.json").exists() or runner_alive(run_dir):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Finished just now, however long the runner took to exit on a loaded machine: the
    # retention counts from the outcome file's time.
    os.utime(run_dir / "outcome.json")
    assert [c.task_id for c in launcher.changes()] == [job.task_id]
    assert [c.task_id for c in launcher.changes()] == [job.task_id]  # never applied: kept
    reconcile_once(tasks, launcher, lambda *a: None, stuck_after=60)
    assert launcher.changes() == []  # applied: not reported again
    assert (run_dir / "runner.log").exists()  # kept a while for the operator
    time.sleep(2.1)
    reconcile_once(tasks, launcher, lambda *a: None, stuck_after=60)
    assert not run_dir.exists() and not run_dir.parent.exists()


def test_a_host_that_cannot_enforce_limits_refuses_or_says_so(tmp_path: Path) -> None:
    unwritable = "no/such/cgroup/for/taskenv"
    with pytest.raises(SandboxUnavailable, match="cannot write to the cgroup"):
        LocalLauncher(Settings(work_dir=str(tmp_path), local_cgroup_parent=unwritable))
    warned = LocalLauncher(Settings(work_dir=str(tmp_path), local_cgroup_parent=unwritable,
                                    local_containment="warn"))
    assert any("no memory, process or cpu limit" in p for p in warned.not_enforced)


def test_a_gpu_task_is_told_the_local_sandbox_has_no_gpu(tasks: TaskStore,
                                                         settings: Settings) -> None:
    job = launch(tasks, settings, [["true"]], resources={"gpus": 1})
    final(tasks, job.task_id)
    assert "the steps see no GPU" in tasks.read_log(job.task_id, 1)


def test_sandboxes_started_in_one_runner_made_network_share_it_and_nothing_else(
        tmp_path: Path) -> None:
    """What a distributed task's replicas will do: one namespace held, N steps in it."""
    enter = [sys.executable, "-I", ENTER]
    holder = subprocess.Popen([*enter, "--netns", "new", "--hold"])
    try:
        netns = f"/proc/{holder.pid}/ns/net"
        deadline = time.monotonic() + 10
        while os.readlink(netns) == os.readlink("/proc/self/ns/net"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        serve = ("import socket; s = socket.socket(); s.bind(('127.0.0.1', 45123)); "
                 "s.listen(); c, _ = s.accept(); print(c.recv(10).decode())")
        replica = [*enter, "--netns", netns, "--uid", "65534", "--gid", "65534", "--",
                   "/usr/bin/python3", "-c"]
        server = subprocess.Popen([*replica, serve], stdout=subprocess.PIPE, text=True)
        connect = ("import socket, time\nfor _ in range(100):\n    try:\n"
                   "        socket.create_connection(('127.0.0.1', 45123)).send(b'peer')\n"
                   "        break\n    except OSError:\n        time.sleep(0.05)\n")
        subprocess.run([*replica, connect], check=True, timeout=30)
        assert server.communicate(timeout=30)[0].strip() == "peer"
        with pytest.raises(OSError):  # the host's own loopback is another network
            socket.create_connection(("127.0.0.1", 45123), timeout=1)
    finally:
        holder.kill()
        holder.wait()


def test_in_warn_mode_a_step_runs_with_what_can_be_enforced_and_its_log_says_what_not(
        tasks: TaskStore, settings: Settings) -> None:
    job = launch(tasks, settings, [["sh", "-c", "ulimit -n; id -u"]],
                 local_cgroup_parent="no/such/cgroup", local_containment="warn",
                 task_max_open_files=300)
    assert final(tasks, job.task_id)["state"] == states.SUCCEEDED
    log = tasks.read_log(job.task_id, 1)
    assert "NOT ENFORCED on this host" in log and "no memory, process or cpu limit" in log
    assert "300\n65534\n" in log  # the rlimits and the unprivileged user still hold


def test_a_killed_runner_s_task_fails_as_lost_and_leaves_no_cgroup_or_directory(
        tasks: TaskStore, settings: Settings) -> None:
    job = launch(tasks, settings, [["sleep", "60"]])
    run_dir = Path(settings.work_dir).resolve() / job.task_id / "r1"
    deadline = time.monotonic() + 10
    while not runner_alive(run_dir) or Cgroups().existing(cgroup_name(job)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(int((run_dir / "runner.pid").read_text().split()[0]), signal.SIGKILL)
    launcher = LocalLauncher(Settings(**{**settings.__dict__, "stuck_after_seconds": 0}))
    deadline = time.monotonic() + 20
    while tasks.get(job.task_id)["state"] != states.FAILED:  # after three heartbeats
        assert time.monotonic() < deadline
        reconcile_once(tasks, launcher, lambda *a: None, stuck_after=60)
        time.sleep(0.2)
    assert tasks.get(job.task_id)["reason"].startswith("lost")
    reconcile_once(tasks, launcher, lambda *a: None, stuck_after=60)
    assert not run_dir.exists() and Cgroups().existing(cgroup_name(job)) is None
