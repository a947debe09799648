"""What is ours: taskenv's own code per task, in-process, without Celery or HTTP.

The end-to-end numbers mix three things: Celery (the same in the baseline),
HTTP (the same in the no-op endpoint) and taskenv's code.  This measures the
last alone, against the benchmark's real redis-server: CPU time per call of
each stage function (``workers.stages``, dryrun launcher), of the API's
``POST /api/v1/tasks`` view through Flask's test client (enqueue stubbed), of
the no-op endpoint through the same test client, of one Celery ``send_task``
and of one Redis round trip.  Best of three rounds; CPU time of this process
(user + system, so Redis round trips count their system calls).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from shared.access.tokens import PREFIX as TOKEN_PREFIX
from shared.config import Settings
from shared.doctor.store import CatalogStore
from shared.env.envlist import Limits
from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from shared.redis_conn import connect
from shared.store.tasks import TaskStore
from shared.task import records

PREFIX = "stagecost"


def _cpu_per_call(fn: Callable[[int], Any], n: int) -> float:
    started = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - started) / n


def _cpu_per_id(fn: Callable[[str], Any], ids: list[str]) -> float:
    started = time.process_time()
    for task_id in ids:
        fn(task_id)
    return (time.process_time() - started) / len(ids)


def stage_costs(redis_url: str, body: dict[str, Any], policy: dict[str, Any],
                n: int = 300, rounds: int = 3) -> dict[str, Any]:
    from bench import noop_api
    from workers import stages
    from workers.celery_app import make_celery
    from workers.launchers.dryrun.launcher import DryRunLauncher

    client = connect(redis_url)
    # One store per stage, as each stage runs in its own worker process: nothing one
    # stage's store remembers may help the next.
    tasks, validated, resolved, launched = (TaskStore(client, PREFIX) for _ in range(4))
    policies = PolicyStore(client, PREFIX)
    policies.put(Policy.from_dict(policy))
    catalogs = CatalogStore(client, PREFIX)  # the policy worker's doctor reads the catalog
    limits, launcher = Limits(), DryRunLauncher()
    celery = make_celery(Settings.from_env(redis_url=redis_url, key_prefix=PREFIX))
    token = TOKEN_PREFIX + uuid.uuid4().hex
    app = _api(redis_url, client, token)
    api_client, noop_client = app.test_client(), noop_api.create_app().test_client()
    headers = {"Authorization": f"Bearer {token}"}

    def post(_: int) -> None:
        resp = api_client.post("/api/v1/tasks", json=body, headers=headers)
        if resp.status_code != 202:
            raise RuntimeError(f"POST answered {resp.status_code}: {resp.data[:200]!r}")

    best: dict[str, float] = {}
    for _ in range(rounds):
        ids = [tasks.create(records.new_task(body, "admin"))[0]["id"] for _ in range(n)]
        costs = {
            "validate stage": _cpu_per_id(
                lambda t: stages.validate(validated, limits, t, 1), ids),
            "policy stage": _cpu_per_id(
                lambda t: stages.apply_policy(resolved, policies, t, 1, catalogs=catalogs), ids),
            "launch stage (dryrun)": _cpu_per_id(
                lambda t: stages.launch(launched, launcher, t, 1, 5), ids),
            "POST /api/v1/tasks view, enqueue stubbed": _cpu_per_call(post, n),
            "no-op endpoint, same test client": _cpu_per_call(
                lambda i: noop_client.post("/noop", json=body), n),
            "Celery send_task (not ours)": _cpu_per_call(
                lambda i: celery.send_task("taskenv.validate", args=["x" * 32, 1],
                                           queue="validate"), n),
            "one Redis round trip, redis-py (not ours)": _cpu_per_call(
                lambda i: client.get("nothing"), n),
        }
        for k, v in costs.items():
            best[k] = min(best.get(k, v), v)
    return {"n": n, "rounds": rounds, "cpu_ms_per_call": {k: v * 1e3 for k, v in best.items()},
            "final_record_bytes": len(client.hget(tasks.keys.task(ids[-1]), "doc") or "")}


def _api(redis_url: str, client: Any, token: str) -> Any:
    from api import create_app

    # Quotas counted as usual (their cost is measured), never reached.
    return create_app({"redis_url": redis_url, "key_prefix": PREFIX, "admin_token": token,
                       "quota_creates_per_minute": 10**9, "quota_unfinished_tasks": 10**9},
                      redis_client=client, enqueue=lambda task_id, revision: None)
