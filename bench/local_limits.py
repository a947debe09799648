"""What containing local steps costs: the local launcher with its limits on and off.

"On" is the launcher as it runs: each step through the exec helper into the task's
cgroup (memory, pids, cpu), rlimits, a network namespace of the runner's, the task's
unprivileged user, the seccomp filter, a size-capped home and /tmp.  "Off" is the same
bwrap sandbox without any of it (the launcher before limits).  Both run real runner
processes against the run's redis-server, with a one-step task (``true``):

* latency: one task at a time, from ``launch`` to the outcome the runner leaves;
* throughput: ``--local-tasks`` tasks launched at once (no run-slot cap), until every
  outcome is there.

Rounds alternate on and off; the best of each is kept.  ``python -m bench.local_limits``
runs this phase alone (``--quick`` for a short run) and writes no results file.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from bench.measure import in_ms, summarize
from bench.processes import Processes, run_alone
from bench.report import say
from shared.config import Settings
from shared.task.limits import Limits
from shared.task.workload import Workload
from workers.launchers.base import Hooks
from workers.launchers.common.run_dir import read_outcome_file
from workers.launchers.local.launcher import LocalLauncher, runner_alive

PREFIX = "limitbench"


class Uncontained(LocalLauncher):
    """The local launcher as it was before limits: the bwrap sandbox alone."""

    def containment_spec(self, workload: Workload, limits: Limits,
                         uid: int | None) -> dict[str, Any]:
        return {}


def workload() -> Workload:
    return Workload(task_id=f"bench-{uuid.uuid4().hex[:12]}", revision=1, name="bench",
                    steps=(("true",),), env=(), policy_version=0)


def finished(launcher: LocalLauncher, job: Workload) -> bool:
    run_dir = launcher.run_dir(job)
    return read_outcome_file(run_dir) is not None and not runner_alive(run_dir)


def wait_all(launcher: LocalLauncher, jobs: list[Workload], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    pending = list(jobs)
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} local tasks did not finish")
        pending = [j for j in pending if not finished(launcher, j)]
        launcher.reap()
        time.sleep(0.005)


def one_round(launcher: LocalLauncher, sequential: int, burst: int) -> dict[str, Any]:
    hooks = Hooks(started=lambda: None, log=lambda text: None)
    took = []
    for _ in range(sequential):
        job = workload()
        started = time.monotonic()
        launcher.launch(job, hooks)
        wait_all(launcher, [job])
        took.append(time.monotonic() - started)
    jobs = [workload() for _ in range(burst)]
    started = time.monotonic()
    for job in jobs:
        launcher.launch(job, hooks)
    wait_all(launcher, jobs)
    return {"latency_ms": in_ms(summarize(took)),
            "throughput": burst / (time.monotonic() - started)}


def measure(procs: Processes, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="limitbench-"))
    settings = Settings(redis_url=procs.redis_url, key_prefix=PREFIX, work_dir=str(work),
                        local_max_running=0, heartbeat_seconds=5)
    launchers = {"on": LocalLauncher(settings), "off": Uncontained(settings)}
    sequential, burst = (5, 10) if args.quick else (20, 40)
    rounds: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    try:
        one_round(launchers["on"], 1, 2)  # warm the page cache and the filter's compilation
        for i in range(args.rounds):
            for mode in ("off", "on"):
                rounds[mode].append(one_round(launchers[mode], sequential, burst))
            say(f"  round {i + 1}: " + "; ".join(_line(m, rounds[m][-1]) for m in ("off", "on")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    on = min(rounds["on"], key=lambda r: r["latency_ms"]["p50"])
    off = min(rounds["off"], key=lambda r: r["latency_ms"]["p50"])
    on_tp = max(r["throughput"] for r in rounds["on"])
    off_tp = max(r["throughput"] for r in rounds["off"])
    return {"sequential": sequential, "burst": burst, "on": on, "off": off,
            "latency_p50_ratio": on["latency_ms"]["p50"] / off["latency_ms"]["p50"],
            "throughput_ratio": on_tp / off_tp,
            "throughput": {"on": on_tp, "off": off_tp}}


def _line(mode: str, r: dict[str, Any]) -> str:
    return (f"limits {mode}: p50 launch → outcome {r['latency_ms']['p50']:.0f} ms, "
            f"{r['throughput']:.1f} tasks/s")


def unavailable() -> str | None:
    """Why the phase cannot run here (it needs bwrap and what containment needs), or None."""
    if shutil.which("bwrap") is None:
        return "no bwrap"
    try:
        LocalLauncher(Settings(work_dir=tempfile.gettempdir()))
    except Exception as exc:  # the launcher says what is missing
        return str(exc)
    return None


def phase(procs: Processes, client: redis.Redis, args: argparse.Namespace) -> dict[str, Any]:
    why = unavailable()
    if why:
        say(f"  local limits: NOT MEASURED: {why}")
        return {"skipped": why}
    result = measure(procs, args)
    say(f"  limits on / off: launch latency p50 x{result['latency_p50_ratio']:.2f}, "
        f"throughput x{result['throughput_ratio']:.2f}")
    return result


def main(argv: list[str] | None = None) -> None:
    from bench.run import parse_args  # the full run's options; bench.run imports this module

    run_alone(phase, parse_args(argv))


if __name__ == "__main__":
    main()
