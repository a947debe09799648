"""Connecting with a password, directly or through Sentinel."""

from __future__ import annotations

import socketserver
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool

from shared.redis_conn import connect, parse_sentinel_url
from tests.support.sentinels import free_ports
from workers.localstack import redis_binary


def test_a_plain_url_carries_its_password() -> None:
    client = connect("redis://:s3cret%2Fpw@10.0.0.5:6380/2")
    kwargs = client.connection_pool.connection_kwargs

    assert (kwargs["password"], kwargs["host"], kwargs["port"], kwargs["db"]) == \
        ("s3cret/pw", "10.0.0.5", 6380, 2)


def test_a_sentinel_url_gives_its_password_to_the_master() -> None:
    client = connect("sentinel://:pw@10.0.0.1:26379;sentinel://:pw@10.0.0.2/3", "main")
    pool = client.connection_pool

    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "main"
    assert (pool.connection_kwargs["password"], pool.connection_kwargs["db"]) == ("pw", 3)
    # The sentinels are asked without it, as Celery's broker does.
    assert all(s.connection_pool.connection_kwargs.get("password") is None
               for s in pool.sentinel_manager.sentinels)


def test_sentinel_hosts_default_their_port_and_the_password_is_decoded() -> None:
    assert parse_sentinel_url("sentinel://:a%40b@s1;sentinel://s2:26380/1") == \
        ([("s1", 26379), ("s2", 26380)], 1, "a@b")


def test_the_sentinels_get_their_own_password_and_one_try_each() -> None:
    client = connect("sentinel://:pw@10.0.0.1:26379;sentinel://:pw@10.0.0.2/3", "main",
                     sentinel_password="sp", timeout=3)
    pool = client.connection_pool
    for s in pool.sentinel_manager.sentinels:
        kwargs = s.connection_pool.connection_kwargs
        assert kwargs["password"] == "sp" and kwargs["socket_timeout"] == 3
        assert s.connection_pool.make_connection().retry.get_retries() == 0
    assert pool.connection_kwargs["password"] == "pw"  # the primary's, apart
    assert pool.connection_kwargs["socket_timeout"] == 3


def test_every_call_is_bounded_and_retried_on_a_new_connection() -> None:
    conn = connect("redis://127.0.0.1:1/0", timeout=0.5).connection_pool.make_connection()
    assert conn.socket_timeout == 0.5 and conn.socket_connect_timeout == 0.5
    assert conn.retry.get_retries() == 3


def test_a_sentinel_still_failing_over_is_not_asked_where_the_primary_is():
    sentinel = Sentinel([("127.0.0.1", 1)])
    up = {"ip": "127.0.0.1", "port": 1, "is_master": True, "is_sdown": False,
          "is_odown": False, "num-other-sentinels": 2}
    assert sentinel.check_master_state({**up, "flags": "master"}, "mymaster")
    # The failover's leader names the old primary, up again and empty, until it ends.
    assert not sentinel.check_master_state({**up, "flags": "master,failover_in_progress"},
                                           "mymaster")
    assert not sentinel.check_master_state({**up, "flags": {"master", "failover_in_progress"}},
                                           "mymaster")


# --- a sentinel whose answer is malformed is passed over, as an unreachable one is ------------

def _resp(value: object) -> bytes:
    """``value`` in RESP2: str a bulk string, int an integer, list an array, None nil."""
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, list):
        return b"*%d\r\n" % len(value) + b"".join(_resp(v) for v in value)
    data = str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


class FakeSentinel(socketserver.ThreadingTCPServer):
    """Answers ``SENTINEL MASTERS`` with ``masters`` (RESP2, as given), refuses
    ``HELLO`` (as Redis before 6 does) and answers +OK to anything else (the client's
    CLIENT SETINFO on connecting)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, masters: object) -> None:
        self.masters = masters
        self.asked = 0
        super().__init__(("127.0.0.1", 0), _SentinelHandler)
        threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"sentinel://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def closed(client: Any) -> None:
    """The client's connections closed, the sentinels' included."""
    for sentinel in client.connection_pool.sentinel_manager.sentinels:
        sentinel.close()
    client.close()


class _SentinelHandler(socketserver.StreamRequestHandler):
    server: FakeSentinel

    def handle(self) -> None:
        while (line := self.rfile.readline()).startswith(b"*"):
            words = []
            for _ in range(int(line[1:])):
                size = int(self.rfile.readline()[1:])
                words.append(self.rfile.read(size + 2)[:-2].decode().upper())
            if words[:2] == ["SENTINEL", "MASTERS"]:
                self.server.asked += 1
                self.wfile.write(_resp(self.server.masters))
            elif words[0] == "HELLO":  # RESP2 only: the client falls back to it
                self.wfile.write(b"-ERR unknown command 'HELLO'\r\n")
            else:
                self.wfile.write(b"+OK\r\n")


def master_state(at: int, **changes: object) -> list[object]:
    """One master as ``SENTINEL MASTERS`` lists it: field, value, field, value..."""
    state: dict[str, object] = {
        "name": "mymaster", "ip": "127.0.0.1", "port": str(at), "runid": "x" * 40,
        "flags": "master", "num-slaves": "0", "num-other-sentinels": "2", "quorum": "2"}
    state.update(changes)
    return [part for key, value in state.items() if value is not ... for part in (key, value)]


@pytest.fixture(scope="module")
def primary() -> Iterator[int]:
    """A real Redis on loopback; its port.  Waited for by its own word that it is ready."""
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server")
    port = free_ports(1, 46700, 46800)[0]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "Ready to accept connections" in line:
                break
        yield port
    finally:
        proc.terminate()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]


MALFORMED: dict[str, Any] = {
    "flags an int": lambda p: [master_state(p, flags=5)],
    "flags a list": lambda p: [master_state(p, flags=["master", "s_down"])],
    "no flags": lambda p: [master_state(p, flags=...)],
    "no address": lambda p: [master_state(p, ip=...)],
    "a port that is no number": lambda p: [master_state(p, port="http")],
    "no other-sentinels count": lambda p: [master_state(p, **{"num-other-sentinels": ...})],
    "an int for the list": lambda p: 7,
    "a string in the list": lambda p: ["mymaster"],
    "an address that is no text": lambda p: [master_state(p, ip=["127.0.0.1"])],
}


@pytest.mark.parametrize("answer", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_sentinel_is_passed_over_for_a_healthy_second(answer: str,
                                                                   primary: int) -> None:
    bad = FakeSentinel(MALFORMED[answer](primary))
    good = FakeSentinel([master_state(primary)])
    try:
        client = connect(f"{bad.url};{good.url}/0", "mymaster", timeout=2)
        try:
            client.set("via", answer)
            assert client.get("via") == answer
        finally:
            closed(client)
        assert bad.asked >= 1 and good.asked >= 1
    finally:
        bad.stop()
        good.stop()


def test_only_malformed_sentinels_is_no_master_found_naming_each() -> None:
    bad = [FakeSentinel([master_state(1, flags=5)]), FakeSentinel(7)]
    try:
        client = connect(";".join(s.url for s in bad) + "/0", "mymaster", timeout=2)
        with pytest.raises(MasterNotFoundError) as found:
            client.ping()
        closed(client)
        assert str(found.value).count("malformed") == 2
    finally:
        for server in bad:
            server.stop()
