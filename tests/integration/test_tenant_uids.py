"""Two tenants' local tasks at once: what the kernel counts per uid is never shared, and
the sandbox's init is out of a step's reach.

Real bwrap sandboxes, real runner processes and cgroups of this host, a real
redis-server.  Tenant A's step takes every inotify instance its uid may have and as many
processes as a process limit lets its uid have, and holds them; tenant B's step, run
meanwhile, still makes an inotify instance and forks.  Before every task ran as uid 65534
B's ``inotify_init`` failed with ``EMFILE`` and its fork with ``EAGAIN``.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import time
from pathlib import Path

import pytest

from shared.config import Settings
from shared.env.envlist import Limits as EnvLimits
from shared.errors import TransientError
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from shared.store.uids import UidsExhausted
from shared.task import records, states
from shared.task.workload import Workload
from tests.support.slurm import SlurmCluster
from tests.workers.conftest import RecordingHooks, build_workload
from tests.workers.launchers.local.test_containment import (
    final,
    launch,
    redis_server,
    settings,
    tasks,
)
from workers import stages
from workers.launchers.base import Outcome
from workers.launchers.common.containment.cgroups import Cgroups
from workers.launchers.local.launcher import LocalLauncher, cgroup_name
from workers.launchers.slurm.launcher import SlurmLauncher

pytestmark = pytest.mark.sandbox  # real bwrap sandboxes, runner processes and cgroups
__all__ = ["redis_server", "settings", "tasks"]  # the fixtures, shared
UP_THEN_SLEEP = ["python3", "-c", "print('UP', flush=True); import time; time.sleep(120)"]

# Tenant A: every inotify instance its uid may have, then processes up to a limit of 24 for
# its uid, all held until the task is cancelled.
HOG = r"""
import ctypes, os, resource, signal, sys
print("UID_MAP", open("/proc/self/uid_map").read().split(), flush=True)
libc = ctypes.CDLL(None, use_errno=True)
held = []
while True:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
print("INOTIFY", len(held), os.strerror(ctypes.get_errno()), flush=True)
resource.setrlimit(resource.RLIMIT_NPROC, (24, 24))
children = 0
while True:
    try:
        pid = os.fork()
    except BlockingIOError:
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    children += 1
print("FORKED", children, flush=True)
print("HOLDING", flush=True)
signal.pause()
"""

# Tenant B, while A holds: one inotify instance, and 4 children under the same limit.
NEIGHBOUR = r"""
import ctypes, os, resource
print("UID_MAP", open("/proc/self/uid_map").read().split(), flush=True)
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
print("NEIGHBOUR-INOTIFY", "ok" if fd >= 0 else os.strerror(ctypes.get_errno()), flush=True)
resource.setrlimit(resource.RLIMIT_NPROC, (24, 24))
try:
    pids = [os.fork() for _ in range(4)]
except BlockingIOError as exc:
    print("NEIGHBOUR-FORK", exc.strerror, flush=True)
else:
    if 0 in pids:
        os._exit(0)
    for pid in pids:
        os.waitpid(pid, 0)
    print("NEIGHBOUR-FORK ok", flush=True)
"""

# The sandbox's init (pid 1: bwrap, the platform's) from a step: its memory and environment.
INIT = r"""
import os
for path, mode in (("/proc/1/mem", os.O_RDWR), ("/proc/1/mem", os.O_RDONLY),
                   ("/proc/1/environ", os.O_RDONLY), ("/proc/1/task/1/mem", os.O_RDWR)):
    try:
        os.close(os.open(path, mode))
        print("INIT", path, mode, "OPENED", flush=True)
    except OSError as exc:
        print("INIT", path, mode, exc.strerror, flush=True)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, number, args in (("pidfd_open", 434, (1, 0)), ("get_robust_list", 274, (1, 0, 0)),
                           ("kcmp", 312, (os.getpid(), 1, 0, 0, 0))):
    done = libc.syscall(number, *args)
    print("CALL", name, done, os.strerror(ctypes.get_errno()) if done < 0 else "", flush=True)
child = os.fork()
if child == 0:
    os._exit(0)
own = libc.syscall(434, child, 0)  # a pidfd of its own child: as ever
print("OWN", "ok" if own >= 0 else os.strerror(ctypes.get_errno()), flush=True)
os.waitpid(child, 0)
print("PARENT", os.getppid(), flush=True)
"""


def log_shows(tasks: TaskStore, task_id: str, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while text not in (log := tasks.read_log(task_id, 1)):
        assert time.monotonic() < deadline, log
        assert tasks.get(task_id)["state"] not in states.FINAL, log
        time.sleep(0.05)
    return log


def host_uid(log: str) -> int:
    found = re.search(r"as host uid (\d+)", log)
    assert found, log
    return int(found.group(1))


def uid_map(log: str) -> list[str]:
    found = re.search(r"UID_MAP (\[.*\])", log)
    assert found, log
    return list(ast.literal_eval(found.group(1)))


def uids_of(job: Workload) -> set[int]:
    """The real uids of the task's processes, as the host sees them (/proc/PID/status)."""
    group = Cgroups().existing(cgroup_name(job))
    assert group is not None
    uids = set()
    for pid in group.processes():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue  # ended meanwhile
        uids.add(int(status.split("Uid:")[1].split()[0]))
    return uids


