"""What ``TASKENV_REDIS_MIN_REPLICAS=1`` costs ``POST /api/v1/tasks``, against ``0``.

``python -m bench.min_replicas``: a redis-server and one replica of it on loopback, two
API processes (no worker: nothing consumes, as in ``bench/api_cost.py``), one answering
once the primary has a creation, the other once ``WAIT 1`` on the writing connection
counts the replica too.  They take turns, ``--rounds`` rounds of ``--tasks`` POSTs from
``--threads`` threads each; the fastest round of each is kept (a shared machine's least
disturbed) and the ratios are of those two, measured in the same run: throughput
(0 over 1) and p50 response time (1 over 0; target <= 1.3).  Results go to stdout and
``bench/results/min_replicas.json``.  Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench.api_cost import post_load
from bench.measure import CpuMeter, best, submit
from bench.pipeline import Taskenv
from bench.processes import Processes
from bench.report import say
from workers.localstack import RedisServer

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_P50 = 1.3  # p50 with MIN_REPLICAS=1 <= this x with 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.min_replicas",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--tasks", type=int, default=1000, help="POSTs per round")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each setting")
    p.add_argument("--threads", type=int, default=8, help="client threads")
    p.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    args = p.parse_args(argv)
    args.concurrency, args.pool = 1, "prefork"  # Taskenv's, unused: no worker runs
    return args


def start_replica(procs: Processes, primary: redis.Redis) -> RedisServer:
    """A replica of the run's redis-server, once the primary counts it online."""
    replica = RedisServer(procs.work / "replica").start()
    assert procs.redis is not None
    redis.Redis(port=replica.port).replicaof("127.0.0.1", procs.redis.port)
    deadline = time.monotonic() + 30
    while primary.info("replication").get("slave0", {}).get("state") != "online":
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not come online")
        time.sleep(0.1)
    return replica


def measure(args: argparse.Namespace) -> dict[str, Any]:
    procs = Processes(Path(tempfile.mkdtemp(prefix="taskenv-bench-replicas-")))
    client = procs.start_redis()
    replica = start_replica(procs, client)
    ok = False
    try:
        stacks = {}
        for n in (0, 1):
            stack = Taskenv(procs, client, args, prefix=f"minrep{n}")
            stack.env["TASKENV_REDIS_MIN_REPLICAS"] = str(n)
            stack.start_api()
            stacks[n] = stack
        for stack in stacks.values():
            submit(stack.poster(), 100, args.threads)  # warm-up
        rounds: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
        for _ in range(args.rounds):
            for n, stack in stacks.items():
                assert stack.api is not None
                rounds[n].append(post_load(stack.poster(), args.tasks, args.threads,
                                           CpuMeter({"api": stack.api.pid})))
        out = result(rounds, args)
        ok = True
        return out
    finally:
        replica.stop()
        procs.close(ok)


def result(rounds: dict[int, list[dict[str, Any]]], args: argparse.Namespace
           ) -> dict[str, Any]:
    kept = {n: best(r) for n, r in rounds.items()}
    p50 = {n: kept[n]["response_ms"]["p50"] for n in kept}
    return {
        "settings": {"tasks": args.tasks, "rounds": args.rounds, "threads": args.threads},
        "min_replicas_0": {**kept[0], "rounds": [r["throughput"] for r in rounds[0]]},
        "min_replicas_1": {**kept[1], "rounds": [r["throughput"] for r in rounds[1]]},
        "ratios": {"throughput_0_vs_1": kept[0]["throughput"] / kept[1]["throughput"],
                   "p50_1_vs_0": p50[1] / p50[0]},
        "target": {"p50_1_vs_0": TARGET_P50},
    }


def lines(out: dict[str, Any]) -> list[str]:
    rows = []
    for n in (0, 1):
        r = out[f"min_replicas_{n}"]
        rows.append(f"  MIN_REPLICAS={n}: {r['throughput']:.0f}/s (rounds: "
                    + ", ".join(f"{x:.0f}" for x in r["rounds"])
                    + f"), p50 {r['response_ms']['p50']:.1f} ms, "
                    f"p99 {r['response_ms']['p99']:.1f} ms, errors {r['errors']}")
    ratio = out["ratios"]["p50_1_vs_0"]
    rows.append(f"  p50 ratio 1 vs 0: {ratio:.2f} (target <= {TARGET_P50}: "
                f"{'MET' if ratio <= TARGET_P50 else 'MISSED'}); throughput 0 vs 1: "
                f"{out['ratios']['throughput_0_vs_1']:.2f}")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say(f"POST /api/v1/tasks, TASKENV_REDIS_MIN_REPLICAS=1 against 0 (one replica on "
        f"loopback): {args.rounds} rounds of {args.tasks}, {args.threads} threads")
    out = measure(args)
    out["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    say("\n".join(lines(out)))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "min_replicas.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
