"""Creation quotas hold under concurrent creations, on a real redis-server: the count and
the refusal are one script, so no creation slips past a limit between them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from shared import states
from shared.errors import QuotaExceeded, TooManyRequests
from shared.quotas import QuotaCounter, Quotas
from shared.store import TaskStore
from workers.localstack import RedisServer

pytestmark = pytest.mark.integration


def attempt(client: redis.Redis, prefix: str, quotas: Quotas) -> str:
    doc = {"name": "t", "owner": "ann", "state": states.PENDING, "revision": 1,
           "steps": [["true"]], "env": [], "created_at": 0.0, "updated_at": 0.0}
    counter = QuotaCounter(client, prefix, quotas)
    try:
        TaskStore(client, prefix).create(doc, budget=counter.budget("ann"))
        return "stored"
    except (QuotaExceeded, TooManyRequests) as refused:
        return refused.problems[0].rule


@pytest.mark.parametrize("quotas, rule", [(Quotas(0, 7, 0), "quota.unfinished_tasks"),
                                          (Quotas(7, 0, 0), "quota.creates_per_minute")])
def test_forty_concurrent_creations_store_exactly_the_quota(
        redis_server: RedisServer, quotas: Quotas, rule: str) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    prefix = f"race-{rule}"
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda _: attempt(client, prefix, quotas), range(40)))
    assert answers.count("stored") == 7
    assert answers.count(rule) == 33
    assert len(TaskStore(client, prefix).all_ids()) == 7