def test_one_tenant_holding_its_uid_s_kernel_budgets_leaves_another_s_whole(
        tasks: TaskStore, settings: Settings) -> None:
    hog = launch(tasks, settings, owner="tenant-a", steps=[["python3", "-c", HOG]])
    try:
        hog_log = log_shows(tasks, hog.task_id, "HOLDING")
        assert re.search(r"INOTIFY \d+ Too many open files", hog_log), hog_log
        forked = int(re.search(r"FORKED (\d+)", hog_log).group(1))  # type: ignore[union-attr]
        assert 0 < forked < 24  # its uid's processes reached the limit
        neighbour = launch(tasks, settings, owner="tenant-b",
                           steps=[["python3", "-c", NEIGHBOUR]])
        doc = final(tasks, neighbour.task_id)
        log = tasks.read_log(neighbour.task_id, 1)
        assert doc["state"] == states.SUCCEEDED, log
        assert "NEIGHBOUR-INOTIFY ok" in log and "NEIGHBOUR-FORK ok" in log
        # Each task's processes run as its own host uid, from the pool, never root or nobody,
        # which each step reads in its uid map (65534 inside; 0, for devpts, is nobody's).
        a, b = host_uid(hog_log), host_uid(log)
        assert a != b
        assert uid_map(hog_log) == ["0", "65534", "1", "65534", str(a), "1"]
        assert uid_map(log) == ["0", "65534", "1", "65534", str(b), "1"]
        first, count = settings.task_uid_first, settings.task_uid_count
        assert first <= a < first + count and first <= b < first + count
        assert uids_of(hog) == {a}  # the kernel charges A's processes to A's uid
    finally:
        LocalLauncher(settings).cancel(hog)
    assert final(tasks, hog.task_id)["state"] == states.CANCELLED


def test_a_task_s_uid_goes_back_to_the_pool_when_it_ends(tasks: TaskStore,
                                                         settings: Settings) -> None:
    job = launch(tasks, settings, owner="tenant-a", steps=[["true"]])
    assert final(tasks, job.task_id)["state"] == states.SUCCEEDED
    uid = host_uid(tasks.read_log(job.task_id, 1))
    launcher = LocalLauncher(settings)
    deadline = time.monotonic() + 30
    while launcher.uids.held(job.task_id, 1) is not None:  # given back once recorded
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert uid == settings.task_uid_first


def test_with_every_uid_held_a_launch_waits_and_never_shares_one(
        tasks: TaskStore, settings: Settings) -> None:
    settings = dataclasses.replace(settings, task_uid_count=1)
    holder = launch(tasks, settings, owner="tenant-a", steps=[UP_THEN_SLEEP])
    uid = host_uid(log_shows(tasks, holder.task_id, "UP"))
    doc, _ = tasks.create(records.new_task({"name": "tenant", "steps": [["true"]], "env": []},
                                           "tenant-b"))
    policies = PolicyStore(tasks.r, f"unused-{time.monotonic_ns()}")
    assert stages.validate(tasks, EnvLimits(), doc["id"], 1)
    assert stages.apply_policy(tasks, policies, doc["id"], 1)
    launcher = LocalLauncher(settings)
    with pytest.raises(UidsExhausted):  # the launch stage's task is retried later
        stages.launch(tasks, launcher, doc["id"], 1, settings.heartbeat_seconds)
    assert tasks.get(doc["id"])["state"] == states.RESOLVED  # waiting, nothing started
    assert launcher.slots.running() == 1  # its run slot went back: only the holder's
    launcher.cancel(holder)
    assert final(tasks, holder.task_id)["state"] == states.CANCELLED
    deadline = time.monotonic() + 30
    while launcher.uids.held(holder.task_id, 1) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    stages.launch(tasks, launcher, doc["id"], 1, settings.heartbeat_seconds)  # the retry
    assert final(tasks, doc["id"])["state"] == states.SUCCEEDED
    assert host_uid(tasks.read_log(doc["id"], 1)) == uid  # the one uid, now B's alone


