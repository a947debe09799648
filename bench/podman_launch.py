"""Real-launcher throughput: tasks with a trivial step through the podman launcher,
against a loop of ``podman kube play`` of the same pods (the floor).

taskenv: its API and one worker per queue with ``TASKENV_LAUNCHER=podman`` (image
``localhost/taskenv-runtime:latest``, built by ``deploy/image/build.sh``); 50 tasks
(steps ``true``, ten user variables, the run's policy) POSTed at once; each is timed
from its submission to its ``running`` event, which the launch stage records when
``podman kube play --start`` has returned.  The floor: the YAML the launcher renders
(``PodmanLauncher.render``, from ``shared.task.manifest``) for the same records under new
ids, each played with ``podman kube play --start --quiet``, as many at once as the
launch worker runs (its concurrency), all due at once.  Rounds alternate; the fastest
of each is kept; the pods a round made are removed before the next (not timed).

``python -m bench.podman_launch`` runs this phase alone (with its own redis-server and
the full run's options, e.g. ``--rounds 3``), prints the rounds and the verdict, and
writes no results file.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import redis

from bench.inputs import user_env
from bench.measure import best, in_ms, submit, summarize, wait_until
from bench.pipeline import Taskenv, first_seen
from bench.processes import Processes, run_alone
from bench.report import say
from shared import state_scores
from shared.config import DEFAULT_IMAGE, Settings
from shared.task import states
from shared.task.workload import Workload
from workers.launchers.podman.launcher import PodmanLauncher

PREFIX = "podbench"
TASKS = 50
RATIO = 0.8  # taskenv's throughput >= this x the floor's


def unavailable() -> str | None:
    """Why the podman phase cannot run here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed"
    found = subprocess.run(["podman", "image", "exists", DEFAULT_IMAGE], check=False,
                           capture_output=True)
    if found.returncode != 0:
        return f"image {DEFAULT_IMAGE} is missing (deploy/image/build.sh builds it)"
    return None


def body() -> dict[str, Any]:
    return {"name": "bench-podman", "steps": [["true"]], "env": user_env(10)}


def _running(stack: Taskenv) -> int:
    low, top = state_scores.above(states.RUNNING)
    return int(stack.counter.call("ZCOUNT", stack.keys.by_state(), low, top))


def taskenv_round(stack: Taskenv, count: int, threads: int) -> tuple[dict[str, Any], list[Any]]:
    before = _running(stack)
    sub = submit(stack.poster(), count, threads)
    complete = wait_until(lambda: _running(stack), before + len(sub.ids), 60 + 5 * count,
                          interval=0.2)
    docs = stack.docs(sub.ids)
    at = {d["id"]: seen for d in docs if (seen := first_seen(d).get(states.RUNNING))}
    lat = [at[i] - t for i, t in zip(sub.ids, sub.submitted_at, strict=True) if i in at]
    last = max(at.values(), default=sub.first)
    return ({"tasks": len(sub.ids), "complete": complete, "errors": sub.errors,
             "throughput": len(lat) / (last - sub.first) if last > sub.first else 0.0,
             "submit_to_running_ms": in_ms(summarize(lat))}, docs)


def floor_round(launcher: PodmanLauncher, workloads: list[Workload],
                parallel: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="podbench-") as tmp:
        files = []
        for w in workloads:
            path = Path(tmp) / f"{w.run_name}.yaml"
            path.write_text(launcher.render(w, None))
            files.append(path)
        started = time.time()

        def play(path: Path) -> float:
            result = launcher.podman("kube", "play", "--start", "--quiet", str(path))  # bare play
            if result.returncode != 0:
                raise RuntimeError(f"podman kube play failed: {result.stderr[-300:]}")
            return time.time() - started

        with ThreadPoolExecutor(parallel) as pool:
            took = list(pool.map(play, files))
    return {"tasks": len(took), "throughput": len(took) / max(took),
            "submit_to_running_ms": in_ms(summarize(took))}


def remove_pods(launcher: PodmanLauncher, workloads: list[Workload]) -> None:
    names = [w.run_name for w in workloads]
    for start in range(0, len(names), 25):
        launcher.podman("pod", "rm", "--force", "--ignore", *names[start:start + 25])


