"""Distributed tasks on podman: submit → all replicas running, for 1 and 4 replicas,
against ``podman kube play`` of the same pod.

taskenv: its API and one worker per queue with ``TASKENV_LAUNCHER=podman``; tasks of
1 and of 4 replicas (step ``sleep 30``, ten user variables) POSTed one after another,
each timed from its submission to its ``running`` event, which the launch stage records
once ``podman kube play --start`` has returned, that is once every replica's container
has started.  The floor: the YAML the launcher renders for the same records (one
container per replica, ``PodmanLauncher.render``) played with ``podman kube play
--start --quiet``, one after another.  The pods are removed after each measurement
(not timed).

``python -m bench.podman_replicas [--quick]`` prints one line per replica count: the
median submit → running of each, and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from bench.inputs import user_env
from bench.measure import wait_until
from bench.pipeline import Taskenv, first_seen
from bench.podman_launch import remove_pods, unavailable
from bench.processes import Processes
from bench.report import say
from shared.config import Settings
from shared.task import states
from shared.task.workload import Workload
from workers.launchers.podman.launcher import PodmanLauncher

PREFIX = "podreplicas"
REPLICAS = (1, 4)


def body(replicas: int) -> dict[str, Any]:
    return {"name": "bench-replicas", "replicas": replicas, "steps": [["sleep", "30"]],
            "env": user_env(10)}


def taskenv_latencies(stack: Taskenv, replicas: int, count: int) -> tuple[list[float], list[Any]]:
    """Each task submitted alone, timed to its running event."""
    took, docs = [], []
    for _ in range(count):
        stack.body = body(replicas)
        send = stack.poster()()
        sent = time.time()
        task_id = send(0)
        if not wait_until(functools.partial(_running, stack, task_id), 1, 60, interval=0.05):
            raise RuntimeError(f"task {task_id} never ran; see {stack.procs.logs}")
        doc = stack.store.get(task_id)
        took.append(first_seen(doc)[states.RUNNING] - sent)
        docs.append(doc)
    return took, docs


def _running(stack: Taskenv, task_id: str) -> int:
    found = stack.store.position(task_id)
    return int(found is not None and found[1] == states.RUNNING)


def floor_latencies(launcher: PodmanLauncher, workloads: list[Workload]) -> list[float]:
    took = []
    with tempfile.TemporaryDirectory(prefix="podreplicas-") as tmp:
        for w in workloads:
            path = Path(tmp) / f"{w.run_name}.yaml"
            path.write_text(launcher.render(w, None))
            started = time.time()
            result = launcher.podman("kube", "play", "--start", "--quiet", str(path))  # bare play
            if result.returncode != 0:
                raise RuntimeError(f"podman kube play failed: {result.stderr[-300:]}")
            took.append(time.time() - started)
    return took


def measure(procs: Processes, client: redis.Redis, args: argparse.Namespace) -> dict[str, Any]:
    stack = Taskenv(procs, client, args, prefix=PREFIX)
    stack.env.update(TASKENV_LAUNCHER="podman", TASKENV_MAX_REPLICAS="4")
    launcher = PodmanLauncher(Settings(launcher="podman"))
    count = 3 if args.quick else 8
    made: list[Workload] = []
    results: dict[str, Any] = {"tasks_per_point": count}
    try:
        stack.start_api()
        stack.start_workers()
        _, warm = taskenv_latencies(stack, 1, 1)  # the first play pays for the image
        made += [Workload.from_doc(d) for d in warm]
        for replicas in REPLICAS:
            took, docs = taskenv_latencies(stack, replicas, count)
            mine = [Workload.from_doc(d) for d in docs]
            made += mine
            remove_pods(launcher, made)
            floor_work = [dataclasses.replace(w, task_id=uuid.uuid4().hex) for w in mine]
            made += floor_work
            floor = floor_latencies(launcher, floor_work)
            remove_pods(launcher, made)
            point = {"taskenv_p50_ms": statistics.median(took) * 1000,
                     "kube_play_p50_ms": statistics.median(floor) * 1000}
            point["ratio"] = point["taskenv_p50_ms"] / point["kube_play_p50_ms"]
            results[f"replicas_{replicas}"] = point
            say(f"  {replicas} replica(s): submit → all running p50 "
                f"{point['taskenv_p50_ms']:.0f} ms; kube play of the same pod "
                f"{point['kube_play_p50_ms']:.0f} ms ({point['ratio']:.2f}x)")
    finally:
        procs.stop([*stack.workers, *([stack.api] if stack.api else [])])
        remove_pods(launcher, made)
    return results


def main(argv: list[str] | None = None) -> None:
    from bench.run import parse_args

    args = parse_args(argv)
    why = unavailable()
    if why:
        raise SystemExit(f"podman replicas: {why}")
    procs = Processes(Path(tempfile.mkdtemp(prefix="taskenv-bench-")))
    ok = False
    try:
        measure(procs, procs.start_redis(), args)
        ok = True
    finally:
        procs.close(ok)


if __name__ == "__main__":
    main()
