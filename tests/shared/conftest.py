"""What the domain's unit tests share: one in-process Redis per test."""

from __future__ import annotations

import fakeredis
import pytest


@pytest.fixture
def redis_client() -> fakeredis.FakeRedis:
    """A fresh fakeredis for unit tests (integration tests use a real redis-server)."""
    return fakeredis.FakeRedis(decode_responses=True)
