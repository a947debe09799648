"""Reconciler backend calls per pass at 10 and at 10,000 running tasks.

Each size gets its own contract API server (``tests/contract/k8s_api.py``) holding
one Job per running task, and a store holding the tasks.  A first pass LISTs; then
each measured pass finishes the same few Jobs (with a pod and its log, as the Job
controller would) and runs :func:`workers.reconcile.reconcile_once` with the
Kubernetes launcher, counting the server's requests.  Status calls (LIST + WATCH)
must not grow with the number of running tasks: the ratio large / small stays 1.
The passes apply changes and sweep ``launching`` tasks, as ``run_forever`` does
between its once-a-minute sweeps of ``running`` ones (those read Redis only).

``python -m bench.reconcile_cost [--quick]`` runs it alone, on fakeredis.
"""

from __future__ import annotations

import argparse
from typing import Any

import fakeredis
import redis
from kubernetes.client import Configuration

from bench.report import say
from shared.config import Settings
from shared.store.tasks import TaskStore
from shared.task.manifest import (
    job_name,
)
from shared.task.workload import Workload
from tests.contract.jobs import running_jobs
from tests.contract.k8s_api import FakeKubeApi, condition, terminated
from workers.launchers.kubernetes.launcher import KubernetesLauncher, make_api_client
from workers.reconcile import reconcile_once

FINISHED_PER_PASS = 3  # passes × this stays within the small size
FLAT_FACTOR = 1.0  # status calls per pass at the large size / at the small one, at most


def finish(api: FakeKubeApi, workload: Workload) -> None:
    name = job_name(workload)
    api.add_pod(name, state=terminated(0, "Completed"), phase="Succeeded", log="done\n")
    api.set_job_status(name, {"succeeded": 1, "conditions": [condition("Complete")]})


def calls_per_pass(client: redis.Redis, running: int, passes: int) -> dict[str, Any]:
    store = TaskStore(client, f"reconcile-bench-{running}")
    with FakeKubeApi() as api:
        launcher = KubernetesLauncher(
            Settings(launcher="kubernetes", kube_namespace="default"),
            make_api_client(Configuration(host=api.url)), rate=10_000, burst=10_000)
        workloads = running_jobs(store, api, running, owner="bench")
        reconcile_once(store, launcher, lambda *a: None, 120, sweep_running=False)
        first = api.count()
        before = {verb: api.count(verb) for verb in ("list", "watch")}
        total_before = api.count()
        for i in range(passes):
            for workload in workloads[i * FINISHED_PER_PASS:(i + 1) * FINISHED_PER_PASS]:
                finish(api, workload)
            reconcile_once(store, launcher, lambda *a: None, 120, sweep_running=False)
        status = sum(api.count(v) - before[v] for v in before) / passes
        total = (api.count() - total_before) / passes
    return {"running": running, "first_pass_calls": first, "status_calls_per_pass": status,
            "calls_per_pass": total, "finished_per_pass": FINISHED_PER_PASS}


def measure(client: redis.Redis, small: int = 10, large: int = 10_000,
            passes: int = 3) -> dict[str, Any]:
    rows = [calls_per_pass(client, n, passes) for n in (small, large)]
    ratio = rows[1]["status_calls_per_pass"] / rows[0]["status_calls_per_pass"]
    return {"rows": rows, "passes": passes, "status_calls_ratio_large_vs_small": ratio,
            "flat": ratio <= FLAT_FACTOR}


def line(result: dict[str, Any]) -> str:
    small, large = result["rows"]
    verdict = "flat" if result["flat"] else "GROWS"
    return (f"reconciler backend calls per pass: {small['status_calls_per_pass']:.1f} status "
            f"calls at {small['running']:,} running tasks, "
            f"{large['status_calls_per_pass']:.1f} at {large['running']:,} "
            f"(x{result['status_calls_ratio_large_vs_small']:.2f}, {verdict}); "
            f"{small['calls_per_pass']:.1f} vs {large['calls_per_pass']:.1f} with the "
            f"{small['finished_per_pass']} log reads of the Jobs that finished")


def phase(client: redis.Redis, quick: bool) -> dict[str, Any]:
    result = measure(client, large=2_000 if quick else 10_000, passes=2 if quick else 3)
    say(f"  {line(result)}")
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.reconcile_cost",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2,000 running tasks, not 10,000")
    args = p.parse_args(argv)
    phase(fakeredis.FakeRedis(), args.quick)


if __name__ == "__main__":
    main()
