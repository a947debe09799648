"""How costs grow: env size (validation + merge), stored tasks (listing), memory.

* :func:`merge_cost` times ``shared.envlist.validate`` + ``shared.policy.resolve``
  in-process (timeit, best of several repeats) for env lists of growing size
  against a policy of 20 defaults and 20 protected variables.
* :func:`listing_cost` loads task records straight into Redis with taskenv's own
  creation script (pipelined, so 100,000 take seconds) and times
  ``GET /api/v1/tasks?limit=50`` over HTTP at two store sizes; it also reports
  Redis memory per stored task from ``INFO memory``.

``python bench/growth.py`` runs the in-process part alone.
"""

from __future__ import annotations

import functools
import http.client
import json
import sys
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.measure import summarize  # noqa: E402
from shared import envlist  # noqa: E402
from shared.envlist import Limits  # noqa: E402
from shared.policy import Policy, platform_env, resolve  # noqa: E402
from shared.store import _CREATE, Keys  # noqa: E402

SIZES = (10, 100, 1_000, 10_000)
LINEARITY_FACTOR = 2.0  # per-variable cost at 10k may be at most this times that at 100


def policy_body(defaults: int = 20, protected: int = 20) -> dict[str, Any]:
    """A policy as an admin PUTs it: half the protected entries carry a value."""
    return {
        "defaults": [{"name": f"PLATFORM_DEFAULT_{i}", "value": f"default-{i}"}
                     for i in range(defaults)],
        "protected": [{"name": f"LOCKED_{i}", "reason": "set by the platform",
                       **({"value": f"locked-{i}"} if i % 2 == 0 else {})}
                      for i in range(protected)],
        "on_conflict": "reject",
    }


def user_env(n: int, overrides: int = 2) -> list[dict[str, Any]]:
    """``n`` user variables; the first ``overrides`` override policy defaults."""
    env = [{"name": f"PLATFORM_DEFAULT_{i}", "value": f"user-{i}"}
           for i in range(min(overrides, n))]
    env += [{"name": f"USER_VAR_{i}", "value": f"value-{i}-{'x' * 16}"}
            for i in range(n - len(env))]
    return env


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


class Loader:
    """Writes task records with taskenv's own creation script, many per round trip."""

    def __init__(self, client: redis.Redis, prefix: str, template: str, template_id: str,
                 owner: str, state: str) -> None:
        self.r, self.keys = client, Keys(prefix)
        self.template, self.template_id = template, template_id
        self.owner, self.state = owner, state
        self.script = client.register_script(_CREATE)

    def load(self, n: int, batch: int = 1000) -> float:
        started = time.perf_counter()
        k = self.keys
        while n > 0:
            pipe = self.r.pipeline(transaction=False)
            for _ in range(min(batch, n)):
                task_id = uuid.uuid4().hex
                self.script(keys=[k.task(task_id), "", k.index(), k.index(self.owner),
                                  k.index(state=self.state), k.index(self.owner, self.state),
                                  f"{k.p}:seq"],
                            args=[task_id, self.template.replace(self.template_id, task_id),
                                  self.state, 0], client=pipe)
            pipe.execute()
            n -= min(batch, n)
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


def listing_cost(client: redis.Redis, port: int, token: str, prefix: str, template: str,
                 template_id: str, owner: str, state: str, small: int = 1_000,
                 large: int = 100_000, requests: int = 100) -> dict[str, Any]:
    """GET latency at ``small`` and ``large`` stored tasks, and memory per task."""
    loader = Loader(client, prefix, template, template_id, owner, state)
    mem0 = used_memory(client)
    load_small = loader.load(small)
    mem1 = used_memory(client)
    at_small = _get_latency(port, token, requests)
    load_large = loader.load(large - small)
    mem2 = used_memory(client)
    at_large = _get_latency(port, token, requests)
    stored = client.zcard(Keys(prefix).index())
    return {
        "stored": {"small": small, "large": large, "counted_in_index": stored},
        "load_seconds": {"small": load_small, "large": load_large,
                         "tasks_per_second": (large - small) / load_large},
        "get_list_limit_50": {"small": at_small, "large": at_large,
                              "p50_ratio_large_vs_small": at_large["p50"] / at_small["p50"]},
        "memory": {"used_memory_before": mem0, "after_small": mem1, "after_large": mem2,
                   "bytes_per_task": (mem2 - mem0) / large,
                   "bytes_per_task_small": (mem1 - mem0) / small,
                   "record_json_bytes": len(template.encode())},
    }


def main() -> None:
    result = merge_cost()
    for row in result["rows"]:
        print(f"{row['variables']:>6} variables: {row['seconds'] * 1e3:8.3f} ms "
              f"({row['per_variable_us']:.2f} µs/variable)")
    print(f"per-variable cost, 10k vs 100: x{result['per_variable_ratio_10k_vs_100']:.2f}")


if __name__ == "__main__":
    main()
