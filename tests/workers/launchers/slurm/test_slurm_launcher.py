"""The slurm launcher against a real one-node Slurm cluster the tests start
(tests/support/slurm.py): real sbatch, squeue, scancel, srun and bwrap on the node."""

from __future__ import annotations

import hashlib
import json
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.config import Settings
from shared.env.identity import replica_env
from shared.errors import LaunchFailed
from shared.task.files import TaskFile
from shared.task.workload import Resources, Workload
from tests.support.slurm import SlurmCluster
from tests.workers.conftest import RecordingHooks, build_workload
from workers.launchers.base import Outcome
from workers.launchers.slurm.launcher import SlurmLauncher

pytestmark = pytest.mark.slurm

HOSTILE = {"COMMAS": "a,b=c,,d", "NEWLINES": "one\ntwo\n", "SUBSHELL": "$(HOME)",
           "BACKTICKS": "`id`", "QUOTES": "'\"\\", "NON_ASCII": "数据 — ü ✓", "EMPTY": ""}
SECRET = "hf_slurm-secret-5d2c91ab7e"
# The environment the step was started with (python3 itself adds LC_CTYPE to os.environ).
DUMP = ["python3", "-c", "import json; raw = open('/proc/self/environ', 'rb').read().decode(); "
        "print('ENV=' + json.dumps(dict(e.split('=', 1) for e in raw.split('\\0') if e)))"]


