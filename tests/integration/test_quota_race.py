"""Creation quotas hold under concurrent creations, on a real redis-server: the count and
the refusal are one script, so no creation slips past a limit between them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from api import actions
from shared.access.quotas import QuotaCounter, Quotas
from shared.config import Settings
from shared.errors import QuotaExceeded, TooManyRequests
from shared.store.tasks import TaskStore
from shared.task import states
from workers.localstack import RedisServer
from workers.services import build_services

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


def test_concurrent_changes_of_one_task_make_no_more_revisions_than_its_quota(
        redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    settings = Settings.from_env({}, redis_url=redis_server.url, key_prefix="race-revisions",
                                 quota_revisions_per_task=5)
    svc = build_services(settings, client, enqueue=lambda task_id, revision: None)
    task_id = actions.create_task(svc, {"name": "t", "steps": [["true"]], "env": []},
                                  "ann")["id"]

    def change(n: int) -> str:
        try:
            actions.revise_task(svc, task_id, "ann", "ann",
                                [{"name": "LR", "value": str(n)}], [], "task.patch")
            return "made"
        except QuotaExceeded as refused:
            return refused.problems[0].rule

    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(change, range(30)))
    assert answers.count("made") == 4  # revisions 2 to 5
    assert answers.count("quota.revisions_per_task") == 26
    assert svc.tasks.get(task_id)["revision"] == 5
