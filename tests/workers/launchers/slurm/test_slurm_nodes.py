"""A task spread over nodes (``nodes``) on the two-node test cluster: real sbatch and srun,
each node's slurmd in a network namespace of its own with its own address.

One replica (or two) on each node, block by block; replica 0's node first.  The nodes'
namespaces of the job are joined by the job's own network, where replica 0 listens at
``JOB_NET_MASTER`` on every node; GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME name the
interface that routes there, as chosen on each node; and a step reaches the other node's
replicas, never a node's own address nor the controller's.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from shared.config import Settings
from shared.task.workload import Workload
from tests.support.slurm import SlurmCluster
from tests.workers.conftest import RecordingHooks, build_workload
from tests.workers.launchers.slurm.test_slurm_launcher import finish, output
from workers.launchers.base import Outcome
from workers.launchers.slurm.launcher import SlurmLauncher
from workers.launchers.slurm.traits import JOB_NET_MASTER
from workers.sync import received_env

pytestmark = pytest.mark.slurm

# Each replica: where it runs and what it was told, then a rendezvous of the whole world
# at MASTER_ADDR, then a try at every address it was given as unreachable (``PROBE``).
MEET = """
import json, os, socket, time
rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
addr, port = os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])
probes = {}
for target in os.environ.get('PROBE', '').split():
    try:
        socket.create_connection((target, 22), 1).close()
        probes[target] = 'reached'
    except OSError as exc:
        probes[target] = exc.strerror
if rank == 0:
    server = socket.create_server(('', port))
    met = sorted(server.accept()[0].recv(9).decode() for _ in range(world - 1))
else:
    for _ in range(300):
        try:
            socket.create_connection((addr, port), 1).sendall(b'%d' % rank)
            break
        except OSError:
            time.sleep(0.1)
    met = None
print('SEEN=' + json.dumps({'rank': rank, 'master': addr, 'met': met, 'probes': probes,
      'node': os.environ.get('SLURM_NODEID'), 'gloo': os.environ.get('GLOO_SOCKET_IFNAME'),
      'nccl': os.environ.get('NCCL_SOCKET_IFNAME')}), flush=True)
