"""How costs grow: env size (validation + merge), stored tasks (listing), memory.

* :func:`merge_cost` times ``shared.env.envlist.validate`` + ``shared.policy.model.resolve``
  in-process (timeit, best of several repeats) for env lists of growing size
  against a policy of 20 defaults and 20 protected variables.
* :func:`listing_cost` loads task records straight into Redis with
  ``TaskStore.load_many`` (taskenv's own creation script, pipelined, so a million
  take minutes) and times ``GET /api/v1/tasks?limit=50`` over HTTP at two store
  sizes (the first 1,000 records whole, the rest without their env, which a
  listing never reads); it also reports Redis memory per stored task from
  ``INFO memory``.

``python -m bench.growth`` runs the in-process part alone.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import time
import timeit
import uuid
from collections.abc import Iterator
from typing import Any

import redis

from bench.inputs import policy_body, user_env
from bench.measure import summarize
from bench.processes import Processes
from bench.report import say
from shared.access.tokens import PREFIX as TOKEN_PREFIX
from shared.env import envlist
from shared.env.envlist import Limits
from shared.keys import Keys
from shared.policy.model import Policy, platform_env, resolve
from shared.store.tasks import SEALED_FIELDS, TaskStore
from workers.localstack import free_port, start_api, wait_http

PREFIX = "growth"
SIZES = (10, 100, 1_000, 10_000)
LINEARITY_FACTOR = 2.0  # per-variable cost at 10k may be at most this times that at 100


def validate_and_merge(env: list[dict[str, Any]], policy: Policy, limits: Limits) -> int:
    problems = envlist.validate(env, limits)
    if problems:
        raise AssertionError(problems[0].message)
    result = resolve(envlist.parse(env), policy, platform_env("t" * 32, "bench", 1, 1))
    if not result.ok:
        raise AssertionError(result.errors[0].message)
    return len(result.variables)


def merge_cost(sizes: tuple[int, ...] = SIZES, repeats: int = 15,
               min_seconds: float = 0.02) -> dict[str, Any]:
    """Best of ``repeats`` short repeats: on a shared machine the best is the least
    disturbed, so many short repeats find a quiet moment more surely than a few long ones."""
    policy = Policy.from_dict({**policy_body(), "version": 1})
    rows = []
    for n in sizes:
        env = user_env(n)
        # The configured limit is 1000 variables; lift it so large lists take the full path.
        limits = Limits(max_vars=max(n, Limits().max_vars))
        timer = timeit.Timer(functools.partial(validate_and_merge, env, policy, limits))
        number, _ = timer.autorange()
        number = max(1, int(number * min_seconds / 0.2)) if number > 1 else 1
        best = min(timer.repeat(repeat=repeats, number=number)) / number
        rows.append({"variables": n, "seconds": best, "per_variable_us": best / n * 1e6})
    by_n = {r["variables"]: r for r in rows}
    ratio = (by_n[10_000]["per_variable_us"] / by_n[100]["per_variable_us"]
             if 10_000 in by_n and 100 in by_n else None)
    return {"policy": {"defaults": 20, "protected": 20}, "repeats": repeats, "rows": rows,
            "per_variable_ratio_10k_vs_100": ratio, "linearity_factor": LINEARITY_FACTOR,
            "linear": ratio is not None and ratio <= LINEARITY_FACTOR}


def copies(template: dict[str, Any], n: int) -> Iterator[dict[str, Any]]:
    """``n`` copies of a task record, each under a new id."""
    text = json.dumps(template)
    for _ in range(n):
        yield json.loads(text.replace(template["id"], uuid.uuid4().hex))


def shallow_copies(template: dict[str, Any], n: int) -> Iterator[dict[str, Any]]:
    """``n`` copies sharing the template's values, each under a new id: fast enough for
    a million (the store serialises, and never changes, what a record holds)."""
    for _ in range(n):
        yield {**template, "id": uuid.uuid4().hex}


def load(store: TaskStore, template: dict[str, Any], n: int) -> float:
    """Seconds to store ``n`` copies of ``template``."""
    started = time.perf_counter()
    store.load_many(shallow_copies(template, n))
    return time.perf_counter() - started


def _get_latency(port: int, token: str, requests: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"}
    times, items = [], 0
    for i in range(requests + 5):
        started = time.perf_counter()
        conn.request("GET", "/api/v1/tasks?limit=50", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        elapsed = time.perf_counter() - started
        if resp.status != 200:
            raise RuntimeError(f"GET /api/v1/tasks answered {resp.status}: {body[:200]!r}")
        if i >= 5:  # the first few warm caches up
            times.append(elapsed)
            items = len(json.loads(body)["items"])
    conn.close()
    return {**summarize(times), "items_per_page": items}


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def listing_cost(client: redis.Redis, port: int, token: str, prefix: str,
                 template: dict[str, Any], small: int = 1_000, large: int = 100_000,
                 requests: int = 100) -> dict[str, Any]:
    """GET latency at ``small`` and ``large`` stored tasks, and memory per task."""
    store = TaskStore(client, prefix)
    mem0 = used_memory(client)
    load_small = load(store, template, small)
    mem1 = used_memory(client)
    at_small = _get_latency(port, token, requests)
    load_large = load(store, without_env(template), large - small)
    mem2 = used_memory(client)
    at_large = _get_latency(port, token, requests)
    stored = client.zcard(Keys(prefix).index())
    return {
        "stored": {"small": small, "large": large, "counted_in_index": stored,
                   "beyond_small": "without env"},
        "load_seconds": {"small": load_small, "large": load_large,
                         "tasks_per_second": (large - small) / load_large},
        "get_list_limit_50": {"small": at_small, "large": at_large,
                              "p50_ratio_large_vs_small": at_large["p50"] / at_small["p50"]},
        "memory": {"used_memory_before": mem0, "after_small": mem1, "after_large": mem2,
                   "bytes_per_task_small": (mem1 - mem0) / small,
                   "bytes_per_task_without_env": (mem2 - mem1) / (large - small),
                   "record_json_bytes": len(json.dumps(template).encode())},
    }


def without_env(template: dict[str, Any]) -> dict[str, Any]:
    """The record with its variable lists emptied.  A listing reads only the task's small
    fields, never a revision's, so this changes nothing it reads; it lets a million
    tasks fit in the memory of a shared machine."""
    return {**template, **{name: [] for name in SEALED_FIELDS if template.get(name)}}


def listing_phase(procs: Processes, client: redis.Redis, template: dict[str, Any],
                  args: argparse.Namespace) -> dict[str, Any]:
    """:func:`listing_cost` against an API of its own, on a key prefix of its own."""
    port = free_port()
    token = TOKEN_PREFIX + uuid.uuid4().hex
    env = {"TASKENV_REDIS_URL": procs.redis_url, "TASKENV_PORT": str(port),
           "TASKENV_ADMIN_TOKEN": token, "TASKENV_KEY_PREFIX": PREFIX}
    api = procs.add(start_api(env, procs.logs))
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        listing = listing_cost(client, port, token, PREFIX, template, small=1_000,
                               large=args.stored, requests=30 if args.quick else 100)
    finally:
        procs.stop([api])
    get = listing["get_list_limit_50"]
    say(f"  p50 {get['small']['p50'] * 1e3:.1f} ms at 1,000, "
        f"{get['large']['p50'] * 1e3:.1f} ms at {args.stored:,} (p99 "
        f"{get['small']['p99'] * 1e3:.1f} and {get['large']['p99'] * 1e3:.1f} ms); "
        f"loaded {listing['load_seconds']['tasks_per_second']:,.0f} tasks/s")
    return listing


def merge_lines(result: dict[str, Any]) -> list[str]:
    return [f"{row['variables']:>6} variables: {row['seconds'] * 1e3:8.3f} ms "
            f"({row['per_variable_us']:.2f} µs/variable)" for row in result["rows"]]


def main() -> None:
    result = merge_cost()
    print("\n".join(merge_lines(result)))
    print(f"per-variable cost, 10k vs 100: x{result['per_variable_ratio_10k_vs_100']:.2f}")


if __name__ == "__main__":
    main()