def _floor_workloads(launcher: PodmanLauncher, docs: list[Any]) -> list[Workload]:
    """The same pods as taskenv's tasks got, under new task ids."""
    return [launcher.with_image(dataclasses.replace(Workload.from_doc(d),
                                                    task_id=uuid.uuid4().hex)) for d in docs]


def warm_up(stack: Taskenv, launcher: PodmanLauncher) -> None:
    warm, docs = taskenv_round(stack, 4, 2)
    remove_pods(launcher, [Workload.from_doc(d) for d in docs])
    if not warm["complete"]:
        raise RuntimeError(f"taskenv's podman launches did not come up; see {stack.procs.logs}")


def measure(procs: Processes, client: redis.Redis, args: argparse.Namespace) -> dict[str, Any]:
    stack = Taskenv(procs, client, args, prefix=PREFIX)
    stack.env["TASKENV_LAUNCHER"] = "podman"
    stack.body = body()
    launcher = PodmanLauncher(Settings(launcher="podman"))
    rounds: dict[str, list[dict[str, Any]]] = {"pipeline": [], "floor": []}
    made: list[Workload] = []
    try:
        stack.start_api()
        stack.start_workers()
        warm_up(stack, launcher)
        for i in range(args.rounds):
            pipe, docs = taskenv_round(stack, TASKS, args.threads)
            made += [Workload.from_doc(d) for d in docs if d.get("resolved") is not None]
            remove_pods(launcher, made)
            floor_work = _floor_workloads(launcher, docs)
            made += floor_work
            floor = floor_round(launcher, floor_work, args.concurrency)
            remove_pods(launcher, made)
            say(f"  round {i + 1}: {_line(pipe, floor)}")
            rounds["pipeline"].append(pipe)
            rounds["floor"].append(floor)
    finally:
        procs.stop([*stack.workers, *([stack.api] if stack.api else [])])
        remove_pods(launcher, made)
    pipe, floor = best(rounds["pipeline"]), best(rounds["floor"])
    return {"tasks": TASKS, "parallel_plays": args.concurrency, "image": DEFAULT_IMAGE,
            "pipeline": pipe, "floor": floor,
            "rounds": {k: [r["throughput"] for r in v] for k, v in rounds.items()},
            "throughput_ratio": pipe["throughput"] / floor["throughput"],
            "p50_ratio": (pipe["submit_to_running_ms"]["p50"]
                          / floor["submit_to_running_ms"]["p50"]),
            "limit": RATIO}


def _line(pipe: dict[str, Any], floor: dict[str, Any]) -> str:
    return (f"taskenv {pipe['throughput']:.2f} tasks/s, p50 submit → running "
            f"{pipe['submit_to_running_ms']['p50']:.0f} ms; kube play loop "
            f"{floor['throughput']:.2f} tasks/s, p50 {floor['submit_to_running_ms']['p50']:.0f} ms")


def phase(procs: Processes, client: redis.Redis, args: argparse.Namespace) -> dict[str, Any]:
    """The podman measurement, or why it was left out (said plainly in the output)."""
    if args.podman is False:
        say("  podman launcher: NOT MEASURED (--no-podman)")
        return {"skipped": "--no-podman"}
    why = unavailable()
    if why and args.podman:
        raise RuntimeError(f"--podman: {why}")
    if why:
        say(f"  podman launcher: NOT MEASURED: {why}")
        return {"skipped": why}
    return measure(procs, client, args)


def main(argv: list[str] | None = None) -> None:
    from bench.run import parse_args  # the full run's options; bench.run imports this module

    args = parse_args(argv)
    args.podman = True  # asked for by name: a missing podman or image is an error
    result = run_alone(phase, args)
    ratio = result["throughput_ratio"]
    say(f"best: {_line(result['pipeline'], result['floor'])}")
    say(f"podman launcher throughput {ratio:.2f} x the kube play loop (>= {RATIO}): "
        f"{'MET' if ratio >= RATIO else 'MISSED'}")


if __name__ == "__main__":
    main()
