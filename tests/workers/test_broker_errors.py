"""The broker failing (Redis away or failing over) is a Redis error: the API answers it
503 unavailable, a stage retries it; neither a 500 nor a task marked failed."""

from __future__ import annotations

import fakeredis
import pytest
import redis
from kombu.exceptions import OperationalError

from api import create_app
from shared.access.tokens import PREFIX
from shared.config import Settings
from workers import celery_app
from workers.services import stage_sender
from workers.tasks import TRANSIENT, StageTask


def refuse(*_args: object) -> None:
    raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def test_a_send_the_broker_refuses_is_a_redis_connection_error(monkeypatch) -> None:
    monkeypatch.setattr(celery_app, "send_to_stage", refuse)
    with pytest.raises(redis.ConnectionError, match="broker is unreachable"):
        stage_sender(Settings())("validate", "t1", 1)


def test_a_creation_whose_message_cannot_be_sent_is_503_with_retry_after() -> None:
    def enqueue(task_id: str, revision: int) -> None:
        raise redis.ConnectionError("the broker is unreachable")

    token = PREFIX + "b" * 32
    app = create_app({"admin_token": token}, redis_client=fakeredis.FakeRedis(), enqueue=enqueue)
    resp = app.test_client().post("/api/v1/tasks", json={"name": "t", "steps": [["true"]]},
                                  headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 503
    assert resp.json["code"] == "unavailable" and resp.headers["Retry-After"] == "1"


def test_a_stage_retries_a_message_it_could_not_send() -> None:
    assert OperationalError in TRANSIENT
    assert set(TRANSIENT) <= set(StageTask.autoretry_for)
