"""The floor as the run drives it: the bare three-hop Celery pipeline of
``bench/baseline_app.py``, its workers, its sender and its completion marks."""

from __future__ import annotations

import argparse
import os
import subprocess
from collections.abc import Callable
from typing import Any

import redis

from bench.measure import (
    CpuMeter,
    RedisCounter,
    SenderFactory,
    latency_report,
    measured,
    submit,
    wait_until,
)
from bench.processes import Processes
from shared.redis_conn import as_text
from workers.localstack import worker_argv

PREFIX = "bench"
APP = "bench.baseline_app"


class Baseline:
    """The bare pipeline, one worker per hop, with taskenv's worker command line."""

    def __init__(self, procs: Processes, client: redis.Redis,
                 args: argparse.Namespace) -> None:
        # baseline_app builds its app when first imported, from these.
        os.environ["BENCH_REDIS_URL"] = procs.redis_url
        os.environ["BENCH_KEY_PREFIX"] = PREFIX
        from bench import baseline_app

        self.mod, self.procs, self.client, self.args = baseline_app, procs, client, args
        self.app = baseline_app.make_app(procs.redis_url, PREFIX)
        self.env = {"BENCH_REDIS_URL": procs.redis_url, "BENCH_KEY_PREFIX": PREFIX}
        self.counter = RedisCounter(client)
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_workers(self) -> None:
        self.workers = [
            self.procs.spawn(worker_argv(q, self.args.concurrency, self.args.pool, app=APP),
                             self.env)
            for q in self.mod.QUEUES]

    def stop_workers(self) -> None:
        self.procs.stop(self.workers)
        self.workers = []

    def cpu(self) -> CpuMeter:
        return CpuMeter({f"worker {q}": w.pid for q, w in zip(self.mod.QUEUES, self.workers,
                                                               strict=True)},
                        self.procs.redis_pid())

    def sender(self, run: str) -> SenderFactory:
        def factory() -> Callable[[int], str]:
            def send(i: int) -> str:
                pid = f"{run}-{i}"
                self.app.send_task("bench.hop1", args=[pid, run], queue="hop1")
                return pid
            return send
        return factory

    def done(self, run: str) -> Callable[[], int]:
        return lambda: int(self.counter.call("HLEN", self.mod.done_key(run)))

    def warm_up(self) -> None:
        warm = submit(self.sender("warmup"), 30, 2)
        if not wait_until(self.done("warmup"), len(warm.ids), 90):
            raise RuntimeError(f"baseline workers did not come up; see {self.procs.logs}")

    def load(self, run: str, count: int, rate: float | None) -> dict[str, Any]:
        out = measured(run, self.sender(run), count, self.args.threads, self.done(run), 0,
                       max(60.0, count / 10), self.counter, self.cpu(), rate)
        raw = self.client.hgetall(self.mod.done_key(run))
        out.update(latency_report(out.pop("_sub"),
                                  {"last_hop": {as_text(k): float(v) for k, v in raw.items()}}))
        out["throughput"] = out.get("throughput_to_last_hop", 0.0)
        out["latency_ms"] = out["submit_to_last_hop_ms"]
        return out

    def settings(self) -> dict[str, Any]:
        return self.mod.mirrored_settings(self.app)
