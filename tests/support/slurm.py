"""A private one-node Slurm cluster for the tests: munged, slurmctld and slurmd.

Everything lives in one temporary directory: its own munge key and socket (so a
munged the machine already runs is neither needed nor disturbed), the controller's
state, the node's spool, the logs, and a ``slurm.conf`` whose ports are free ones.
The daemons run in the foreground as children of the test process, so stopping
the cluster stops exactly them.  ``SLURM_CONF`` in :attr:`SlurmCluster.env` points
every client command (``sbatch``, ``squeue``, ``scancel``) at it.

With ``nodes=2`` (or more) the cluster has several nodes on this one machine, each a
host of its own as far as the network goes: a network namespace per node with its own
address, joined by veth pairs to a bridge on the test's side, where the controller
listens at the bridge's address.  Each ``slurmd`` is started inside its node's namespace
with ``nsenter --net`` (``ip netns exec`` would remount ``/sys``, where slurmd then finds
no cgroup filesystem); the nodes share this machine's filesystem, as a cluster shares
its home and scratch.  Stopping the cluster removes the namespaces, the veths and the
bridge.

The node is declared with more CPUs than the machine has (``config_overrides``):
a test run submits several jobs at once, and a 4-replica job must fit on this
2-core machine; the tasks are tiny.  Its name is the cluster's own (``slurmd -N``),
so two clusters on one machine never share a cgroup.

Memory: where the machine has a writable cgroup v1 memory controller (as these
machines do), ``task/cgroup`` + ``proctrack/cgroup`` give each job a kernel-enforced
limit (``ConstrainRAMSpace``) and every process of a job is found and killed through
its cgroup; elsewhere (cgroup v2 alone: Slurm 22.05's cgroup/v2 wants systemd to
delegate it a scope), ``task/none`` with ``jobacct_gather/linux``'s
``OverMemoryKill`` kills a step over its memory by polling, once a second.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from workers.localstack import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
NODE_CPUS = 8
NODE_MEMORY_MB = 4000


def slurm_available() -> bool:
    return all(shutil.which(name) for name in (*DAEMONS, "sbatch", "squeue")) and os.geteuid() == 0


def cgroup_v1_memory() -> bool:
    """A writable cgroup v1 memory controller, as task/cgroup's cgroup/v1 plugin needs."""
    memory = Path("/sys/fs/cgroup/memory")
    return (memory / "memory.limit_in_bytes").exists() and os.access(memory, os.W_OK)


def containment(cgroups: bool) -> list[str]:
    if cgroups:
        return ["ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup",
                "JobAcctGatherType=jobacct_gather/cgroup"]
    return ["ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/linux", "JobAcctGatherParams=OverMemoryKill"]


CGROUP_CONF = "CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\nConstrainSwapSpace=yes\n"


def slurm_conf(root: Path, host: str, node: str, ctld_port: int, slurmd_port: int,
               cgroups: bool, min_job_age: int = 60,
               nodes: dict[str, str] | None = None, ctld_addr: str | None = None,
               task_prolog: Path | None = None) -> str:
    """The cluster's ``slurm.conf``: one node ``node`` on loopback, or ``nodes`` (name ->
    address, each in its own network namespace) with the controller at ``ctld_addr``."""
    placed = nodes or {node: "127.0.0.1"}
    spool, pid, log = ("spool", "slurmd.pid", "slurmd.log") if nodes is None else \
        ("spool-%n", "slurmd-%n.pid", "slurmd-%n.log")
    return "\n".join([
        "ClusterName=taskenvtest",
        f"SlurmctldHost={host}" + (f"({ctld_addr})" if ctld_addr else ""),
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / spool}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / pid}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / log}",
        *containment(cgroups),
        "JobAcctGatherFrequency=task=1",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        "SlurmdParameters=config_overrides",
        "DefMemPerCPU=400",  # the batch script and srun alone take ~60 MB
        "ReturnToService=2",
        f"MinJobAge={min_job_age}",
        "KillWait=2",
        "MpiDefault=none",
        "MpiParams=ports=12000-12999",  # srun --resv-ports: a MASTER_PORT per step
        *([f"TaskProlog={task_prolog}"] if task_prolog else []),
        *(f"NodeName={name} NodeHostname={host} NodeAddr={addr} CPUs={NODE_CPUS} "
          f"RealMemory={NODE_MEMORY_MB} State=UNKNOWN" for name, addr in placed.items()),
        f"PartitionName=debug Nodes={','.join(placed)} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


