"""Liveness stays up without Redis; readiness names everything missing, in the one shape."""

from __future__ import annotations

import time
from collections import Counter

import fakeredis
from flask import Flask

from tests.api.conftest import EnqueueSpy, build_app
from workers.liveness import publish_alive, withdraw
from workers.queues import QUEUES
from workers.reconcile import _passed


def all_ready(app: Flask) -> None:
    services = app.extensions["taskenv"]
    publish_alive(services, "w1@host", list(QUEUES))
    _passed(services, Counter())


def test_healthz_answers_without_redis(enqueued: EnqueueSpy) -> None:
    server = fakeredis.FakeServer()
    app = build_app(fakeredis.FakeRedis(server=server, decode_responses=True), enqueued)
    server.connected = False
    resp = app.test_client().get("/healthz")
    assert resp.status_code == 200
    assert resp.get_json() == {"status": "ok"}


def test_readyz_without_redis_says_so(enqueued: EnqueueSpy) -> None:
    server = fakeredis.FakeServer()
    app = build_app(fakeredis.FakeRedis(server=server, decode_responses=True), enqueued)
    server.connected = False
    resp = app.test_client().get("/readyz")
    assert resp.status_code == 503
    assert resp.get_json()["errors"] == [
        {"rule": "redis", "field": "redis", "message": "Redis does not answer"}]


def test_readyz_names_every_queue_without_a_consumer_and_the_reconciler(
        app: Flask) -> None:
    resp = app.test_client().get("/readyz")  # no token: probes carry none
    assert resp.status_code == 503
    body = resp.get_json()
    assert body["code"] == "not_ready"
    assert {e["field"] for e in body["errors"]} == {
        "queues.validate", "queues.policy", "queues.launch", "reconciler"}
    assert "no live worker consumes the policy queue" in body["message"]


def test_readyz_is_ok_when_each_queue_has_a_consumer_and_the_reconciler_ran(
        app: Flask) -> None:
    all_ready(app)
    resp = app.test_client().get("/readyz")
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json() == {"status": "ok", "queues": list(QUEUES)}


def test_a_withdrawn_consumer_makes_its_queue_not_ready(app: Flask) -> None:
    all_ready(app)
    withdraw(app.extensions["taskenv"], "w1@host", ["policy"])
    resp = app.test_client().get("/readyz")
    assert resp.status_code == 503
    assert [e["field"] for e in resp.get_json()["errors"]] == ["queues.policy"]


def test_a_consumer_whose_liveness_expired_counts_for_nothing(app: Flask) -> None:
    all_ready(app)
    services = app.extensions["taskenv"]
    services.redis.zadd(services.keys.consumers("launch"), {"w1@host": time.time() - 1})
    resp = app.test_client().get("/readyz")
    assert resp.status_code == 503
    assert [e["field"] for e in resp.get_json()["errors"]] == ["queues.launch"]
