"""Redis as operators run it: behind Sentinel, and checked for eviction at startup."""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from shared.access.tokens import PREFIX
from shared.redis_conn import connect, warn_if_evicting
from tests.integration.conftest import Stack
from workers.localstack import (
    RedisServer,
    free_port,
    redis_binary,
    start_api,
    start_reconciler,
    start_worker,
    stop_all,
    wait_http,
)
from workers.queues import QUEUES

pytestmark = pytest.mark.integration


@pytest.fixture
def sentinel_url(redis_server: RedisServer, tmp_path: Path) -> Iterator[str]:
    """A real Sentinel watching the session's redis-server as master ``mymaster``."""
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                    f"sentinel monitor mymaster 127.0.0.1 {redis_server.port} 1\n"
                    f"sentinel auth-pass mymaster {redis_server.password}\n"
                    "sentinel down-after-milliseconds mymaster 5000\n")
    binary = redis_binary()
    assert binary is not None
    proc = subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        probe = redis.Redis(port=port)
        while True:
            try:
                if probe.execute_command("SENTINEL", "get-master-addr-by-name", "mymaster"):
                    break
            except redis.ConnectionError:
                pass
            assert time.monotonic() < deadline, "sentinel did not come up"
            time.sleep(0.1)
        yield f"sentinel://:{redis_server.password}@127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_sentinel_url_reaches_the_master(sentinel_url: str, redis_server: RedisServer):
    client = connect(sentinel_url, "mymaster")
    key = f"probe:{uuid.uuid4().hex}"
    client.set(key, "through sentinel")

    assert redis.Redis.from_url(redis_server.url).get(key) == b"through sentinel"


def test_the_pipeline_runs_with_redis_behind_sentinel(sentinel_url: str, tmp_path: Path):
    port = free_port()
    env = {"TASKENV_REDIS_URL": sentinel_url, "TASKENV_REDIS_MASTER_NAME": "mymaster",
           "TASKENV_KEY_PREFIX": f"s{uuid.uuid4().hex[:8]}", "TASKENV_PORT": str(port),
           "TASKENV_WORK_DIR": str(tmp_path / "tasks"),
           "TASKENV_ADMIN_TOKEN": PREFIX + uuid.uuid4().hex}
    logs = tmp_path / "processes.log"
    procs = [start_worker(q, env, logfile=logs) for q in QUEUES]
    procs += [start_reconciler(env, logfile=logs), start_api(env, logfile=logs)]
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        stack = Stack(f"http://127.0.0.1:{port}", connect(sentinel_url), env, tmp_path, logs)
        created = stack.create({"name": "via-sentinel", "steps": [["true"]]})
        assert stack.wait(created["id"])["status"] == "succeeded"
    finally:
        stop_all(procs)


def test_an_evicting_redis_is_reported_at_startup(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture):
    server = RedisServer(tmp_path).start()
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        assert warn_if_evicting(client) == "noeviction"
        assert not caplog.records

        client.config_set("maxmemory-policy", "allkeys-lru")
        with caplog.at_level(logging.WARNING):
            assert warn_if_evicting(client) == "allkeys-lru"
    finally:
        server.stop()

    [record] = caplog.records
    assert "allkeys-lru" in record.getMessage() and "noeviction" in record.getMessage()
