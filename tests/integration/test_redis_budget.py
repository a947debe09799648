"""What one task costs Redis, counted exactly: a change that adds commands to every task
fails here, not only in a benchmark nobody ran.

On a real redis-server that nothing else talks to, the API's ``POST /api/v1/tasks``
(Flask's test client, enqueue stubbed) and each stage function (``workers.stages``, the
dryrun launcher) run one task from ``POST`` to ``succeeded``; ``INFO commandstats`` counts
the commands each part sent, and a count of the packets redis-py sent counts the round
trips of each part.  Each part has its own store, as each stage runs in its own
worker process, and the task is the benchmark's (bench/inputs.py: ten user variables,
twenty defaults, twenty protected, no files, one replica).  Counts are exact, so this
is not a timed test: the budgets below are today's counts; lower them when a change
saves commands, and raise one only with the reason written beside it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.connection import Connection

from bench.inputs import policy_body, task_body
from shared.access.tokens import PREFIX as TOKEN_PREFIX
from shared.doctor.store import CatalogStore
from shared.env.envlist import Limits
from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from workers import stages
from workers.launchers.dryrun.launcher import DryRunLauncher
from workers.localstack import RedisServer

pytestmark = pytest.mark.integration

PREFIX = "budget"
# Commands per task, by part (Celery's own transport is not ours and not counted): 91 in
# all, down from 125 on 2026-12-01, when 35 were HSTRLEN (the byte metering of each
# written field).  The scripts now take the old sizes from what was read: a state move
# from the values its HMGET reads anyway, a stage's write from the sizes its caller read
# at the ``v`` the script checks (docs/performance.md).
# The policy stage is counted as its worker runs it since 2026-12-03: with the doctor's
# catalog (an HGET and an HGETALL a task, 2 more) and the policy version read once per
# process (the GET a store made per task was the test's own, 1 fewer): 15 -> 16.
# Since 2026-12-07 a task's state lives in one by-state index per scope (every task's, the
# owner's; shared.state_scores): a state change is a ZADD to each (was a ZREM and a ZADD to
# each of two pairs, 2 fewer per change: validate, policy and the launch's three), and the
# owner's unfinished tasks are one ZCOUNT (was six ZCARDs, 5 fewer): 91 -> 76.
# Since 2026-12-07 logs count in their owner's stored bytes: the launch's line of output
# reads the task's owner and limit and the owner's count and adds to both (HMGET, GET,
# HINCRBY, INCRBY: 4 more, in the append's one script), and the revision that ends has its
# log written anew at its own size (GET, SET: 2 more, in the move's script): 76 -> 82.
BUDGET = {"POST /api/v1/tasks": 20, "validate": 11, "policy": 14, "launch": 37}
# Round trips, by part: what a worker pays for in its own CPU (each is a request packed,
# sent and its answer parsed by redis-py), where a command inside a script costs Redis
# alone.  POST: the token, the owner's projects, the creation script, and the policy
# chain with the doctor's catalog (one pipeline since 2026-12-03: it was two); the
# enqueue is stubbed.  validate: the record's read and its compare-and-set.  policy: the
# record, the chain with the catalog (one pipeline), the compare-and-set.  launch: the
# claim (the record comes back with it), the dryrun's line of output, running, the
# outcome.  Counted per stage since 2026-12-07.
ROUND_TRIPS = {"POST /api/v1/tasks": 4, "validate": 2, "policy": 3, "launch": 4}


class Counted:
    """``INFO commandstats`` since the last reset, by command."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    def reset(self) -> None:
        self.r.config_resetstat()

    def calls(self) -> Counter[str]:
        stats = self.r.info("commandstats")
        calls = Counter({key.removeprefix("cmdstat_"): int(value["calls"])
                         for key, value in stats.items()})
        for own in ("info", "config|resetstat"):
            calls.pop(own, None)
        return calls


@pytest.fixture
def quiet_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server of its own: nothing but this test talks to it."""
    server = RedisServer(tmp_path_factory.mktemp("budget-redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Packets sent to Redis: one per command, one per pipeline."""
    sent: Counter[str] = Counter()
    send = Connection.send_packed_command

    def counting(self: Connection, command: Any, check_health: bool = True) -> None:
        sent["packets"] += 1
        send(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", counting)
    return sent


def api(server: RedisServer, client: redis.Redis, token: str) -> Any:
    from api import create_app

    return create_app({"redis_url": server.url, "key_prefix": PREFIX, "admin_token": token},
                      redis_client=client, enqueue=lambda task_id, revision: None)


def test_one_task_costs_redis_what_its_budget_says(quiet_redis: RedisServer,
                                                   round_trips: Counter[str]) -> None:
    server, r = quiet_redis, redis.Redis.from_url(quiet_redis.url)
    token = TOKEN_PREFIX + uuid.uuid4().hex
    client = api(server, r, token).test_client()
    PolicyStore(r, PREFIX).put(Policy.from_dict(policy_body()))
    headers = {"Authorization": f"Bearer {token}"}
    # Each stage is a long-lived process of its own: its store (scripts loaded, caches)
    # is warmed by one task before the counted one, as a worker's is by the tasks before.
    # The policy worker's stores live as long as it does (policy versions read once per
    # process), and its doctor reads the catalog's layers for each task.
    policies, catalogs = PolicyStore(r, PREFIX), CatalogStore(r, PREFIX)
    parts = {
        "validate": (TaskStore(r, PREFIX), lambda s, t: stages.validate(s, Limits(), t, 1)),
        "policy": (TaskStore(r, PREFIX), lambda s, t: stages.apply_policy(
            s, policies, t, 1, catalogs=catalogs)),
        "launch": (TaskStore(r, PREFIX), lambda s, t: stages.launch(
            s, DryRunLauncher(), t, 1, 5)),
    }
    counted, spent, trips = Counted(r), {}, {}
    for counting in (False, True):
        counted.reset()
        round_trips.clear()
        answer = client.post("/api/v1/tasks", json=task_body(), headers=headers)
        trips["POST /api/v1/tasks"] = round_trips["packets"]  # before INFO, itself a packet
        spent["POST /api/v1/tasks"] = counted.calls()
        assert answer.status_code == 202, answer.get_json()
        task_id = answer.get_json()["id"]
        for part, (store, run) in parts.items():
            counted.reset()
            round_trips.clear()
            run(store, task_id)
            trips[part] = round_trips["packets"]
            spent[part] = counted.calls()
        assert TaskStore(r, PREFIX).get(task_id)["state"] == "succeeded"

    report = {part: (sum(calls.values()), dict(calls.most_common())) for part, calls in
              spent.items()}
    print("\n" + "\n".join(f"{part}: {total} {calls}" for part, (total, calls) in
                           report.items()) + f"\nround trips: {trips}")
    assert {part: total for part, (total, _) in report.items()} == BUDGET, report
    assert trips == ROUND_TRIPS
