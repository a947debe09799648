"""Everything a benchmark run starts, kept in one place so that all of it is stopped
however the run ends."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench.report import say
from workers.localstack import RedisServer, spawn, stop_all

BENCH_MAXMEMORY = "6gb"


class Processes:
    """The run's redis-server and child processes; their output goes to one log."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.logs = work / "processes.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.redis: RedisServer | None = None

    def start_redis(self) -> redis.Redis:
        # The growth phase stores a million records: more than the 1 GB every Redis the
        # platform starts is given (make run, compose), which would refuse them.
        self.redis = RedisServer(self.work / "redis", maxmemory=BENCH_MAXMEMORY).start()
        return redis.Redis.from_url(self.redis.url)

    @property
    def redis_url(self) -> str:
        if self.redis is None:
            raise RuntimeError("redis-server is not started")
        return self.redis.url

    def redis_pid(self) -> dict[str, int]:
        """The redis-server's pid, for a CpuMeter."""
        proc = self.redis.proc if self.redis else None
        return {"redis-server": proc.pid} if proc else {}

    def add(self, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        self.procs.append(proc)
        return proc

    def spawn(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        return self.add(spawn(args, env, self.logs))

    def stop(self, procs: list[subprocess.Popen[bytes]]) -> None:
        stop_all(procs)
        for proc in procs:
            if proc in self.procs:
                self.procs.remove(proc)

    def close(self, ok: bool) -> None:
        """Stop everything; keep the processes' output only when the run failed."""
        stop_all(self.procs)
        self.procs.clear()
        if self.redis:
            self.redis.stop()
            self.redis = None
        if ok:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            say(f"the run failed: the processes' output is kept in {self.logs}")


def run_alone(phase: Callable[[Processes, redis.Redis, argparse.Namespace], Any],
              args: argparse.Namespace) -> Any:
    """One phase of ``python -m bench`` on its own (``python -m bench.<phase>``): a
    redis-server of its own, everything it started stopped after, its result."""
    procs = Processes(Path(tempfile.mkdtemp(prefix="taskenv-bench-")))
    ok = False
    try:
        result = phase(procs, procs.start_redis(), args)
        ok = True
    finally:
        procs.close(ok)
    return result