def test_a_runner_that_lost_its_uid_stops_its_steps_before_sharing_it(
        tasks: TaskStore, settings: Settings) -> None:
    settings = dataclasses.replace(settings, task_uid_count=1)  # one uid to give
    job = launch(tasks, settings, owner="tenant-a", steps=[UP_THEN_SLEEP])
    uid = host_uid(log_shows(tasks, job.task_id, "UP"))
    pool = LocalLauncher(settings).uids
    pool.release(job.task_id, 1)  # as if its lease had lapsed ...
    assert pool.acquire("another", 1, time.time()) == uid  # ... and another task took it
    doc = final(tasks, job.task_id)
    assert doc["state"] == states.FAILED
    assert f"its lease of host uid {uid} had ended" in doc["reason"], doc["reason"]
    assert Cgroups().existing(cgroup_name(job)) is None  # nothing of it runs as the uid


def test_the_sandbox_s_init_is_neither_writable_nor_readable_from_a_step(
        tasks: TaskStore, settings: Settings) -> None:
    job = launch(tasks, settings, owner="tenant-a", steps=[["python3", "-c", INIT]])
    doc = final(tasks, job.task_id)
    log = tasks.read_log(job.task_id, 1)
    assert doc["state"] == states.SUCCEEDED, log
    assert "OPENED" not in log
    assert log.count("Permission denied") == 4, log
    assert "PARENT 1" in log  # pid 1 is the platform's init, the step's parent
    for name in ("pidfd_open", "get_robust_list", "kcmp"):  # nor a way round /proc
        assert f"CALL {name} -1 Operation not permitted" in log, log
    assert "OWN ok" in log


# -- Slurm: the same two tenants, as jobs of the test cluster -----------------------------

def slurm_finish(launcher: SlurmLauncher, workload: Workload, timeout: float = 90.0) -> Outcome:
    """Pass after pass, as the reconciler does, until the job has ended; its outcome."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        launcher.changes()
        seen = launcher.seen(workload)
        if seen is not None and seen.state != "running":
            return seen
        time.sleep(0.3)
    raise AssertionError(f"job of {workload.run_name} did not end")


def slurm_output(launcher: SlurmLauncher, workload: Workload, text: str,
                 timeout: float = 90.0) -> str:
    """What the job printed so far, once it shows ``text``."""
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        assert time.monotonic() < deadline, seen
        launcher.changes()
        seen += "".join(t for task, _, t in launcher.new_output() if task == workload.task_id)
        time.sleep(0.3)
    return seen


@pytest.mark.slurm
def test_two_tenants_jobs_on_slurm_run_as_uids_of_their_own(
        slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    launcher = SlurmLauncher(Settings(slurm_dir=str(tmp_path / "slurm"),
                                      step_timeout_seconds=120))
    hog = build_workload([["python3", "-c", HOG]])
    launcher.launch(hog, RecordingHooks().hooks)
    try:
        held = slurm_output(launcher, hog, "HOLDING")
        assert re.search(r"INOTIFY \d+ Too many open files", held), held
        neighbour = build_workload([["python3", "-c", NEIGHBOUR], ["python3", "-c", INIT]])
        launcher.launch(neighbour, RecordingHooks().hooks)
        a = launcher.uids.held(launcher.run_dir(hog), f"{hog.task_id}/r1")
        b = launcher.uids.held(launcher.run_dir(neighbour), f"{neighbour.task_id}/r1")
        assert a is not None and b is not None and a != b
        outcome = slurm_finish(launcher, neighbour)
        text = "".join(t for task, _, t in launcher.new_output()
                       if task == neighbour.task_id) + (launcher.logs(neighbour) or "")
        assert outcome.state == "succeeded", text
        assert "NEIGHBOUR-INOTIFY ok" in text and "NEIGHBOUR-FORK ok" in text
        # The node's sandbox seals its init as the local one does.
        assert "OPENED" not in text and text.count("Permission denied") == 4, text
        assert "CALL pidfd_open -1 Operation not permitted" in text and "OWN ok" in text
        assert launcher.uids.held(launcher.run_dir(neighbour), f"{neighbour.task_id}/r1") \
            is None  # given back with its end
        # The kernel charges A's sandboxed processes to A's uid: as the host sees them.
        running = {int(s.split("Uid:")[1].split()[0]) for s in statuses()
                   if "python3" in s.split("\n", 1)[0]}
        assert a in running and b not in running
    finally:
        cancel_until_done(launcher, hog)
    assert slurm_finish(launcher, hog).state != "running"
    launcher.logs(hog)  # as the reconciler copies it once the end is recorded
    assert launcher.uids.held(launcher.run_dir(hog), f"{hog.task_id}/r1") is None


def cancel_until_done(launcher: SlurmLauncher, workload: Workload) -> None:
    """scancel until Slurm no longer runs the job, as the reconciler retries a cancel."""
    deadline = time.monotonic() + 60
    while True:
        try:
            launcher.cancel(workload)
            return
        except TransientError:
            assert time.monotonic() < deadline
            time.sleep(0.3)


def statuses() -> list[str]:
    out = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            out.append(status.read_text())
        except OSError:
            continue
    return out