@pytest.fixture
def launcher(slurm_cluster: SlurmCluster, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> SlurmLauncher:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    return SlurmLauncher(Settings(slurm_dir=str(tmp_path / "slurm"), step_timeout_seconds=120))


def finish(launcher: SlurmLauncher, workload: Workload, timeout: float = 60.0) -> Outcome:
    """Pass after pass, as the reconciler does, until the job has ended; its outcome."""
    key = (workload.task_id, workload.revision)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        launcher.changes()
        seen = launcher.seen(workload)
        if seen is not None and seen.state != "running" and key in launcher.listed:
            return seen
        time.sleep(0.3)
    raise AssertionError(f"job of {workload.run_name} did not end")


STREAMED: dict[tuple[str, int], str] = {}


def output(launcher: SlurmLauncher, workload: Workload) -> str:
    """What the job printed: the lines streamed so far (kept for each job, as the
    reconciler keeps them in each task's log) and the rest."""
    for task_id, revision, text in launcher.new_output():
        STREAMED[(task_id, revision)] = STREAMED.get((task_id, revision), "") + text
    streamed = STREAMED.pop((workload.task_id, workload.revision), "")
    return streamed + (launcher.logs(workload) or "")


def dumped_env(text: str) -> dict[str, str]:
    line = next(line for line in text.splitlines() if line.startswith("ENV="))
    env: dict[str, str] = json.loads(line[4:])
    return env


def test_hostile_values_arrive_exactly_and_nothing_else(launcher: SlurmLauncher) -> None:
    # The job's output file hides the secret's value: the step says its hash too.
    hashed = ["python3", "-c", "import hashlib, os; "
              "print('HASH=' + hashlib.sha256(os.environ['HF_TOKEN'].encode()).hexdigest())"]
    workload = build_workload([DUMP, hashed], env=HOSTILE, secrets={"HF_TOKEN": SECRET})
    hooks = RecordingHooks()
    assert launcher.launch(workload, hooks.hooks) == Outcome("running")
    assert hooks.started == 1
    assert finish(launcher, workload) == Outcome("succeeded", exit_code=0)
    text = output(launcher, workload)
    env = dumped_env(text)
    own = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SRUN_"))}
    assert own == {**HOSTILE, "HF_TOKEN": "[secret]", "PATH": "/usr/local/bin:/usr/bin:/bin",
                   "HOME": "/home/task", **dict(replica_env(workload.group(), 0))}
    assert f"HASH={hashlib.sha256(SECRET.encode()).hexdigest()}" in text and SECRET not in text
    assert env["SLURM_JOB_ID"] == str(launcher.job_id(workload))


def test_the_secret_is_on_no_command_line_in_no_job_record_and_in_no_file(
        launcher: SlurmLauncher, slurm_cluster: SlurmCluster) -> None:
    workload = build_workload([["sleep", "3"]], secrets={"HF_TOKEN": SECRET})
    launcher.launch(workload, RecordingHooks().hooks)
    job = launcher.job_id(workload)
    shown = slurm_cluster.run("scontrol", "show", "job", "-dd", str(job)).stdout
    assert shown and SECRET not in shown
    script = slurm_cluster.run("scontrol", "write", "batch_script", str(job), "-").stdout
    assert "sleep" in script and SECRET not in script
    for proc in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert SECRET.encode() not in proc.read_bytes()
        except OSError:
            continue
    run_dir = launcher.run_dir(workload)
    values = run_dir / "env"  # the values, until the batch program has them in memory
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    deadline = time.monotonic() + 30
    while values.exists():  # gone once the job has started
        assert stat.S_IMODE(values.stat().st_mode) == 0o600
        assert time.monotonic() < deadline, "the env file outlived the job's start"
        time.sleep(0.1)
    for path in [*run_dir.parent.rglob("*"), *slurm_cluster.root.rglob("*")]:
        if path.is_file() and not path.is_socket():  # Slurm's state and spool too
            assert SECRET.encode() not in path.read_bytes(), path
    for proc in Path("/proc").glob("[0-9]*/environ"):  # no process has it in its env
        try:  # but the step's own sandbox (bwrap's pid 1 inside holds none: started empty)
            raw = proc.read_bytes()
            comm = (proc.parent / "comm").read_text().strip()
        except OSError:
            continue
        if SECRET.encode() in raw:
            assert comm == "sleep", (proc, comm)
    finish(launcher, workload)


def test_the_tasks_files_reach_the_node_in_its_working_directory(
        launcher: SlurmLauncher) -> None:
    files = (TaskFile("bin/train.sh", '#!/bin/sh\necho "trained in $(pwd) with LR=$LR"\n', 0o755),
             TaskFile("conf/params.json", '{"epochs": 3}\n'))
    workload = build_workload([["bin/train.sh"], ["cat", "conf/params.json"]], env={"LR": "0.1"},
                              workdir="runs/1", files=files)
    launcher.launch(workload, RecordingHooks().hooks)
    assert finish(launcher, workload) == Outcome("succeeded", exit_code=0)
    text = output(launcher, workload)
    assert "trained in /home/task/runs/1 with LR=0.1" in text and '{"epochs": 3}' in text


def test_a_failing_step_fails_the_task_with_its_exit_code(launcher: SlurmLauncher) -> None:
    workload = build_workload([["echo", "first"], ["sh", "-c", "exit 3"], ["echo", "never"]])
    launcher.launch(workload, RecordingHooks().hooks)
    assert finish(launcher, workload) == Outcome("failed", exit_code=3,
                                                 reason="step 2 exited with 3")
    text = output(launcher, workload)
    assert "first" in text and "never" not in text
    assert not (launcher.run_dir(workload) / "output.log").exists()  # removed once read


def test_the_step_runs_sandboxed_without_reach_to_loopback(launcher: SlurmLauncher) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = ("import os, socket\nprint('uid', os.getuid())\n"
                 f"try:\n    socket.create_connection(('127.0.0.1', {port}), 2)\n"
                 "    print('REACHED')\nexcept OSError as exc:\n    print('refused', exc)\n"
                 "print('project visible', os.path.exists('" + str(Path.cwd()) + "'))\n"
                 "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                 "if libc.unshare(0x10000000) == 0:\n    print('NESTED USERNS')\n"
                 "else:\n    print('seccomp refused', ctypes.get_errno())")
        workload = build_workload([["python3", "-c", probe]])
        launcher.launch(workload, RecordingHooks().hooks)
        ended = finish(launcher, workload)
        text = output(launcher, workload)
        assert ended.state == "succeeded", (ended, text)
    assert "uid 65534" in text and "refused" in text and "REACHED" not in text
    assert "project visible False" in text
    assert "seccomp refused 1" in text and "NESTED USERNS" not in text  # EPERM


# Four processes of 40 MiB each: every one within the per-process limit (RLIMIT_DATA), all
# of them together over the job's memory, which the kernel (the job's cgroup) enforces.
HOG = ["sh", "-c", 'for i in 1 2 3 4; do python3 -c "$0" & pids="$pids $!"; done; '
       'for p in $pids; do wait "$p" || exit 137; done',
       "import time; x = bytearray(40 * 2**20); time.sleep(10)"]


def test_an_over_memory_step_fails_naming_the_limit(launcher: SlurmLauncher) -> None:
    hog = HOG
    workload = build_workload([hog], resources=Resources(memory="64Mi"))
    launcher.launch(workload, RecordingHooks().hooks)
    outcome = finish(launcher, workload)
    assert outcome.state == "failed"
    assert outcome.reason is not None
    assert "out of memory" in outcome.reason and "--mem=64M" in outcome.reason


def test_cancel_leaves_nothing_in_squeue(launcher: SlurmLauncher,
                                         slurm_cluster: SlurmCluster) -> None:
    workload = build_workload([["sleep", "300"]])
    launcher.launch(workload, RecordingHooks().hooks)
    job = launcher.job_id(workload)
    deadline = time.monotonic() + 30
    while launcher.observe(workload) != Outcome("running") or _state(slurm_cluster, job) \
            != "RUNNING":
        assert time.monotonic() < deadline, slurm_cluster.run("squeue", "-t", "all").stdout
        time.sleep(0.2)
    _cancel_until_done(launcher, workload)
    assert _state(slurm_cluster, job) in ("CANCELLED", None)
    launcher.cancel(workload)  # twice: nothing more to do


def test_a_redelivered_launch_adopts_the_submitted_job(launcher: SlurmLauncher,
                                                       slurm_cluster: SlurmCluster) -> None:
    workload = build_workload([["sleep", "2"]])
    launcher.launch(workload, RecordingHooks().hooks)
    again = RecordingHooks()
    assert launcher.launch(workload, again.hooks) == Outcome("running")
    assert again.started == 1 and "submitted" not in again.text
    claim = launcher.run_dir(workload).with_name("r1.job")
    claim.write_text("")  # died after sbatch, before noting
    SlurmLauncher(Settings(slurm_dir=str(launcher.root))).launch(workload, RecordingHooks().hooks)
    named = [j for j in slurm_cluster.jobs() if j["name"] == workload.run_name]
    assert len(named) == 1
    finish(launcher, workload)


def test_slurm_refuses_what_it_cannot_be_given(launcher: SlurmLauncher) -> None:
    workload = build_workload([["true"]], env={"SLURM_CPUS_PER_TASK": "64"},
                              resources=Resources(memory="lots"))
    with pytest.raises(LaunchFailed) as caught:
        launcher.launch(workload, RecordingHooks().hooks)
    assert "SLURM_CPUS_PER_TASK" in str(caught.value) and "resources.memory" in str(caught.value)
    assert not launcher.run_dir(workload).with_name("r1.job").exists()  # a later launch may submit


def test_a_controller_restart_loses_nothing(launcher: SlurmLauncher,
                                            slurm_cluster: SlurmCluster) -> None:
    workload = build_workload([["sh", "-c", "sleep 4; echo done"]])
    launcher.launch(workload, RecordingHooks().hooks)
    launcher.changes()
    slurm_cluster.stop_controller()
    with pytest.raises(Exception):  # noqa: B017, PT011 - the backend cannot be read: no news
        launcher.changes()
    slurm_cluster.start_controller()
    slurm_cluster.wait_idle()
    assert finish(launcher, workload) == Outcome("succeeded", exit_code=0)
    assert "done" in output(launcher, workload)


def test_a_late_reconciler_reads_the_outcome_the_job_left(launcher: SlurmLauncher) -> None:
    workload = build_workload([["sh", "-c", "exit 5"]])
    launcher.launch(workload, RecordingHooks().hooks)
    finish(launcher, workload)
    late = SlurmLauncher(Settings(slurm_dir=str(launcher.root)))  # Slurm forgot the job
    assert late.seen(workload) == Outcome("failed", exit_code=5, reason="step 1 exited with 5")


# Each replica announces itself to rank 0 over TCP at MASTER_ADDR:MASTER_PORT, as a
# torch.distributed TCPStore rendezvous does; rank 0 prints whom it met.
RENDEZVOUS = """
import os, socket, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
assert os.environ["PET_NODE_RANK"] == str(rank) and os.environ["PET_MASTER_PORT"] == str(port)
if rank == 0:
    server = socket.create_server(("", port))
    met = sorted(server.accept()[0].recv(100).decode() for _ in range(world - 1))
    print("rank 0 met", met, "at", addr, flush=True)
else:
    for _ in range(100):
        try:
            socket.create_connection((addr, port), 1).sendall(str(rank).encode())
            break
        except OSError:
            time.sleep(0.1)
    print("rank", rank, "of", world, "joined", flush=True)
"""


def test_two_replicas_meet_through_the_injected_variables(launcher: SlurmLauncher) -> None:
    workload = build_workload([["python3", "-c", RENDEZVOUS], DUMP], replicas=2)
    launcher.launch(workload, RecordingHooks().hooks)
    assert finish(launcher, workload) == Outcome("succeeded", exit_code=0)
    text = output(launcher, workload)
    assert "rank 0 met ['1'] at 127.0.0.1" in text and "rank 1 of 2 joined" in text
    dumps = [json.loads(line.split("ENV=", 1)[1]) for line in text.splitlines()
             if line.startswith(("[replica 0] ENV=", "[replica 1] ENV="))]
    assert sorted(d["RANK"] for d in dumps) == ["0", "1"]
    for env in dumps:
        assert env["WORLD_SIZE"] == env["TASK_REPLICAS"] == env["PET_NNODES"] == "2"
        assert env["TASK_REPLICA"] == env["PET_NODE_RANK"] == env["RANK"]
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "29500"


def test_a_failing_replica_fails_the_task_naming_it(launcher: SlurmLauncher) -> None:
    step = ["sh", "-c", 'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 30']
    workload = build_workload([step, ["echo", "never"]], replicas=2)
    launcher.launch(workload, RecordingHooks().hooks)
    assert finish(launcher, workload) == Outcome("failed", exit_code=3,
                                                 reason="step 1: replica 1 exited with 3")
    assert "never" not in output(launcher, workload)


def test_two_jobs_sharing_the_node_rendezvous_on_the_same_port_without_colliding(
        launcher: SlurmLauncher) -> None:
    """Without any port reserved from Slurm (MpiParams=ports or not): each job's replicas
    meet in the job's own network namespace, so two jobs on one node, at once, both bind
    127.0.0.1:29500 and each meets its own replica only."""
    workloads = []
    for _ in range(2):
        workloads.append(build_workload([["python3", "-c", "import time; time.sleep(2)\n" +
                                          RENDEZVOUS]], replicas=2))
        launcher.launch(workloads[-1], RecordingHooks().hooks)
    for workload in workloads:
        assert finish(launcher, workload) == Outcome("succeeded", exit_code=0)
        assert "rank 0 met ['1'] at 127.0.0.1" in output(launcher, workload)


def test_a_partition_slurm_does_not_have_fails_the_launch_saying_so(
        slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    launcher = SlurmLauncher(Settings(slurm_dir=str(tmp_path), slurm_partition="nowhere"))
    workload = build_workload([["true"]])
    with pytest.raises(LaunchFailed, match="(?i)sbatch: .*invalid partition"):
        launcher.launch(workload, RecordingHooks().hooks)
    assert not launcher.run_dir(workload).with_name("r1.job").exists()


def test_a_node_without_the_sandbox_runs_nothing_and_says_so(
        slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    launcher = SlurmLauncher(Settings(slurm_dir=str(tmp_path), slurm_bwrap="/nowhere/bwrap"))
    workload = build_workload([["sh", "-c", "echo RAN"]])
    launcher.launch(workload, RecordingHooks().hooks)
    assert finish(launcher, workload) == Outcome("failed", exit_code=127,
                                                 reason="step 1 exited with 127")
    text = output(launcher, workload)
    assert "cannot start the sandbox /nowhere/bwrap" in text and "RAN" not in text


def test_why_not_export_none_slurm_drops_the_export_file_and_loads_a_login_env(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """The fact the launcher is built around (Slurm 22.05): with --export=NONE the export
    file is ignored and the node loads the submitting user's login environment; with the
    default export and an sbatch environment of SLURM_CONF alone, the file is the env."""
    exported = tmp_path / "export"
    exported.write_bytes(b"COMMAS=a,b\0NEWLINE=x\ny\0")
    seen = {}
    for how in ("--export=NONE", None):
        out = tmp_path / f"env-{bool(how)}"
        argv = ["sbatch", "--parsable", f"--export-file={exported}", "--output=/dev/null",
                *([how] if how else [])]
        job = subprocess.run(argv, input=f"#!/bin/sh\n/usr/bin/env -0 > {out}\n", text=True,
                             env={"SLURM_CONF": slurm_cluster.env["SLURM_CONF"]},
                             capture_output=True, check=True).stdout.strip()
        deadline = time.monotonic() + 30
        while _state(slurm_cluster, int(job)) not in ("COMPLETED", "FAILED"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        seen[how] = dict(e.split("=", 1) for e in out.read_text().split("\0") if "=" in e)
    assert "COMMAS" not in seen["--export=NONE"]
    assert seen["--export=NONE"]["SLURM_GET_USER_ENV"] == "1"
    assert seen[None]["COMMAS"] == "a,b" and seen[None]["NEWLINE"] == "x\ny"


def _state(cluster: SlurmCluster, job: int | None) -> str | None:
    for found in cluster.jobs():
        if found["job_id"] == job:
            return str(found["job_state"])
    return None


def _cancel_until_done(launcher: SlurmLauncher, workload: Workload) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            launcher.cancel(workload)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture(autouse=True)
def _no_leftover_jobs(slurm_cluster: SlurmCluster) -> Iterator[None]:
    yield
    slurm_cluster.run("scancel", "--me", "--state=PENDING", check=False)