class NodeNetwork:
    """The nodes' network: a bridge at ``<subnet>.1`` and one namespace per node, named
    after it, at ``<subnet>.2``, ``.3``... (a /24 of 10.0.0.0/8 picked at random, so two
    clusters on one machine do not meet)."""

    def __init__(self, prefix: str, names: list[str]) -> None:
        self.bridge = f"{prefix}br"
        self.subnet = f"10.{secrets.choice(range(200, 250))}.{secrets.randbelow(256)}"
        self.gateway = f"{self.subnet}.1"
        self.addresses = {name: f"{self.subnet}.{k + 2}" for k, name in enumerate(names)}

    def create(self) -> None:
        """The bridge and every node's namespace; none of them left if one step fails."""
        try:
            self._create()
        except BaseException:
            self.remove()
            raise

    def _create(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for k, (name, addr) in enumerate(self.addresses.items()):
            _ip("netns", "add", name)
            outer = f"{self.bridge[:-2]}v{k}"
            _ip("link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", name)
            _ip("link", "set", outer, "master", self.bridge, "up")
            _ip("-n", name, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "route", "add", "default", "via", self.gateway)

    def enter(self, name: str) -> list[str]:
        """The argv prefix that runs a command in node ``name``'s network."""
        return ["nsenter", f"--net=/var/run/netns/{name}", "--"]

    def remove(self) -> None:
        for name in self.addresses:
            _ip("netns", "del", name, check=False)  # its veth end goes with it
        _ip("link", "del", self.bridge, check=False)


def _ip(*argv: str, check: bool = True) -> None:
    subprocess.run(["ip", *argv], check=check, capture_output=True, timeout=30)


class SlurmCluster:
    def __init__(self, root: Path, nodes: int = 1, last_node_adds: dict[str, str] | None = None
                 ) -> None:
        self.root = root
        # What the last node's environment adds to every task it runs (a TaskProlog's
        # ``export`` lines, as a site's prolog would), where the others add nothing.
        self.last_node_adds = dict(last_node_adds or {})
        self.host = socket.gethostname().split(".")[0]
        self.node = f"te{secrets.token_hex(4)}"
        self.names = [self.node] if nodes == 1 else [f"{self.node}n{k}" for k in range(nodes)]
        self.network = NodeNetwork(self.node, self.names) if nodes > 1 else None
        self.cgroups = cgroup_v1_memory()
        self.conf = root / "slurm.conf"
        self.env = {"SLURM_CONF": str(self.conf), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> SlurmCluster:
        """The cluster, up; if it cannot come up, nothing of it is left running (its
        daemons, namespaces and bridge: the caller gets no cluster to stop)."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> SlurmCluster:
        for sub in ("munge", "state", "spool", "log"):
            (self.root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o711)  # the socket must be reachable; the key is 0600
        key = self.root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(128))
        key.chmod(0o600)
        net = self.network
        if net is not None:
            net.create()
        prolog = self._task_prolog()
        self.conf.write_text(slurm_conf(
            self.root, self.host, self.node, free_port(), free_port(), self.cgroups,
            nodes=net.addresses if net else None, ctld_addr=net.gateway if net else None,
            task_prolog=prolog))
        if self.cgroups:
            (self.root / "cgroup.conf").write_text(CGROUP_CONF)
        munge = self.root / "munge"
        self._spawn("munged", ["munged", "--foreground", "--force",
                               f"--socket={munge / 'munge.socket'}", f"--key-file={key}",
                               f"--log-file={munge / 'munged.log'}",
                               f"--pid-file={munge / 'munged.pid'}",
                               f"--seed-file={munge / 'munged.seed'}"])
        self._wait(lambda: (munge / "munge.socket").exists(), "munged's socket")
        self.start_controller(clear=True)
        for name in self.names:
            enter = net.enter(name) if net else []
            self._spawn(self._slurmd(name), [*enter, "slurmd", "-D", "-N", name])
        self.wait_idle()
        return self

    def _task_prolog(self) -> Path | None:
        if not self.last_node_adds:
            return None
        lines = "".join(f"    echo 'export {name}={value}'\n"
                        for name, value in self.last_node_adds.items())
        script = self.root / "task-prolog.sh"
        script.write_text(f'#!/bin/sh\nif [ "$SLURMD_NODENAME" = "{self.names[-1]}" ]; then\n'
                          f"{lines}fi\n")
        script.chmod(0o755)
        return script

    def _slurmd(self, name: str) -> str:
        return "slurmd" if self.network is None else f"slurmd-{name}"

    def address(self, name: str) -> str:
        """Node ``name``'s address on the cluster's network."""
        return self.network.addresses[name] if self.network else "127.0.0.1"

    def start_controller(self, clear: bool = False) -> None:
        self._spawn("slurmctld", ["slurmctld", "-D", *(["-c", "-i"] if clear else [])])

    def stop_controller(self) -> None:
        self._stop("slurmctld")

    def stop(self) -> None:
        """Cancel every job, then stop the daemons; no job step outlives the cluster."""
        if "slurmctld" in self.procs:
            self.run("scancel", "--me", check=False)
            deadline = time.monotonic() + 20
            while self.run("squeue", "--me", "--noheader", check=False).stdout.strip() \
                    and time.monotonic() < deadline:
                time.sleep(0.3)
        for name in (*map(self._slurmd, self.names), "slurmctld", "munged"):
            self._stop(name)
        for pid in self.step_daemons():  # slurmd's children detach: end those it left
            os.kill(pid, signal.SIGKILL)
        for name in self.names:
            for top in Path("/sys/fs/cgroup").glob(f"*/slurm_{name}"):
                for directory in sorted(top.rglob("*/"), key=lambda p: -len(p.parts)):
                    if directory.is_dir():
                        _rmdir(directory)
                _rmdir(top)
        if self.network is not None:
            self.network.remove()

    def step_daemons(self) -> list[int]:
        """The slurmstepd processes of this cluster (their environment names its conf)."""
        mine = f"SLURM_CONF={self.conf}".encode()
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if (proc / "comm").read_text().strip() == "slurmstepd" and \
                        mine in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                continue
        return found

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=check,
                              timeout=30)

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until every node takes jobs (``sinfo`` shows each idle, mixed or allocated)."""
        def ready() -> bool:
            lines = self.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.split()
            return len(lines) == len(self.names) and all(
                line.startswith(("idle", "mixed", "allocated")) for line in lines)
        self._wait(ready, "the node to be idle", timeout)

    def jobs(self) -> list[dict[str, object]]:
        """Every job the controller still knows, as ``squeue --json`` gives it."""
        found: list[dict[str, object]] = json.loads(
            self.run("squeue", "--json", "--states=all").stdout)["jobs"]
        return found

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:]
                         for p in sorted((self.root / "log").glob("*.log")))

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 - the child keeps it
        with out:
            self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=out,
                                                stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL)

    def _stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _wait(self, done: object, what: str, timeout: float = 30.0) -> None:
        assert callable(done)
        deadline = time.monotonic() + timeout
        while not done():
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")
            time.sleep(0.2)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()  # a cgroup directory goes once empty; its files are the kernel's
    except OSError:
        pass
