"""The two-node test cluster (tests/support/slurm.py, ``nodes=2``): the ground the Slurm
launcher's tasks across nodes will stand on.

Each node's slurmd runs in a network namespace of its own, with its own address on the
cluster's bridge: a job of two tasks on two nodes runs one task on each, and each task
sees its node's address and not the other's.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.slurm import SlurmCluster

pytestmark = pytest.mark.slurm

# Each task prints its node's name and the IPv4 addresses of its network namespace.
SHOW = ("import os, socket, fcntl, struct, array\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "buf = array.array('B', bytes(40 * 32))\n"
        "size = struct.unpack('iL', fcntl.ioctl(s, 0x8912, struct.pack('iL', len(buf), "
        "buf.buffer_info()[0])))[0]\n"
        "raw = buf.tobytes()[:size]\n"
        "found = [socket.inet_ntoa(raw[i + 20:i + 24]) for i in range(0, size, 40)]\n"
        "print(os.environ['SLURMD_NODENAME'], ' '.join(sorted(found)))\n")


def test_a_job_on_two_nodes_runs_a_task_on_each_at_its_own_address(
        slurm_nodes: SlurmCluster, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    batch = tmp_path / "job.sh"
    batch.write_text(f"#!/bin/sh\nexec srun -N2 -n2 /usr/bin/python3 -I {script}\n")
    batch.chmod(0o755)
    out = tmp_path / "out.txt"
    slurm_nodes.run("sbatch", "--parsable", "-N2", "-n2", f"--output={out}",
                  f"--chdir={tmp_path}", str(batch))
    deadline = time.monotonic() + 60
    while len(out.read_text().splitlines() if out.exists() else []) < 2:
        assert time.monotonic() < deadline, slurm_nodes.logs()
        time.sleep(0.3)
    seen = dict(line.split(" ", 1) for line in out.read_text().splitlines())
    assert sorted(seen) == sorted(slurm_nodes.names)
    for name, addresses in seen.items():
        mine = slurm_nodes.address(name)
        others = [slurm_nodes.address(n) for n in slurm_nodes.names if n != name]
        assert mine in addresses.split(), (name, addresses)
        assert not any(other in addresses.split() for other in others), (name, addresses)


def test_stopping_the_cluster_removes_its_namespaces_and_bridge(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    import subprocess

    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm-gone"), nodes=2).start()
    assert cluster.network is not None
    bridge = cluster.network.bridge
    cluster.stop()
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                           check=True).stdout
    assert not any(name in namespaces for name in cluster.names), namespaces
    assert bridge not in links
