"""A Redis primary, its replicas and three sentinels: real processes on loopback.

Each node runs Debian's ``redis-server`` (a sentinel with ``--sentinel``) on ports of
the caller's choosing, with its config in a file only its owner can read (passwords
never on a command line).  The tests kill, stop and restart nodes and ask the
sentinels which one is the primary now.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from workers.localstack import redis_binary, write_private

MASTER = "mymaster"


def free_ports(count: int, start: int, stop: int) -> list[int]:
    """``count`` ports in [start, stop) that nothing listens on now."""
    found: list[int] = []
    for port in range(start, stop):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise RuntimeError(f"not {count} free ports in {start}-{stop}")


@dataclass
class Node:
    name: str
    port: int
    directory: Path
    config: str  # the config file's text; a sentinel rewrites its own
    sentinel: bool = False
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "node.conf"
        if not (self.sentinel and conf.exists()):  # a sentinel restarts with what it learnt
            write_private(conf, self.config)
        binary = redis_binary()
        assert binary is not None, "no redis-server"
        args = [binary, str(conf), *(["--sentinel"] if self.sentinel else [])]
        with open(self.directory / "node.log", "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process is killed too
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class SentinelGroup:
    """A primary, ``replicas`` replicas and three sentinels, ports from ``ports``."""

    root: Path
    ports: list[int]
    replicas: int = 2
    down_after_ms: int = 1000
    password: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    sentinel_password: str = field(default_factory=lambda: secrets.token_hex(16),
                                   repr=False)
    nodes: dict[str, Node] = field(default_factory=dict)

    def __post_init__(self) -> None:
        data = self.ports[: 1 + self.replicas]
        watch = self.ports[1 + self.replicas: 4 + self.replicas]
        primary = data[0]
        for k, port in enumerate(data):
            name = "primary" if k == 0 else f"replica{k}"
            self.nodes[name] = Node(name, port, self.root / name,
                                    self._server_conf(port, None if k == 0 else primary))
        for k, port in enumerate(watch):
            name = f"sentinel{k + 1}"
            self.nodes[name] = Node(name, port, self.root / name,
                                    self._sentinel_conf(port, primary), sentinel=True)

    def _server_conf(self, port: int, replica_of: int | None) -> str:
        lines = [f"port {port}", "bind 127.0.0.1", f"dir {self.root}/n{port}",
                 f"requirepass {self.password}", f"masterauth {self.password}",
                 'save ""', "appendonly no", "maxmemory 512mb",
                 "maxmemory-policy noeviction", "repl-diskless-sync yes",
                 "repl-diskless-sync-delay 0",
                 # As README "When Redis goes away" says to: a primary the sentinels
                 # replaced while it lived on refuses writes once no replica follows it.
                 "min-replicas-to-write 1", "min-replicas-max-lag 10"]
        if replica_of is not None:
            lines.append(f"replicaof 127.0.0.1 {replica_of}")
        (self.root / f"n{port}").mkdir(parents=True, exist_ok=True)
        return "\n".join(lines) + "\n"

    def _sentinel_conf(self, port: int, primary: int) -> str:
        return "\n".join([
            f"port {port}", "bind 127.0.0.1", f"dir {self.root}",
            f"requirepass {self.sentinel_password}",
            f"sentinel sentinel-pass {self.sentinel_password}",
            f"sentinel monitor {MASTER} 127.0.0.1 {primary} 2",
            f"sentinel auth-pass {MASTER} {self.password}",
            f"sentinel down-after-milliseconds {MASTER} {self.down_after_ms}",
            f"sentinel failover-timeout {MASTER} 3000",
            f"sentinel parallel-syncs {MASTER} 2",
        ]) + "\n"

    # --- addresses ---------------------------------------------------------------------

    @property
    def sentinel_url(self) -> str:
        """The ``TASKENV_REDIS_URL`` of the group (the primary's password in it)."""
        return ";".join(f"sentinel://:{self.password}@127.0.0.1:{n.port}"
                        for n in self.sentinels) + "/0"

    @property
    def sentinels(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.sentinel]

    @property
    def data_nodes(self) -> list[Node]:
        return [n for n in self.nodes.values() if not n.sentinel]

    def sentinel_client(self, node: Node) -> redis.Redis:
        return redis.Redis(port=node.port, password=self.sentinel_password,
                           socket_timeout=2, decode_responses=True)

    def primary_port(self) -> int | None:
        """The port most sentinels name as the primary's, None if they do not agree."""
        votes: dict[int, int] = {}
        for node in self.sentinels:
            try:
                addr = self.sentinel_client(node).execute_command(
                    "SENTINEL", "get-master-addr-by-name", MASTER)
            except redis.RedisError:
                continue
            if addr:
                votes[int(addr[1])] = votes.get(int(addr[1]), 0) + 1
        best = max(votes.items(), key=lambda kv: kv[1], default=None)
        return best[0] if best and best[1] >= 2 else None

    def primary(self) -> Node:
        port = self.primary_port()
        return next(n for n in self.data_nodes if n.port == port)

    @property
    def url(self) -> str:
        """A direct URL of the current primary (for the tests' own reading)."""
        deadline = time.monotonic() + 60
        while (port := self.primary_port()) is None or not self._is_primary(port):
            assert time.monotonic() < deadline, "no primary for 60 s"
            time.sleep(0.2)
        return f"redis://:{self.password}@127.0.0.1:{port}/0"

    def client(self, node: Node) -> redis.Redis:
        return redis.Redis(port=node.port, password=self.password, socket_timeout=2,
                           decode_responses=True)

    def _is_primary(self, port: int) -> bool:
        try:
            return self.client(next(n for n in self.data_nodes if n.port == port)) \
                .info("replication")["role"] == "master"
        except (redis.RedisError, StopIteration):
            return False

    # --- life --------------------------------------------------------------------------

    def start(self) -> SentinelGroup:
        for node in self.data_nodes:
            node.start()
        self.wait_replicated(self.nodes["primary"], self.replicas)
        for node in self.sentinels:
            node.start()
        deadline = time.monotonic() + 30
        while not self._sentinels_agree():
            assert time.monotonic() < deadline, "the sentinels did not find each other"
            time.sleep(0.2)
        return self

    def _sentinels_agree(self) -> bool:
        """Every sentinel knows the other two and the primary (a failover needs two)."""
        try:
            return self.primary_port() is not None and all(
                len(self.sentinel_client(n).sentinel_sentinels(MASTER))
                >= len(self.sentinels) - 1 for n in self.sentinels)
        except redis.RedisError:
            return False

    def wait_replicated(self, primary: Node, replicas: int, timeout: float = 30) -> None:
        """Until ``primary`` answers as a primary with ``replicas`` replicas online."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                info = self.client(primary).info("replication")
                online = sum(1 for k, v in info.items()
                             if k.startswith("slave") and isinstance(v, dict)
                             and v.get("state") == "online")
                if info["role"] == "master" and online >= replicas:
                    return
            except redis.RedisError:
                pass
            assert time.monotonic() < deadline, f"{primary.name} not replicated"
            time.sleep(0.1)

    def wait_new_primary(self, old: Node, timeout: float = 60) -> Node:
        """The node the sentinels promoted in place of ``old``, once it serves writes."""
        deadline = time.monotonic() + timeout
        while True:
            port = self.primary_port()
            if port is not None and port != old.port and self._is_primary(port):
                return next(n for n in self.data_nodes if n.port == port)
            assert time.monotonic() < deadline, f"no failover from {old.name}"
            time.sleep(0.1)

    def wait_role(self, node: Node, role: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                info = self.client(node).info("replication")
                if info["role"] == role and (role != "slave"
                                             or info.get("master_link_status") == "up"):
                    return
            except redis.RedisError:
                pass
            assert time.monotonic() < deadline, f"{node.name} is not a {role}"
            time.sleep(0.2)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


def pids_alive(group: SentinelGroup) -> list[int]:
    """The group's processes still running (none after stop)."""
    return [n.proc.pid for n in group.nodes.values()
            if n.proc is not None and n.proc.poll() is None and os.path.exists(
                f"/proc/{n.proc.pid}")]