"""
STEP = ["python3", "-c", MEET]


@pytest.fixture
def launcher(slurm_nodes: SlurmCluster, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> SlurmLauncher:
    monkeypatch.setenv("SLURM_CONF", slurm_nodes.env["SLURM_CONF"])
    return SlurmLauncher(Settings(slurm_dir=str(tmp_path / "slurm"), step_timeout_seconds=120))


def seen(text: str) -> dict[int, dict[str, object]]:
    found = [json.loads(line.split("SEEN=", 1)[1]) for line in text.splitlines()
             if "SEEN=" in line]
    return {entry["rank"]: entry for entry in found}


def run(launcher: SlurmLauncher, env: dict[str, str] | None = None,
        **fields: object) -> tuple[Outcome, str]:
    return launched(launcher, build_workload([STEP], env=env, **fields))


def launched(launcher: SlurmLauncher, workload: Workload) -> tuple[Outcome, str]:
    """The workload launched and followed to its end: its outcome and what it printed."""
    assert launcher.launch(workload, RecordingHooks().hooks) == Outcome("running")
    outcome = finish(launcher, workload, timeout=120)
    return outcome, output(launcher, workload)


def test_one_replica_on_each_node_meets_at_the_first_nodes_address_in_the_jobs_network(
        launcher: SlurmLauncher, slurm_nodes: SlurmCluster) -> None:
    controller = slurm_nodes.network.gateway if slurm_nodes.network else ""
    probes = [slurm_nodes.address(n) for n in slurm_nodes.names] + [controller]
    outcome, text = run(launcher, env={"PROBE": " ".join(probes)}, replicas=2, nodes=2)

    assert outcome == Outcome("succeeded", exit_code=0), text
    replicas = seen(text)
    assert sorted(replicas) == [0, 1], text
    assert replicas[0]["met"] == ["1"], text
    for rank, entry in replicas.items():
        assert entry["master"] == JOB_NET_MASTER, entry
        # Chosen on each node: the job network's device, on the node holding MASTER_ADDR too.
        assert str(entry["gloo"]).startswith("tj") and entry["nccl"] == entry["gloo"], entry
        # No route out of the job's network: not to a node, not to the controller.
        assert entry["probes"] == dict.fromkeys(probes, "Network is unreachable"), entry
    names = [line for line in text.splitlines() if line.startswith("==> on ")]
    assert sorted(line.split()[2] for line in names) == sorted(f"{n}:" for n in slurm_nodes.names)


def test_replicas_go_block_by_block_and_a_world_of_four_meets(launcher: SlurmLauncher) -> None:
    outcome, text = run(launcher, replicas=4, nodes=2)

    assert outcome == Outcome("succeeded", exit_code=0), text
    replicas = seen(text)
    assert replicas[0]["met"] == ["1", "2", "3"], text
    # Replicas 0 and 1 on the first node, 2 and 3 on the second: each node says so once.
    assert {rank: entry["node"] for rank, entry in replicas.items()} == {
        0: "0", 1: "0", 2: "1", 3: "1"}, text
    said = [line for line in text.splitlines() if line.startswith("==> on ")]
    assert len(said) == 2, text


def test_an_interface_the_task_sets_is_kept(launcher: SlurmLauncher) -> None:
    outcome, text = run(launcher, env={"GLOO_SOCKET_IFNAME": "ib0"}, replicas=2, nodes=2)

    # ib0 is not an interface here: gloo would fail, the socket rendezvous does not care.
    assert outcome == Outcome("succeeded", exit_code=0), text
    for entry in seen(text).values():
        assert entry["gloo"] == "ib0" and str(entry["nccl"]).startswith("tj"), entry


def test_nothing_of_the_jobs_network_outlives_it(launcher: SlurmLauncher,
                                                 slurm_nodes: SlurmCluster) -> None:
    workload = build_workload([STEP], replicas=2, nodes=2)
    assert launcher.launch(workload, RecordingHooks().hooks) == Outcome("running")
    run_dir = launcher.run_dir(workload)
    outcome = finish(launcher, workload, timeout=120)
    assert outcome.state == "succeeded", output(launcher, workload)

    # The values were read by both nodes' holders, then the file went; no home seed either.
    assert sorted(p.name for p in run_dir.glob("holder-*.json")) == sorted(
        f"holder-{n}.json" for n in slurm_nodes.names)
    assert not (run_dir / "env").exists() and not (run_dir / "home").exists()

    for name in slurm_nodes.names:
        links = subprocess.run(["ip", "-n", name, "-o", "link"], capture_output=True,
                               text=True, check=True).stdout
        assert " tj" not in links, (name, links)


# The names of interest only: long lines of two nodes' tasks may reach the job's output
# interleaved by srun.
NAMES = ["python3", "-c", "import os; print('NAMES=' + ' '.join(sorted(n for n in os.environ "
         "if n.startswith(('SLURM_SITE', 'NODE_ONLY', 'LEARNING')))))"]


def test_each_replicas_env_is_looked_at_outside_the_sandbox_and_a_nodes_addition_named(
        launcher: SlurmLauncher, slurm_nodes: SlurmCluster) -> None:
    """The second node's TaskProlog adds SLURM_SITE_SCRATCH (Slurm's prefix: it reaches the
    step) and NODE_ONLY_HINT (it does not: the step gets Slurm's own names and the task's).
    The look before exec shows the first, on replica 1 only, by name; the values of the
    resolved env arrived the same in both."""
    workload = build_workload([NAMES], env={"LEARNING_RATE": "0.1"},
                              secrets={"HF_TOKEN": "hf_node-look-secret-1"}, replicas=2, nodes=2)
    outcome, text = launched(launcher, workload)
    assert outcome.state == "succeeded", text
    names = {line.split("] ", 1)[0]: line.split("NAMES=", 1)[1].split()
             for line in text.splitlines() if "NAMES=" in line}
    assert "SLURM_SITE_SCRATCH" in names["[replica 1"] and \
        "SLURM_SITE_SCRATCH" not in names["[replica 0"], names
    assert not any("NODE_ONLY_HINT" in found for found in names.values()), names

    received = received_env(launcher, workload)

    assert received is not None and received["same"] is True, received
    assert received["added"] == [], received  # Slurm's own names, on both: not the task's
    assert [(w["replica"], w["names"]) for w in received["warnings"]] == [
        (1, ["SLURM_SITE_SCRATCH"])], received
    assert "hf_node-look-secret-1" not in json.dumps(received)


SHOW_NODE_VALUES = ["python3", "-c", "import os; print('GOT', os.environ.get('SITE_HINT'), "
                    "os.environ.get('NCCL_SOCKET_IFNAME'), os.environ.get('GLOO_SOCKET_IFNAME'))"]


def test_per_node_defaults_are_resolved_on_each_node_and_recorded(
        launcher: SlurmLauncher) -> None:
    """The platform's defaults with ``when: {node: ...}``, as the policy stage leaves them
    on the revision: the first matching glob per name, on each node; one for
    NCCL_SOCKET_IFNAME wins over the interface the node would choose."""
    per_node = (("SITE_HINT", "first", "*n0"), ("SITE_HINT", "second", "*n1"),
                ("NCCL_SOCKET_IFNAME", "eth-fast", "*n1"), ("SITE_HINT", "never", "*"))
    workload = build_workload([SHOW_NODE_VALUES], replicas=2, nodes=2, per_node=per_node)
    outcome, text = launched(launcher, workload)
    assert outcome.state == "succeeded", text
    got = {line.split("] ", 1)[0]: line.split("GOT ", 1)[1].split()
           for line in text.splitlines() if "GOT " in line}
    assert got["[replica 0"][:2] == ["first", got["[replica 0"][2]], got  # the node's choice
    assert got["[replica 0"][2].startswith("tj"), got
    assert got["[replica 1"][:2] == ["second", "eth-fast"], got
    assert got["[replica 1"][2].startswith("tj"), got  # gloo's: still the node's choice

    received = received_env(launcher, workload)

    assert received is not None and received["same"] is True, received
    assert [(n["replica"], n["values"]) for n in received["per_node"]] == [
        (0, {"SITE_HINT": "first"}),
        (1, {"SITE_HINT": "second", "NCCL_SOCKET_IFNAME": "eth-fast"})], received
    assert all(n["node"].endswith(f"n{n['replica']}") for n in received["per_node"])
    # Per-node values are the platform's, left out of what the runtime "added".
    assert all("SITE_HINT" not in w["names"] for w in received["warnings"]), received
