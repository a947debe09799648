"""PyTorch's own rendezvous across two Slurm nodes, through the whole stack: a task of
``nodes: 2`` runs a replica (or two) on each node of the two-node test cluster, each
slurmd in a network namespace of its own with its own address.

``init_process_group("gloo")`` with no argument (env://) and ``torchrun`` with no flag
meet at MASTER_ADDR, the first node's address in the job's own network, over the
interface each node chose (GLOO_SOCKET_IFNAME): no address nor interface typed anywhere.
The DDP task is examples/distributed/ddp.yaml, submitted by the CLI with ``--nodes 2``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import Stack, running_stack
from tests.integration.test_torch import EXAMPLE, TIMEOUT, checksums, example, joined, replica_log
from tests.support.slurm import SlurmCluster
from workers.launchers.slurm.traits import JOB_NET_MASTER
from workers.localstack import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slurm]
TORCH = [pytest.mark.torch, pytest.mark.usefixtures("host_torch")]

SHOW = ["python3", "-c", "import os; print('TOLD', os.environ['MASTER_ADDR'], "
        "os.environ['GLOO_SOCKET_IFNAME'], os.environ['SLURM_NODEID'])"]


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, slurm_nodes: SlurmCluster,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("slurm-nodes-stack")
    with running_stack(redis_server, root, TASKENV_LAUNCHER="slurm",
                       TASKENV_SLURM_DIR=str(root / "slurm"),
                       TASKENV_RECONCILE_INTERVAL_SECONDS="1",
                       SLURM_CONF=slurm_nodes.env["SLURM_CONF"]) as running:
        yield running


@TORCH[0]
@TORCH[1]
def test_ddp_across_two_nodes_through_the_cli_averages_the_gradients(stack: Stack) -> None:
    from tests.integration.test_cli import taskenv
    user = stack.new_token("torch-nodes")
    body = example("ddp.yaml")
    submitted = taskenv(stack, user, "submit", str(EXAMPLE / "ddp.yaml"), "--replicas", "2",
                        "--nodes", "2", "--follow")
    out = submitted.stdout
    assert submitted.returncode == 0, out + submitted.stderr
    assert sorted(joined(out)) == [
        (str(k), "2", str(k), "2", "unset", "0.1", "/data/regression") for k in range(2)], out
    assert len(checksums(out, 2)) == 1, out
    # Each node said which interface it chose: the job network's, on both.
    chosen = [line for line in out.splitlines() if line.startswith("==> on ")]
    assert len(chosen) == 2 and all("GLOO_SOCKET_IFNAME=tj" in line for line in chosen), out
    assert body["replicas"] == 2


@TORCH[0]
@TORCH[1]
def test_torchrun_across_two_nodes_makes_a_world_of_four(stack: Stack) -> None:
    # torchrun and its two processes hold three imports of torch on each node: more than
    # the cluster's default of 400 MB per CPU.
    task = stack.create(example("torchrun.yaml", nodes=2, resources={"memory": "1500Mi"},
                                steps=[SHOW, *example("torchrun.yaml")["steps"]]))
    done = stack.wait(task["id"], timeout=TIMEOUT)
    logs = replica_log(stack, task["id"])
    assert (done["status"], done.get("nodes")) == ("succeeded", 2), (done, logs)
    shown = {v["name"]: v for v in done["resolved_env"]}
    assert shown["MASTER_ADDR"]["value"] == JOB_NET_MASTER
    assert shown["GLOO_SOCKET_IFNAME"]["source"] == shown["NCCL_SOCKET_IFNAME"]["source"] == \
        "node"
    # Both replicas received the resolved env as resolved; the second node added a name of
    # its own (its TaskProlog, tests/conftest.py), which the task's warnings name.
    received = done["received"]
    assert received["same"] is True, received
    assert [(w["replica"], w["names"]) for w in received["warnings"]] == [
        (1, ["SLURM_SITE_SCRATCH"])], received
    assert any(w["rule"] == "env.received" and w["replica"] == 1 for w in done["warnings"])
    for k in range(2):
        text = replica_log(stack, task["id"], k)
        assert f"TOLD {JOB_NET_MASTER} tj" in text and text.rstrip().count("TOLD") == 1, text
        assert text.split("TOLD", 1)[1].split()[2] == str(k), text  # replica k on node k
        assert sorted(p[4] for p in joined(text)) == ["0", "1"], text  # LOCAL_RANK 0, 1
    assert sorted(int(p[0]) for p in joined(logs)) == [0, 1, 2, 3], logs
    assert len(checksums(logs, 4)) == 1, logs


def test_a_task_whose_replicas_do_not_divide_over_its_nodes_is_refused(stack: Stack) -> None:
    answer = stack.call("POST", "/api/v1/tasks", json={
        "name": "uneven", "steps": [["true"]], "replicas": 3, "nodes": 2})
    assert answer.status_code == 400, answer.text
    rules = [p["rule"] for p in answer.json()["errors"]]
    assert rules == ["nodes.divides"], answer.json()


def test_an_admins_per_node_default_reaches_only_its_node_and_is_recorded(
        stack: Stack, slurm_nodes: SlurmCluster) -> None:
    second = slurm_nodes.names[1]
    before = stack.call("GET", "/api/v1/policy").json()
    stack.set_policy({"defaults": [
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth-fast", "when": {"node": second}},
        {"name": "SCRATCH", "value": "/local", "when": {"node": "*"}}], "protected": []})
    try:
        user = stack.new_token("per-node-user")
        show = ("import os; print('IFNAME', os.environ['NCCL_SOCKET_IFNAME'], "
                "os.environ['SCRATCH'])")
        task = stack.create({"name": "per-node", "replicas": 2, "nodes": 2,
                             "env": [{"name": "SCRATCH", "value": "/mine"}],
                             "steps": [["python3", "-c", show]]}, token=user)
        done = stack.wait(task["id"], timeout=120)
    finally:
        stack.set_policy({k: before.get(k, []) for k in ("defaults", "protected", "rules")})
    logs = replica_log(stack, task["id"])
    assert done["status"] == "succeeded", (done, logs)
    # The user's SCRATCH wins on both nodes; the second node's interface is the admin's.
    assert [n["name"] for n in done["per_node"]] == ["NCCL_SOCKET_IFNAME"], done["per_node"]
    assert "[replica 1] IFNAME eth-fast /mine" in logs, logs
    assert "[replica 0] IFNAME tj" in logs and "/mine" in logs.split("[replica 0]")[1], logs
    assert done["received"]["per_node"] == [
        {"replica": 1, "node": second, "values": {"NCCL_SOCKET_IFNAME": "eth-fast"}}], done
