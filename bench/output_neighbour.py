"""Another tenant's task beside one that floods its output with a hostile secret.

The local launcher as it runs (real runners, their containment, the run's redis-server).
A plain one-step task (``true``), from ``launch`` to the outcome its runner leaves, is
timed in turns: alone (**quiet**), and while a task limited to ``cpu: 100m`` prints as
fast as it can a run of ``A`` with a secret of ``"A" * 40_000 + "B"`` in its env (**beside
a flood**): the worst input for redaction, which its runner reads, redacts and stores.
The runner is charged to the flooding task's own cpu quota (docs/design.md, "What a
tenant's input costs the platform"), so the neighbour's time should not move: the
median of each, and their ratio (target ≤ 1.2, ``bench/targets.py``).

``python -m bench.output_neighbour [--quick]`` runs it alone.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from bench.local_limits import finished, unavailable, wait_all
from bench.processes import Processes, run_alone
from bench.report import say
from shared.config import Settings
from shared.policy.model import Resolved
from shared.task.workload import Resources, Workload
from workers.launchers.base import Hooks
from workers.launchers.local.launcher import LocalLauncher

PREFIX = "outputneighbour"
SECRET = "A" * 40_000 + "B"
FLOOD = "yes AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"


def plain() -> Workload:
    return Workload(task_id=f"plain-{uuid.uuid4().hex[:12]}", revision=1, name="plain",
                    steps=(("true",),), env=(), policy_version=0)


def flood(seconds: int) -> Workload:
    """Prints a run of ``A`` for ``seconds``, at a tenth of a core, with the secret."""
    return Workload(task_id=f"flood-{uuid.uuid4().hex[:12]}", revision=1, name="flood",
                    steps=(("sh", "-c", f"timeout {seconds} {FLOOD}; true"),),
                    env=(Resolved.of_user("HF_TOKEN", SECRET, True),), policy_version=0,
                    resources=Resources(cpu="100m"))


def timed(launcher: LocalLauncher, hooks: Hooks) -> float:
    job = plain()
    started = time.monotonic()
    launcher.launch(job, hooks)
    wait_all(launcher, [job])
    return time.monotonic() - started


def measure(procs: Processes, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="outputneighbour-"))
    settings = Settings(redis_url=procs.redis_url, key_prefix=PREFIX, work_dir=str(work),
                        local_max_running=0, heartbeat_seconds=5)
    launcher = LocalLauncher(settings)
    hooks = Hooks(started=lambda: None, log=lambda text: None)
    turns = 5 if args.quick else 11
    took: dict[str, list[float]] = {"quiet": [], "beside a flood": []}
    try:
        timed(launcher, hooks)  # warm: a spare runner is waiting from here on
        for _ in range(turns):
            took["quiet"].append(timed(launcher, hooks))
            noisy = flood(seconds=4)
            launcher.launch(noisy, hooks)
            time.sleep(1.0)  # the flood is under way (its runner redacting) before timing
            took["beside a flood"].append(timed(launcher, hooks))
            wait_all(launcher, [noisy], timeout=120)
            assert finished(launcher, noisy)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median = {name: statistics.median(t) * 1000 for name, t in took.items()}
    return {"turns": turns, "median_ms": {k: round(v, 1) for k, v in median.items()},
            "ratio": round(median["beside a flood"] / median["quiet"], 3), "target": 1.2}


def phase(procs: Processes, client: redis.Redis, args: argparse.Namespace) -> dict[str, Any]:
    why = unavailable()
    if why:
        say(f"  a task beside an output flood: NOT MEASURED: {why}")
        return {"skipped": why}
    result = measure(procs, args)
    say(f"  another tenant's task beside a 100m task flooding output with a 40,001-character "
        f"secret: median {result['median_ms']['beside a flood']:.0f} ms against "
        f"{result['median_ms']['quiet']:.0f} ms quiet: x{result['ratio']:.2f} "
        f"(target ≤ {result['target']})")
    return result


def main(argv: list[str] | None = None) -> None:
    from bench.run import parse_args  # the full run's options; bench.run imports this module

    run_alone(phase, parse_args(argv))


if __name__ == "__main__":
    main()
