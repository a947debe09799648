"""From POST to a final state with TASKENV_LAUNCHER=slurm, on a real one-node Slurm cluster.

Real Redis, real Celery workers, the reconciler process and the API (tests/stack.py),
submitting to the cluster tests/support/slurm.py starts: the launch worker runs
``sbatch``, the reconciler's one ``squeue`` per pass brings the end back, and the
job's output is streamed into the task's log.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.env.identity import Group, replica_env
from tests.integration.conftest import HOSTILE as COMMON_HOSTILE
from tests.integration.conftest import Stack, running_stack
from tests.support.slurm import SlurmCluster
from workers.localstack import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

HOSTILE = {**COMMON_HOSTILE, "COMMAS": "a,b=c,,d", "EXPORT_LOOKALIKE": "ALL,PATH=/evil"}
SECRET = "hf_slurm-pipeline-secret-90f1c3"
DUMP = ["python3", "-c", "import json; raw = open('/proc/self/environ', 'rb').read().decode(); "
        "print('ENV=' + json.dumps(dict(e.split('=', 1) for e in raw.split('\\0') if e)))"]
DIGEST = ["python3", "-c", "import hashlib, os; "
          "print('SHA=' + hashlib.sha256(os.environ['HF_TOKEN'].encode()).hexdigest()); "
          "print('RAW=' + os.environ['HF_TOKEN'])"]


@pytest.fixture(scope="module")
def slurm_stack(redis_server: RedisServer, slurm_cluster: SlurmCluster,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("slurm-stack")
    with running_stack(redis_server, root, TASKENV_LAUNCHER="slurm",
                       TASKENV_SLURM_DIR=str(root / "slurm"),
                       TASKENV_RECONCILE_INTERVAL_SECONDS="1",
                       SLURM_CONF=slurm_cluster.env["SLURM_CONF"]) as stack:
        yield stack


def env_dump(logs: str) -> dict[str, str]:
    line = next(line for line in logs.splitlines() if line.startswith("ENV="))
    found: dict[str, str] = json.loads(line[4:])
    return found


def test_hostile_values_and_a_secret_reach_the_job_exactly(slurm_stack: Stack) -> None:
    alice = slurm_stack.new_token("alice-slurm")
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in HOSTILE.items()]
    env.append({"name": "HF_TOKEN", "value": SECRET, "secret": True})
    created = slurm_stack.create({"name": "on-slurm", "steps": [DUMP, DIGEST], "env": env},
                                 token=alice)

    doc = slurm_stack.wait(created["id"], timeout=90)

    assert doc["status"] == "succeeded" and doc["exit_code"] == 0, doc
    logs = slurm_stack.call("GET", f"/api/v1/tasks/{created['id']}/logs", token=alice).text
    seen = env_dump(logs)
    resolved = {v["name"]: v["value"] for v in doc["resolved_env"]}
    own = {k: v for k, v in seen.items() if not k.startswith(("SLURM_", "SRUN_"))}
    world_of_one = dict(replica_env(Group(), 0))
    assert own == {**resolved, "HF_TOKEN": "[secret]", "PATH": "/usr/local/bin:/usr/bin:/bin",
                   "HOME": "/home/task", **world_of_one}
    for name, value in HOSTILE.items():
        assert seen[name] == value
    assert f"SHA={hashlib.sha256(SECRET.encode()).hexdigest()}" in logs
    assert "RAW=[secret]" in logs and SECRET not in logs


RENDEZVOUS = ("import os, socket, time\n"
              "rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])\n"
              "addr, port = os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])\n"
              "if rank == 0:\n"
              "    server = socket.create_server(('', port))\n"
              "    met = sorted(server.accept()[0].recv(9).decode() for _ in range(world - 1))\n"
              "    print('rank 0 met', met, flush=True)\n"
              "else:\n"
              "    for _ in range(100):\n"
              "        try:\n"
              "            socket.create_connection((addr, port), 1).sendall(b'%d' % rank)\n"
              "            break\n"
              "        except OSError:\n"
              "            time.sleep(0.1)\n")


def test_two_replicas_rendezvous_through_the_injected_variables(slurm_stack: Stack) -> None:
    created = slurm_stack.create({"name": "pair-on-slurm", "replicas": 2,
                                  "steps": [["python3", "-c", RENDEZVOUS]]})

    doc = slurm_stack.wait(created["id"], timeout=90)

    assert doc["status"] == "succeeded", doc
    logs = slurm_stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    assert "rank 0 met ['1']" in logs, logs


DDP = (Path(__file__).resolve().parents[2] / "examples/distributed/ddp.py").read_text()


@pytest.mark.torch
@pytest.mark.usefixtures("host_torch")
def test_pytorch_ddp_at_two_replicas_averages_the_gradients_across_them(
        slurm_stack: Stack) -> None:
    created = slurm_stack.create({
        "name": "ddp-on-slurm", "replicas": 2, "steps": [["python3", "ddp.py"]],
        "files": [{"path": "ddp.py", "content": DDP}],
        "env": [{"name": "LEARNING_RATE", "value": "0.1"},
                {"name": "DATA_DIR", "value": "/data/regression"}]})

    doc = slurm_stack.wait(created["id"], timeout=240)  # torch's import: seconds per process

    logs = slurm_stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    assert doc["status"] == "succeeded", (doc, logs)
    for k in range(2):
        assert (f"rank {k} of 2: RANK={k} WORLD_SIZE=2 LOCAL_RANK=unset LEARNING_RATE=0.1 "
                "DATA_DIR=/data/regression") in logs, logs
    passed = re.findall(r"rank (\d) of 2: OK 5 steps, .* gradients averaged over 2 ranks, "
                        r"weights equal on every rank \(checksum (\S+)\)", logs)
    assert sorted(rank for rank, _ in passed) == ["0", "1"], logs
    assert len({checksum for _, checksum in passed}) == 1, logs


def test_a_failing_step_fails_the_task_with_its_exit_code(slurm_stack: Stack) -> None:
    created = slurm_stack.create({"name": "fails-on-slurm", "steps": [
        ["sh", "-c", "echo preparing; exit 3"], ["echo", "never"]]})

    doc = slurm_stack.wait(created["id"], timeout=90)

    assert doc["status"] == "failed" and doc["exit_code"] == 3, doc
    assert "step 1 exited with 3" in doc["reason"]
    logs = slurm_stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    assert "preparing" in logs and "never" not in logs


# Four processes of 40 MiB: each within the per-process limit inside the sandbox
# (RLIMIT_DATA), together over the job's memory, which the job's cgroup enforces.
HOG = ["sh", "-c", 'for i in 1 2 3 4; do python3 -c "$0" & pids="$pids $!"; done; '
       'for p in $pids; do wait "$p" || exit 137; done',
       "import time; x = bytearray(40 * 2**20); time.sleep(10)"]


def test_an_over_memory_step_fails_the_task_naming_the_limit(slurm_stack: Stack) -> None:
    hog = HOG
    created = slurm_stack.create({"name": "hog-on-slurm", "steps": [hog, ["echo", "never"]],
                                  "resources": {"memory": "64Mi"}})

    doc = slurm_stack.wait(created["id"], timeout=90)

    assert doc["status"] == "failed", doc
    assert "out of memory" in doc["reason"] and "--mem=64M" in doc["reason"], doc["reason"]
    assert "never" not in slurm_stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text


def test_cancel_leaves_nothing_in_squeue(slurm_stack: Stack, slurm_cluster: SlurmCluster) -> None:
    created = slurm_stack.create({"name": "cancelled-on-slurm", "steps": [
        ["sh", "-c", "echo started; sleep 300"]]})
    task_id = created["id"]
    deadline = time.monotonic() + 60
    while "started" not in slurm_stack.call("GET", f"/api/v1/tasks/{task_id}/logs").text:
        assert time.monotonic() < deadline, slurm_stack.task(task_id)
        time.sleep(0.3)

    assert slurm_stack.call("POST", f"/api/v1/tasks/{task_id}/cancel").status_code in (200, 202)

    deadline = time.monotonic() + 60
    while _active_jobs(slurm_cluster, task_id):
        assert time.monotonic() < deadline, slurm_cluster.jobs()
        time.sleep(0.3)
    assert slurm_stack.task(task_id)["status"] == "cancelled"


def test_restart_never_leaves_two_jobs_of_the_task_alive(slurm_stack: Stack,
                                                         slurm_cluster: SlurmCluster) -> None:
    steps = [["sh", "-c", 'echo "LR=$LR"; sleep 300']]
    task_id = slurm_stack.create({"name": "restarted-on-slurm", "steps": steps,
                                  "env": [{"name": "LR", "value": "0.1"}]})["id"]
    _wait(lambda: "LR=0.1" in _logs(slurm_stack, task_id, 1), "revision 1 printing")
    most, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            most[0] = max(most[0], len(_active_jobs(slurm_cluster, task_id)))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        response = slurm_stack.call(
            "PATCH", f"/api/v1/tasks/{task_id}/env", headers={"If-Match": '"1"'},
            json={"set": [{"name": "LR", "value": "0.2"}], "apply": "restart"})
        assert response.status_code == 202, response.text
        _wait(lambda: "LR=0.2" in _logs(slurm_stack, task_id, 2), "revision 2 printing")
    finally:
        stop.set()
        watcher.join()
    assert most[0] == 1
    [job] = _active_jobs(slurm_cluster, task_id)
    assert job.endswith(f"taskenv:{task_id}:2")
    slurm_stack.call("POST", f"/api/v1/tasks/{task_id}/cancel")
    _wait(lambda: not _active_jobs(slurm_cluster, task_id), "cancelled")


def test_each_replicas_lines_are_prefixed_and_replica_k_keeps_its_own(
        slurm_stack: Stack) -> None:
    created = slurm_stack.create({"name": "prefixed-on-slurm", "replicas": 2, "steps": [
        ["sh", "-c", 'echo "hello from $RANK"; echo "err from $RANK" >&2']]})

    doc = slurm_stack.wait(created["id"], timeout=90)

    assert doc["status"] == "succeeded", doc
    logs = slurm_stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    assert "[replica 0] hello from 0\n" in logs and "[replica 1] err from 1\n" in logs, logs
    one = slurm_stack.call("GET", f"/api/v1/tasks/{created['id']}/logs?replica=1").text
    assert one.splitlines() and sorted(one.splitlines()) == ["err from 1", "hello from 1"], one


def test_a_tasks_own_start_up_files_and_hooks_run_no_code_outside_the_sandbox(
        slurm_stack: Stack, tmp_path: Path) -> None:
    """PYTHONPATH=home with a sitecustomize.py, HOME=home with a .pth: the task's own, so
    they may reach its sandbox, and nothing outside it (the batch program, srun, bwrap)
    ever has them.  (LD_PRELOAD of a library an earlier step wrote: test_slurm_hostile.)"""
    marker = tmp_path / "PWNED"
    write = (f"import os\ntry:\n    open({str(marker)!r}, 'a').write('ran outside')\n"
             "except OSError:\n    pass\n")
    files = [{"path": "sitecustomize.py", "content": write},
             {"path": ".local/lib/python3.11/site-packages/evil.pth",
              "content": "import os; exec(" + repr(write) + ")\n"}]
    created = slurm_stack.create({"name": "startup-on-slurm", "files": files, "steps": [
        ["python3", "-c", "print('step ran')"]], "env": [
        {"name": "PYTHONPATH", "value": "home"}, {"name": "HOME", "value": "home"}]})

    doc = slurm_stack.wait(created["id"], timeout=90)

    logs = slurm_stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    assert doc["status"] == "succeeded", (doc, logs)
    assert "step ran" in logs and not marker.exists()


def _logs(stack: Stack, task_id: str, revision: int) -> str:
    return stack.call("GET", f"/api/v1/tasks/{task_id}/logs?revision={revision}").text


def _wait(done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _active_jobs(cluster: SlurmCluster, task_id: str) -> list[str]:
    """The task's jobs Slurm has not finished with (pending, running, completing)."""
    out = cluster.run("squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING",
                      "--Format=State:|,Comment:").stdout
    return [line for line in out.splitlines() if f"taskenv:{task_id}:" in line]
