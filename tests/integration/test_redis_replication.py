"""``WAIT`` on the connection that wrote, against a real primary and replica.

What makes ``TASKENV_REDIS_MIN_REPLICAS`` mean something: the writes of one request
share one connection (``pinned``), ``WAIT`` is asked there (``acknowledged``), and a
connection made again in between vouches for nothing.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from api import create_app
from shared.access.tokens import PREFIX
from shared.errors import TransientError
from shared.keys import Keys
from shared.redis_conn import acknowledged, connect, pinned
from shared.store.tasks import TaskStore
from shared.task import records, states
from tests.support.sentinels import SentinelGroup, free_ports
from workers import stages

pytestmark = pytest.mark.integration


@pytest.fixture
def group(tmp_path: Path) -> Iterator[SentinelGroup]:
    """A primary, one replica and three sentinels, on ports of 46300-46399."""
    group = SentinelGroup(tmp_path, free_ports(5, 46300, 46400), replicas=1)
    try:
        yield group.start()
    finally:
        group.stop()


def client_id(client) -> int:
    return int(client.client_id())


def test_pinned_calls_share_one_connection_and_wait_sees_their_writes(group: SentinelGroup):
    client = connect(group.sentinel_url, sentinel_password=group.sentinel_password)
    other = threading.Thread(target=lambda: [client.set("elsewhere", n) for n in range(50)])
    with pinned(client):
        ids = {client_id(client) for _ in range(5)}
        other.start()  # another thread's calls take other connections meanwhile
        client.set("mine", "1")
        pipe = client.pipeline()
        pipe.incr("counted").incr("counted")
        pipe.execute()
        ids.add(client_id(client))
        assert acknowledged(client, 1, 2000)
        other.join()
    assert len(ids) == 1
    assert group.client(group.nodes["replica1"]).get("counted") == "2"


def test_a_primary_no_replica_follows_is_left_like_a_demoted_one(group: SentinelGroup):
    """``NOREPLICAS`` (``min-replicas-to-write``) is taken as ``READONLY`` is: the connection
    is dropped and the call tried again through the sentinels, then a ConnectionError the
    stages retry, never a ResponseError that would fail the task.  Nothing was written."""
    client = connect(group.sentinel_url, sentinel_password=group.sentinel_password)
    primary = group.client(group.primary())
    primary.config_set("min-replicas-to-write", 2)  # more than follow it: as if demoted
    try:
        with pytest.raises(redis.ConnectionError, match="no replica that follows it"):
            client.set("refused", "1")
        pipe = client.pipeline()
        pipe.incr("refused-too").incr("refused-too")
        with pytest.raises(redis.ConnectionError):
            pipe.execute()
    finally:
        primary.config_set("min-replicas-to-write", 1)
    assert primary.get("refused") is None and primary.get("refused-too") is None
    assert client.set("taken", "1") and primary.get("taken") == "1"


def test_a_stopped_replica_is_not_acknowledged_within_the_timeout(group: SentinelGroup):
    client = connect(group.sentinel_url, sentinel_password=group.sentinel_password)
    replica = group.nodes["replica1"]
    replica.signal(signal.SIGSTOP)
    try:
        with pinned(client):
            client.set("k", "v")
            started = time.monotonic()
            assert not acknowledged(client, 1, 300)
            assert time.monotonic() - started < 2
    finally:
        replica.signal(signal.SIGCONT)
    with pinned(client):
        client.set("k", "w")
        assert acknowledged(client, 1, 5000)


def test_a_connection_made_again_since_the_write_vouches_for_nothing(group: SentinelGroup):
    client = connect(group.sentinel_url, sentinel_password=group.sentinel_password)
    with pinned(client):
        client.set("k", "v")
        client.connection_pool.pin.conn.disconnect()
        client.set("k2", "v")  # retried on a new connection: Redis sees another client
        assert not acknowledged(client, 1, 1000)


def test_the_api_answers_503_unavailable_then_202_with_the_same_key(group: SentinelGroup):
    token = PREFIX + "a" * 32
    app = create_app({"redis_url": group.sentinel_url,
                      "redis_sentinel_password": group.sentinel_password,
                      "redis_min_replicas": 1, "redis_replica_wait_ms": 300,
                      "admin_token": token, "key_prefix": "repl"},
                     enqueue=lambda task_id, revision: None)
    http = app.test_client()
    auth = {"Authorization": f"Bearer {token}", "Idempotency-Key": "half-made"}
    body = {"name": "t", "steps": [["true"]]}
    replica = group.nodes["replica1"]
    replica.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        refused = http.post("/api/v1/tasks", json=body, headers=auth)
        took = time.monotonic() - started
    finally:
        replica.signal(signal.SIGCONT)
    accepted = http.post("/api/v1/tasks", json=body, headers=auth)
    again = http.post("/api/v1/tasks", json=body, headers=auth)

    assert refused.status_code == 503 and took < 3
    assert refused.json["code"] == "unavailable" and refused.headers["Retry-After"]
    assert group.password not in refused.get_data(as_text=True)
    assert accepted.status_code == 202 and again.status_code == 202
    assert accepted.json["id"] == again.json["id"]  # the half-made task, completed
    assert group.client(replica).exists(Keys("repl").task(accepted.json["id"]))


class NeverLaunched:
    """A launcher that must not be reached."""

    name = "never"

    def launch(self, workload, hooks):  # pragma: no cover - reaching it fails the test
        raise AssertionError("launched before the claim was on a replica")


def test_a_launch_whose_claim_no_replica_holds_runs_nothing_and_is_retried(
        group: SentinelGroup):
    """The guard against a revision number made twice: nothing runs for a revision a
    failover could still lose."""
    tasks = TaskStore(connect(group.sentinel_url, sentinel_password=group.sentinel_password),
                      "guard")
    doc, _ = tasks.create(records.new_task({"name": "t", "steps": [["true"]]}, "alice"))
    assert tasks.move(doc["id"], 1, states.PENDING, states.VALIDATED)
    assert tasks.move(doc["id"], 1, states.VALIDATED, states.RESOLVED)
    replica = group.nodes["replica1"]
    replica.signal(signal.SIGSTOP)
    try:
        with pytest.raises(TransientError, match="not on 1 Redis replica"):
            stages.launch(tasks, NeverLaunched(), doc["id"], 1, min_replicas=1,
                          replica_wait_ms=200)
    finally:
        replica.signal(signal.SIGCONT)
    assert tasks.get(doc["id"])["state"] == states.RESOLVED  # given back, to be retried
    claimed = stages._claim(tasks, doc["id"], 1, min_replicas=1, replica_wait_ms=5000)
    assert claimed is not None and claimed["state"] == states.LAUNCHING
