"""The thin design's floor as the run drives it (``bench/thin_app.py``): its API, its
three workers, its sender and its completion marks."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import redis

from bench.inputs import task_body
from bench.measure import (
    CpuMeter,
    RedisCounter,
    SenderFactory,
    http_poster,
    latency_report,
    measured,
    submit,
    wait_until,
)
from bench.processes import Processes
from shared.redis_conn import as_text
from workers.localstack import free_port, wait_http, worker_argv

PREFIX = "thin"
APP = "bench.thin_app"


class Thin:
    """An HTTP endpoint writing one record and enqueuing it, then three read-and-write hops."""

    def __init__(self, procs: Processes, client: redis.Redis,
                 args: argparse.Namespace) -> None:
        from bench import thin_app

        self.mod, self.procs, self.client, self.args = thin_app, procs, client, args
        self.port = free_port()
        self.env = {"BENCH_REDIS_URL": procs.redis_url, "BENCH_KEY_PREFIX": PREFIX,
                    "BENCH_THIN_PORT": str(self.port)}
        self.counter = RedisCounter(client)
        self.api: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_api(self) -> None:
        self.api = self.procs.spawn([sys.executable, "-m", APP], self.env)
        wait_http(f"http://127.0.0.1:{self.port}/healthz")

    def start_workers(self) -> None:
        self.workers = [
            self.procs.spawn(worker_argv(q, self.args.concurrency, self.args.pool, app=APP),
                             self.env)
            for q in self.mod.QUEUES]

    def stop(self) -> None:
        self.procs.stop([*self.workers, *([self.api] if self.api else [])])
        self.workers, self.api = [], None

    def cpu(self) -> CpuMeter:
        groups = {"api": self.api.pid} if self.api else {}
        groups.update({f"worker {q}": w.pid for q, w in zip(self.mod.QUEUES, self.workers,
                                                              strict=False)})
        return CpuMeter(groups, self.procs.redis_pid())

    def sender(self, run: str) -> SenderFactory:
        return http_poster(self.port, f"/tasks?run={run}", task_body(), None, 202)

    def done(self, run: str) -> Callable[[], int]:
        return lambda: int(self.counter.call("HLEN", PREFIX + ":done:" + run))

    def warm_up(self) -> None:
        warm = submit(self.sender("warmup"), 30, 2)
        if not wait_until(self.done("warmup"), len(warm.ids), 90):
            raise RuntimeError(f"thin floor's workers did not come up; see {self.procs.logs}")

    def load(self, run: str, count: int, rate: float | None) -> dict[str, Any]:
        out = measured(run, self.sender(run), count, self.args.threads, self.done(run), 0,
                       max(60.0, count / 10), self.counter, self.cpu(), rate)
        raw = self.client.hgetall(f"{PREFIX}:done:{run}")
        out.update(latency_report(out.pop("_sub"),
                                  {"last_hop": {as_text(k): float(v) for k, v in raw.items()}}))
        out["throughput"] = out.get("throughput_to_last_hop", 0.0)
        out["latency_ms"] = out["submit_to_last_hop_ms"]
        out["record_bytes"] = self.record_bytes()
        return out

    def record_bytes(self) -> int:
        fields = self.mod.record("x" * 32, task_body())
        return sum(len(k) + len(v) for k, v in fields.items())
