"""The bare three-hop Celery pipeline, the thin design and taskenv's, taking turns (so
that a neighbour's load on this shared machine falls on all alike): bursts, then paced
loads at fractions of the thin floor's burst throughput."""

from __future__ import annotations

import argparse
from typing import Any

import redis

from bench import profile
from bench.floor import Baseline
from bench.measure import best
from bench.pipeline import Taskenv
from bench.processes import Processes
from bench.report import say
from bench.thin import Thin
from shared.task import states

System = Baseline | Thin | Taskenv


def run(procs: Processes, client: redis.Redis,
        args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The results of the three pipelines (and of the profiled burst, with ``--profile``),
    and the record of one finished task, a template for the growth phase."""
    base, thin, stack = Baseline(procs, client, args), Thin(procs, client, args), \
        Taskenv(procs, client, args)
    stack.start_api()
    thin.start_api()
    base.start_workers()
    thin.start_workers()
    stack.start_workers()
    base.warm_up()
    thin.warm_up()
    stack.warm_up()
    systems: dict[str, System] = {"baseline": base, "thin": thin, "pipeline": stack}
    out = take_turns(systems, args)
    out["baseline"]["celery_settings"] = base.settings()
    finals = out["pipeline"]["burst"]["final_states"]
    if set(finals) != {states.SUCCEEDED}:
        say(f"  WARNING: taskenv tasks ended {finals}; expected all succeeded")
    template = stack.docs(out["pipeline"]["burst"]["_ids"][-1:])[0]
    base.stop_workers()
    thin.stop()
    if args.profile:
        say("[3b] one more taskenv burst under py-spy (API and workers)")
        out["profile"] = profile.record_burst(stack, args, args.out)
    stack.stop_workers()
    return out, template


def take_turns(systems: dict[str, System], args: argparse.Namespace) -> dict[str, Any]:
    """Bursts, each system in turn, the fastest of ``args.rounds`` kept; then paced loads
    at fractions of the thin floor's burst throughput."""
    bursts: dict[str, list[dict[str, Any]]] = {who: [] for who in systems}
    for i in range(args.rounds):
        for who, system in systems.items():
            r = system.load(f"burst-{i}", args.tasks, None)
            say(_line(f"{who:8s} burst {i + 1}", r))
            bursts[who].append(r)
    best_burst = {who: best(rounds) for who, rounds in bursts.items()}
    paced = _paced(systems, best_burst["thin"]["throughput"], args)
    return {who: {"burst": best_burst[who], "burst_rounds": [r["throughput"] for r in rounds],
                  "paced": paced[who]} for who, rounds in bursts.items()}


def _paced(systems: dict[str, System], rate0: float,
           args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Open-loop loads at each of ``args.rates`` times ``rate0``, in turns."""
    paced: dict[str, list[dict[str, Any]]] = {who: [] for who in systems}
    for fraction in args.rates:
        rate = fraction * rate0
        count = max(30, int(rate * args.paced_seconds))
        for who, system in systems.items():
            r = system.load(f"paced-{fraction}", count, rate)
            r["fraction"] = fraction
            r.pop("_ids", None)
            paced[who].append(r)
            say(_line(f"{who:8s} paced {fraction:.0%} of {rate0:.0f}/s = {rate:.0f}/s", r))
    return paced


def _line(who: str, r: dict[str, Any]) -> str:
    lat = r["latency_ms"]
    return (f"  {who}: {r['throughput']:.1f}/s, latency p50 {lat['p50']:.1f} ms, "
            f"p99 {lat['p99']:.1f} ms, {r['redis_commands']['per_item']:.1f} Redis commands "
            f"and {r['cpu']['cpu_ms_per_item_total']:.2f} CPU ms per pipeline"
            + (f", others busy {r['cpu']['others_busy_cores']:.2f} cores"
               if r["cpu"]["others_busy_cores"] is not None else "")
            + ("" if r["complete"] else " (DID NOT COMPLETE in time)"))
