"""The bare three-hop Celery pipeline and taskenv's, taking turns (so that a neighbour's
load on this shared machine falls on both alike): bursts, then paced loads at fractions
of the bare pipeline's burst throughput."""

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
from shared import states


def run(procs: Processes, client: redis.Redis,
        args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The results of both pipelines (and of the profiled burst, with ``--profile``),
    and the record of one finished task, a template for the growth phase."""
    base, stack = Baseline(procs, client, args), Taskenv(procs, client, args)
    stack.start_api()
    base.start_workers()
    stack.start_workers()
    base.warm_up()
    stack.warm_up()
    out: dict[str, Any] = {}
    out["baseline"], out["pipeline"] = take_turns(base, stack, args)
    finals = out["pipeline"]["burst"]["final_states"]
    if set(finals) != {states.SUCCEEDED}:
        say(f"  WARNING: taskenv tasks ended {finals}; expected all succeeded")
    template = stack.docs(out["pipeline"]["burst"]["_ids"][-1:])[0]
    base.stop_workers()
    if args.profile:
        say("[3b] one more taskenv burst under py-spy (API and workers)")
        out["profile"] = profile.record_burst(stack, args, args.out)
    stack.stop_workers()
    return out, template


def take_turns(base: Baseline, stack: Taskenv,
               args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    bursts: dict[str, list[dict[str, Any]]] = {"baseline": [], "pipeline": []}
    for i in range(args.rounds):
        b = base.load(f"burst-{i}", args.tasks, None)
        say(_line(f"baseline burst {i + 1}", b))
        p = stack.load(f"burst-{i}", args.tasks, None)
        say(_line(f"taskenv  burst {i + 1}", p))
        bursts["baseline"].append(b)
        bursts["pipeline"].append(p)
    best_base, best_pipe = best(bursts["baseline"]), best(bursts["pipeline"])
    paced = _paced(base, stack, best_base["throughput"], args)
    return ({"burst": best_base, "burst_rounds": [b["throughput"] for b in bursts["baseline"]],
             "paced": paced["baseline"], "celery_settings": base.settings()},
            {"burst": best_pipe, "burst_rounds": [p["throughput"] for p in bursts["pipeline"]],
             "paced": paced["pipeline"]})


def _paced(base: Baseline, stack: Taskenv, rate0: float,
           args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Open-loop loads at each of ``args.rates`` times ``rate0``, in turns."""
    paced: dict[str, list[dict[str, Any]]] = {"baseline": [], "pipeline": []}
    for fraction in args.rates:
        rate = fraction * rate0
        count = max(30, int(rate * args.paced_seconds))
        for who, system in (("baseline", base), ("pipeline", stack)):
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
