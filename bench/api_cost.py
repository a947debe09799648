"""POST throughput with no worker running: ``POST /api/v1/tasks`` against two no-op
floors (``bench/noop_api.py``): a bare JSON endpoint, and the same plus one Redis
write and one Celery ``send_task``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import redis

from bench.inputs import task_body
from bench.measure import (
    CpuMeter,
    RedisCounter,
    SenderFactory,
    best,
    http_poster,
    in_ms,
    submit,
    summarize,
)
from bench.pipeline import Taskenv
from bench.processes import Processes
from bench.report import say
from workers.localstack import free_port, wait_http

# Its own key prefix, so that nothing the API enqueues here is ever consumed.
PREFIX = "postonly"
LABELS = {"noop": "no-op endpoint", "noop_enqueue": "no-op + enqueue",
          "api": "POST /api/v1/tasks"}

# kind -> (its poster, the server's pid, a Redis command counter for taskenv's own)
Kinds = dict[str, tuple[SenderFactory, int, RedisCounter | None]]


def measure(procs: Processes, client: redis.Redis, args: argparse.Namespace) -> dict[str, Any]:
    """The best of ``args.rounds`` rounds of each kind of POST, taking turns."""
    port = free_port()
    noop = procs.spawn([sys.executable, "-m", "bench.noop_api"],
                       {"BENCH_NOOP_PORT": str(port), "BENCH_REDIS_URL": procs.redis_url})
    stack = Taskenv(procs, client, args, prefix=PREFIX)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        api = stack.start_api()
        kinds: Kinds = {
            "noop": (http_poster(port, "/noop", task_body(), None, 202), noop.pid, None),
            "noop_enqueue": (http_poster(port, "/noop-enqueue", task_body(), None, 202),
                             noop.pid, None),
            "api": (stack.poster(), api.pid, stack.counter),
        }
        out = _rounds(kinds, args)
        for kind, label in LABELS.items():
            say(_line(label, kind, out[kind]))
        return out
    finally:
        procs.stop([p for p in (noop, stack.api) if p is not None])


def _rounds(kinds: Kinds, args: argparse.Namespace) -> dict[str, Any]:
    for poster, _, _ in kinds.values():
        submit(poster, 100, args.threads)  # warm-up
    rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for kind, (poster, pid, counter) in kinds.items():
            rounds[kind].append(post_load(poster, args.tasks, args.threads,
                                          CpuMeter({kind: pid}), counter))
    return {k: {**best(v), "rounds": [r["throughput"] for r in v]} for k, v in rounds.items()}


def post_load(poster: SenderFactory, count: int, threads: int, cpu: CpuMeter,
              counter: RedisCounter | None = None) -> dict[str, Any]:
    if counter:
        counter.reset()
    cpu.start()
    started = time.perf_counter()
    sub = submit(poster, count, threads)
    wall = time.perf_counter() - started
    out = {"count": count, "accepted": len(sub.ids), "errors": sub.errors,
           "throughput": len(sub.ids) / wall, "response_ms": in_ms(summarize(sub.response_seconds)),
           "cpu": cpu.stop(max(1, len(sub.ids)))}
    if counter:
        out["redis_commands"] = counter.snapshot(max(1, len(sub.ids)))
    return out


def _line(label: str, kind: str, r: dict[str, Any]) -> str:
    return (f"  {label}: {r['throughput']:.0f}/s (rounds: "
            + ", ".join(f"{x:.0f}" for x in r["rounds"])
            + f"), p50 {r['response_ms']['p50']:.1f} ms, "
            f"{r['cpu']['cpu_ms_per_item'][kind]:.2f} server CPU ms/request"
            + (f", {r['redis_commands']['per_item']:.1f} Redis commands/request"
               if "redis_commands" in r else ""))
