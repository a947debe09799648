"""How long a local step waits to start: launch → the step's first instruction.

Two ways to the same contained step (``date +%s.%N``, which prints when it ran):

* **launcher**: ``LocalLauncher.launch`` as the launch worker calls it: it prepares the
  revision's home and hands its spec to the spare runner the launch before started
  (``workers.launchers.local.spare``), which makes its private home, the task's cgroup
  and network namespace, and starts the step through the exec helper into bwrap with the
  seccomp filter (and reports to Redis after), while the next spare warms up;
* **floor**: the same containment started straight from this process, the least the
  guarantees cost: the task's cgroup made here, then the exec helper (``python -I``,
  rlimits, the cgroup, a new network namespace, the task's user) into bwrap with the
  same filter, arguments and env file.  No runner, no Redis, no private home mount.

One at a time, in turns (a launcher launch, then a floor start), best round of each
kept; the ratio is launcher over floor at p50.  ``python -m bench.local_start``
(``--quick``) runs it alone and writes no results file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
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
from shared.secrets import Cipher, new_key
from shared.store.tasks import TaskStore
from shared.task.limits import Maxima, limits_for
from shared.task.workload import Workload
from workers.launchers.base import Hooks
from workers.launchers.common import containment
from workers.launchers.common.sandbox import bwrap_argv, env_file
from workers.launchers.local.launcher import LocalLauncher, step_env

PREFIX = "startbench"
STEP = ("date", "+%s.%N")


def workload() -> Workload:
    return Workload(task_id=f"start-{uuid.uuid4().hex[:12]}", revision=1, name="bench",
                    steps=(STEP,), env=(), policy_version=0)


def started_at(text: str) -> float | None:
    """The epoch time the step printed, if it has."""
    for line in text.splitlines():
        try:
            return float(line.strip())
        except ValueError:
            continue
    return None


def via_launcher(launcher: LocalLauncher, tasks: TaskStore, timeout: float = 60) -> float:
    job = workload()
    hooks = Hooks(started=lambda: None, log=lambda text: None)
    before = time.time()
    launcher.launch(job, hooks)
    deadline = time.monotonic() + timeout
    while (ran := started_at(tasks.read_log(job.task_id, 1) or "")) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the step never printed its start")
        time.sleep(0.002)
    launcher.reap()
    return ran - before


def via_floor(settings: Settings, abilities: containment.Abilities, bwrap: str,
              home: Path) -> float:
    job = workload()
    limits = limits_for({}, Maxima.from_settings(settings))
    plan = containment.plan_for(limits, settings, abilities)
    plan = containment.Plan(**{**vars(plan), "private_home": False})
    jail = containment.Jail(plan, f"taskenv-floor-{job.task_id}", home)
    before = time.time()
    jail.start()
    env_fd = env_file(step_env(job, "/home/task"))
    argv, fds = jail.wrap(bwrap_argv(STEP, home, None, binary=bwrap,
                                     tmp_bytes=limits.tmp_bytes, share_net=plan.own_netns,
                                     env_fd=env_fd), {})
    try:
        out = subprocess.run(argv, env={}, pass_fds=(*fds, env_fd), capture_output=True,
                             text=True, timeout=60, check=False)
    finally:
        for fd in (*fds, env_fd):
            os.close(fd)
        jail.end()
    ran = started_at(out.stdout)
    if ran is None:
        raise RuntimeError(f"the floor's step printed no start: {out.stdout!r} {out.stderr!r}")
    return ran - before


def measure(procs: Processes, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="startbench-"))
    key = new_key()
    settings = Settings(redis_url=procs.redis_url, key_prefix=PREFIX, work_dir=str(work),
                        local_max_running=0, heartbeat_seconds=5, secret_keys=key)
    launcher = LocalLauncher(settings)
    if launcher.bwrap is None:
        raise RuntimeError("the local launcher runs unsandboxed here")
    tasks = TaskStore(redis.Redis.from_url(procs.redis_url), PREFIX, Cipher.from_setting(key))
    work.chmod(0o711)  # the task user must reach the floor's home, as bwrap binds it
    home = work / "floor-home"
    home.mkdir(mode=0o755)
    os.chown(home, 65534, 65534)
    count = 5 if args.quick else 20
    rounds: dict[str, list[dict[str, Any]]] = {"launcher": [], "floor": []}
    try:
        via_launcher(launcher, tasks)  # warm the page cache and the filter's compilation
        via_floor(settings, launcher.abilities, launcher.bwrap, home)
        for i in range(args.rounds):
            took: dict[str, list[float]] = {"launcher": [], "floor": []}
            for _ in range(count):  # in turns, so both see the same machine
                took["launcher"].append(via_launcher(launcher, tasks))
                took["floor"].append(via_floor(settings, launcher.abilities, launcher.bwrap,
                                               home))
            for mode in rounds:
                rounds[mode].append(in_ms(summarize(took[mode])))
            say(f"  round {i + 1}: launch → first instruction p50 launcher "
                f"{rounds['launcher'][-1]['p50']:.0f} ms, floor "
                f"{rounds['floor'][-1]['p50']:.0f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = {mode: min(found, key=lambda r: r["p50"]) for mode, found in rounds.items()}
    return {"count": count, **best,
            "p50_ratio": best["launcher"]["p50"] / best["floor"]["p50"], "target": 1.5}


def unavailable() -> str | None:
    if shutil.which("bwrap") is None:
        return "no bwrap"
    if os.geteuid() != 0:
        return "not root: the floor makes a cgroup and switches user as the runner does"
    return None


def phase(procs: Processes, client: redis.Redis, args: argparse.Namespace) -> dict[str, Any]:
    why = unavailable()
    if why:
        say(f"  local start: NOT MEASURED: {why}")
        return {"skipped": why}
    result = measure(procs, args)
    say(f"  local start: launcher / floor p50 x{result['p50_ratio']:.2f} (target "
        f"≤ {result['target']})")
    return result


def main(argv: list[str] | None = None) -> None:
    from bench.run import parse_args  # the full run's options; bench.run imports this module

    run_alone(phase, parse_args(argv))


if __name__ == "__main__":
    main()
