"""``python -m bench``: taskenv's pipeline against two floors, in one run.

Starts its own redis-server (a fresh directory), then:

1. in-process: validation + merge time for 10 ... 10,000 variables
   (``bench/growth.py``), taskenv's own code per task without Celery or HTTP
   (``bench/stagecost.py``), and a preview with the doctor reading a 2,000-line
   script set against one without it (``bench/doctor.py``), and another user's task
   beside a hostile script against a quiet stack (``bench/doctor_neighbour.py``);
   a tenant's hostile input against a plain one: the doctor's preview of a name at
   the length limit, redaction of 2 MB with a secret sharing the output's prefix
   (``bench/hostile_input.py``); and another tenant's local task beside one flooding its
   output with a hostile secret against a quiet host (``bench/output_neighbour.py``);
2. POST throughput with no worker running (``bench/api_cost.py``): a no-op Flask
   JSON endpoint, the same plus one Redis write and one Celery ``send_task``
   (``bench/noop_api.py``, both under waitress threads=8), and
   ``POST /api/v1/tasks`` (``python -m api``);
3. the bare three-hop Celery pipeline (``bench/floor.py``, ``bench/baseline_app.py``,
   taskenv's worker settings), the thin design (``bench/thin.py``,
   ``bench/thin_app.py``: an endpoint writing one ~2 KB record and enqueuing it, three
   hops each reading it and writing a new state) and taskenv's (``bench/pipeline.py``,
   ``TASKENV_LAUNCHER=dryrun``), one worker per queue each, taking turns
   (``bench/compare.py``): bursts (best of ``--rounds``), then paced loads at
   fractions of the thin floor's throughput;
4. growth (``bench/growth.py``, ``bench/store_growth.py``): ``GET
   /api/v1/tasks?limit=50`` at 1,000 and ``--stored`` (1,000,000) stored tasks; a
   state change at 1 and at 200 revisions; Redis memory after ``--retained``
   (20,000) finished tasks with retention 0 and with retention off; reconciler
   backend calls per pass at 10 and 10,000 running Jobs on the contract API server
   (``bench/reconcile_cost.py``; 2,000 with ``--quick``);
5. when podman and the runtime image are present (or with ``--podman``), 50 tasks
   through the podman launcher against a loop of ``podman kube play`` of the same
   pods (``bench/podman_launch.py``); then the local launcher's launch latency and
   throughput with its limits on against off (``bench/local_limits.py``), and how long
   a local step waits to start against the same containment done directly
   (``bench/local_start.py``).

Results (``bench/report.py``): ``bench/results/latest.json`` (and a timestamped
copy), a plot of latency against offered load (``bench/results/latency-vs-load.png``)
and, on stdout, the table and each target as MET or MISSED (``bench/targets.py``).
Every process it starts is stopped before it exits.  ``--quick`` makes a short run;
``--help`` lists the rest.  See docs/performance.md.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from bench import (
    api_cost,
    compare,
    doctor,
    doctor_neighbour,
    growth,
    hostile_input,
    local_limits,
    local_start,
    output_neighbour,
    podman_launch,
    reconcile_cost,
    report,
    stagecost,
    store_growth,
)
from bench.inputs import policy_body, task_body
from bench.machine import loadavg, machine
from bench.processes import Processes
from bench.report import say

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--tasks", type=int, default=2000,
                   help="tasks (and baseline pipelines, and POSTs) per saturation phase")
    p.add_argument("--quick", action="store_true",
                   help="a short run: 300 tasks, one round, 3 s per paced point, "
                        "20,000 stored tasks, 2,000 finished for retention")
    p.add_argument("--rounds", type=int, default=2,
                   help="rounds of each saturation phase; the fastest round is reported")
    p.add_argument("--pool", default="prefork", help="Celery pool of every worker")
    p.add_argument("--concurrency", type=int, default=2, help="Celery concurrency per worker")
    p.add_argument("--threads", type=int, default=8, help="client threads")
    p.add_argument("--rates", default="0.25,0.5,0.75,1.0",
                   help="paced loads, as fractions of the baseline's throughput")
    p.add_argument("--paced-seconds", type=float, default=8.0,
                   help="how long each paced load is offered")
    p.add_argument("--p99-at", type=float, default=0.5,
                   help="the paced load (fraction) at which the p99 target is judged")
    p.add_argument("--stored", type=int, default=1_000_000,
                   help="stored tasks for the large listing measurement")
    p.add_argument("--retained", type=int, default=20_000,
                   help="finished tasks for the retention measurement")
    p.add_argument("--podman", action=argparse.BooleanOptionalAction, default=None,
                   help="measure the podman launcher (default: when podman and the "
                        "runtime image are present; --podman insists, --no-podman skips)")
    p.add_argument("--profile", action="store_true",
                   help="after the measurements, run one more burst under py-spy "
                        "(API and workers) and summarise where the time goes")
    p.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    args = p.parse_args(argv)
    if args.quick:
        args.tasks = min(args.tasks, 300)
        args.rounds = 1
        args.paced_seconds = min(args.paced_seconds, 3.0)
        args.stored = min(args.stored, 20_000)
        args.retained = min(args.retained, 2_000)
    args.rates = [float(r) for r in args.rates.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _exit_on_term)
    began = time.time()
    procs = Processes(Path(tempfile.mkdtemp(prefix="taskenv-bench-")))
    with stopped_at_the_end(procs):
        results = measure(procs, args)
    results["meta"]["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began))
    results["meta"]["duration_seconds"] = round(time.time() - began, 1)
    report.publish(results, args.out, began)
    return 0


def measure(procs: Processes, args: argparse.Namespace) -> dict[str, Any]:
    say(intro(args))
    say("[1/6] validation + merge, in-process (timeit, best of 15)")
    merge = growth.merge_cost()
    say("\n".join(f"  {line}" for line in growth.merge_lines(merge)))
    client = procs.start_redis()
    results: dict[str, Any] = {"meta": {"machine": machine(client), "settings": settings(args)}}
    results["own_code"] = own_code(procs.redis_url, args.quick)
    say("  a preview with the doctor on a 2,000-line script set, against one without it:")
    results["doctor"] = doctor.phase(args.quick)
    say("\n".join(f"    {line}" for line in doctor.lines(results["doctor"])))
    say("  another user's task beside a hostile script, against a quiet stack:")
    results["doctor_neighbour"] = doctor_neighbour.phase(procs, client, args)
    say("  a tenant's hostile input against a plain one (a name at the limit, a secret "
        "sharing the output's prefix):")
    results["hostile_input"] = hostile_input.phase(args.quick)
    say("\n".join(f"    {line}" for line in hostile_input.lines(results["hostile_input"])))
    results["output_neighbour"] = output_neighbour.phase(procs, client, args)
    say(f"[2/6] POST throughput, no worker running (redis-server "
        f"{results['meta']['machine']['redis_server']})")
    results["post"] = api_cost.measure(procs, client, args)
    say("[3/6] the bare three-hop Celery pipeline, the thin design and taskenv's, "
        "taking turns")
    pipelines, template = compare.run(procs, client, args)
    results.update(pipelines)
    results["growth"] = store_growth_phase(procs, client, template, args, merge)
    say("[5/6] the podman launcher against a loop of podman kube play")
    results["podman"] = podman_launch.phase(procs, client, args)
    say("[5b] the local launcher with its limits on and off")
    results["local_limits"] = local_limits.phase(procs, client, args)
    say("[5c] launch → a local step's first instruction, against the containment alone")
    results["local_start"] = local_start.phase(procs, client, args)
    results["meta"]["machine"]["loadavg_at_end"] = loadavg()
    return results


def store_growth_phase(procs: Processes, client: redis.Redis, template: dict[str, Any],
                       args: argparse.Namespace, merge: dict[str, Any]) -> dict[str, Any]:
    say(f"[4/6] GET /api/v1/tasks?limit=50 at 1,000 and {args.stored:,} stored tasks")
    out = {"merge": merge, "listing": growth.listing_phase(procs, client, template, args)}
    say("  a state change at 1 and 200 revisions; memory with and without retention")
    out["transition"] = store_growth.transition_cost(client, samples=20 if args.quick else 50)
    out["retention"] = store_growth.retention_memory(client, template, args.retained)
    out["revision_bytes"] = store_growth.revision_bytes(client)
    say("\n".join(f"  {line}" for line in store_growth.lines(out["transition"],
                                                             out["retention"])))
    say(f"  {store_growth.revision_line(out['revision_bytes'])}")
    say("  reconciler backend calls per pass, 10 vs 10,000 running Jobs (contract server)")
    out["reconciler"] = reconcile_cost.phase(client, args.quick)
    return out


@contextmanager
def stopped_at_the_end(procs: Processes) -> Iterator[None]:
    """Stop everything the run started, however it ends; keep the logs of a failed run."""
    ok = False
    try:
        yield
        ok = True
    finally:
        say("[6/6] stopping everything this run started")
        procs.close(ok)


def _exit_on_term(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def intro(args: argparse.Namespace) -> str:
    return (f"taskenv benchmark: {args.tasks} per saturation phase, best of {args.rounds} "
            f"round(s); {args.threads} client threads; workers -P {args.pool} "
            f"-c {args.concurrency}, one per queue, for the three pipelines; "
            f"TASKENV_LAUNCHER=dryrun; waitress threads=8")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """How this run was made, as recorded in the results."""
    return {"tasks": args.tasks, "rounds": args.rounds, "quick": args.quick, "pool": args.pool,
            "concurrency": args.concurrency, "workers": "one per queue",
            "client_threads": args.threads, "waitress_threads": 8,
            "launcher": "dryrun", "paced_seconds": args.paced_seconds,
            "rates": args.rates, "rates_of": "thin floor's burst throughput",
            "p99_judged_at": args.p99_at, "stored": args.stored, "retained": args.retained,
            "podman": args.podman,
            "reconciler": "not running", "task": task_body(),
            "policy": {"defaults": 20, "protected": 20, "protected_with_value": 10}}


def own_code(redis_url: str, quick: bool) -> dict[str, Any]:
    say("  taskenv's own code, in-process, CPU ms per call (best of 3):")
    costs = stagecost.stage_costs(redis_url, task_body(), policy_body(),
                                  n=100 if quick else 300)
    say("\n".join(f"    {ms:7.3f}  {name}" for name, ms in costs["cpu_ms_per_call"].items()))
    return costs
