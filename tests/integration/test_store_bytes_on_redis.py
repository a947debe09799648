"""The stored-bytes counter and the value pool on a real redis-server: its Lua, its
HSTRLEN, its memory.  The same mixes as the unit test's, and the review's attack."""

from __future__ import annotations

import random
import uuid

import pytest
import redis

from tests.shared.store.test_store_bytes import (
    BIG,
    agree,
    big_env,
    create,
    noise,
    patch,
    resolve,
    run_mix,
    store,
)
from workers.localstack import RedisServer

pytestmark = pytest.mark.integration
OPS = ["create", "patch", "resolve", "finish", "expire", "secret"]


@pytest.fixture
def client(redis_server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(redis_server.url)


@pytest.mark.parametrize("seed", range(6))
def test_the_counter_equals_a_recount_on_a_real_redis(client: redis.Redis, seed: int) -> None:
    rng = random.Random(seed)
    ops = [(rng.choice(OPS), rng.randint(0, 5), rng.randint(1, 700)) for _ in range(40)]
    run_mix(store(client, retention=1e-6, prefix=f"b{uuid.uuid4().hex[:8]}"), ops)


def test_a_revision_of_one_changed_value_adds_about_that_value_to_redis(
        client: redis.Redis) -> None:
    tasks = store(client, prefix=f"b{uuid.uuid4().hex[:8]}")
    task_id = create(tasks, big_env(tag="0123456789abcdef"))
    resolve(tasks, task_id)
    first = agree(tasks)
    tasks.move(task_id, 1, "resolved", "cancelled")
    patch(tasks, task_id, "V3", noise(BIG, "changed"))
    assert 0.6 * BIG < agree(tasks) - first < BIG + 8 * 1024  # not the 8 values again
