"""Submit → every replica's first line of output, as the step itself prints it on the node.

Each replica's step prints ``FIRST <time.time()>`` as its first line; a measurement is
the latest of those times (every replica has started) minus the moment of submission,
read from the output afterwards, so no log pass of the API's is timed.

* **Slurm, 1 vs 2 nodes** (``--slurm``), on the two-node test cluster
  (``tests/support/slurm.py``): a task of 2 replicas on one node and on two
  (``nodes: 2``), submitted by the Slurm launcher's ``launch`` (the env file, the job
  program, ``sbatch``), against the floor of the same shape: ``sbatch`` of a shell
  script running ``srun --nodes=N --ntasks=2`` of the same Python one-liner, no
  sandbox, no holder, no job network.
* **podman, 1 vs 4 replicas** (``--podman``): the whole stack (API, one worker per
  queue, ``TASKENV_LAUNCHER=podman``) from ``POST`` on, against ``podman kube play``
  of the pod the launcher renders for the same records.

Rounds alternate taskenv and the floor, with the scheduler left idle between jobs (a
job submitted right after another waits for Slurm's next scheduling cycle).  Targets:
2 nodes ≤ 1.2 × 1 node (taskenv's), and taskenv ≤ 1.2 × its floor at each point.

``python -m bench.first_line [--quick] [--slurm | --podman]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.report import say
from shared.config import Settings
from shared.task.workload import Workload
from tests.support.slurm import SlurmCluster
from workers.launchers.base import Hooks
from workers.launchers.slurm.launcher import SlurmLauncher

TARGET = 1.2
PRINT = "import time; print('FIRST', repr(time.time()), flush=True)"
FIRST = re.compile(r"FIRST (\d+\.\d+)")
NO_HOOKS = Hooks(started=lambda: None, log=lambda _: None)
IDLE_SECONDS = 1.5


def first_lines(text: str, expected: int) -> float | None:
    """The latest ``FIRST`` time of ``expected`` replicas; None while some are missing."""
    found = [float(t) for t in FIRST.findall(text)]
    return max(found) if len(found) >= expected else None


def wait_for(read: Any, expected: int, timeout: float = 120.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = first_lines(read(), expected)
        if found is not None:
            return found
        time.sleep(0.05)
    raise RuntimeError(f"fewer than {expected} first lines within {timeout:.0f} s: {read()!r}")


# -- Slurm ---------------------------------------------------------------------------------

def slurm_taskenv(launcher: SlurmLauncher, nodes: int) -> float:
    workload = Workload(task_id=uuid.uuid4().hex, revision=1, name="first-line",
                        steps=(("python3", "-c", PRINT),), env=(), policy_version=0,
                        replicas=2, nodes=nodes)
    sent = time.time()
    launcher.launch(workload, NO_HOOKS)
    out = launcher.run_dir(workload) / "output.log"
    return wait_for(lambda: out.read_text() if out.exists() else "", 2) - sent


def slurm_floor(cluster: SlurmCluster, root: Path, nodes: int) -> float:
    work = root / f"floor-{uuid.uuid4().hex[:8]}"
    work.mkdir(mode=0o755)
    script = work / "job.sh"
    script.write_text(f"#!/bin/sh\nexec srun --nodes={nodes} --ntasks=2 /usr/bin/python3 -I -c "
                      f"\"{PRINT}\"\n")
    script.chmod(0o755)
    out = work / "out.txt"
    sent = time.time()
    cluster.run("sbatch", "--parsable", f"--nodes={nodes}", "--ntasks=2", f"--output={out}",
                f"--chdir={work}", str(script))
    return wait_for(lambda: out.read_text() if out.exists() else "", 2) - sent


def settle(cluster: SlurmCluster) -> None:
    """Until no job of ours is left, then a pause: the next job meets an idle scheduler."""
    deadline = time.monotonic() + 60
    while cluster.run("squeue", "--noheader", "--me").stdout.strip():
        if time.monotonic() > deadline:
            cluster.run("scancel", "--me")
        time.sleep(0.1)
    time.sleep(IDLE_SECONDS)


def measure_slurm(rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="taskenv-first-line-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        cluster = SlurmCluster(root / "cluster", nodes=2).start()
        os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
        launcher = SlurmLauncher(Settings(slurm_dir=str(root / "jobs")))
        took: dict[str, list[float]] = {k: [] for k in
                                        ("taskenv_1", "floor_1", "taskenv_2", "floor_2")}
        try:
            slurm_taskenv(launcher, 2)  # warm: python, bwrap and the nodes' caches
            settle(cluster)
            for i in range(rounds):
                order = list(took) if i % 2 == 0 else list(reversed(took))
                for key in order:
                    which, nodes = key.rsplit("_", 1)
                    took[key].append(slurm_taskenv(launcher, int(nodes)) if which == "taskenv"
                                     else slurm_floor(cluster, root, int(nodes)))
                    settle(cluster)
        finally:
            cluster.stop()
    med = {k: statistics.median(v) for k, v in took.items()}
    return {"rounds": rounds, "median_seconds": med, "all_seconds": took,
            "two_vs_one_node": med["taskenv_2"] / med["taskenv_1"],
            "vs_floor_1_node": med["taskenv_1"] / med["floor_1"],
            "vs_floor_2_nodes": med["taskenv_2"] / med["floor_2"]}


def slurm_lines(result: dict[str, Any]) -> list[str]:
    med = result["median_seconds"]
    verdict = {k: "MET" if result[k] <= TARGET else "MISSED"
               for k in ("two_vs_one_node", "vs_floor_1_node", "vs_floor_2_nodes")}
    return [
        f"slurm, 2 replicas, submit -> every replica's first line (medians of "
        f"{result['rounds']} rounds): 1 node {med['taskenv_1']:.2f} s (bare sbatch+srun "
        f"{med['floor_1']:.2f} s, x{result['vs_floor_1_node']:.2f} {verdict['vs_floor_1_node']}); "
        f"2 nodes {med['taskenv_2']:.2f} s (bare {med['floor_2']:.2f} s, "
        f"x{result['vs_floor_2_nodes']:.2f} {verdict['vs_floor_2_nodes']})",
        f"slurm, 2 nodes vs 1: x{result['two_vs_one_node']:.2f} (target <= {TARGET}) "
        f"{verdict['two_vs_one_node']}",
    ]


# -- podman ----------------------------------------------------------------------------------
# The runtime image is busybox: no clock finer than seconds, so the step prints the kernel's
# uptime (the host's: a container has no clock namespace), in hundredths of a second.
UPTIME_STEP = ("sh", "-c", "read up rest < /proc/uptime; echo FIRST $up; sleep 5")
PODMAN_REPLICAS = (1, 4)
PHASES: dict[int, list[dict[str, float]]] = {}  # when each task reached each state


def uptime() -> float:
    with open("/proc/uptime") as found:
        return float(found.read().split()[0])


def pod_logs(launcher: Any, name: str) -> str:
    done = launcher.podman("pod", "logs", name)
    return str(done.stdout) if done.returncode == 0 else ""


def podman_taskenv(stack: Any, launcher: Any, replicas: int) -> tuple[float, Workload]:
    from bench.inputs import user_env

    stack.body = {"name": "first-line", "replicas": replicas, "steps": [list(UPTIME_STEP)],
                  "env": user_env(10)}
    send = stack.poster()()
    sent, wall = uptime(), time.time()
    task_id = send(0)
    deadline = time.monotonic() + 120
    while (doc := stack.store.find(task_id)) is None or doc.get("resolved") is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"task {task_id} was never resolved")
        time.sleep(0.05)
    workload = Workload.from_doc(doc)
    took = wait_for(lambda: pod_logs(launcher, workload.run_name), replicas) - sent
    from bench.pipeline import first_seen
    seen = first_seen(stack.store.find(task_id) or doc)
    PHASES.setdefault(replicas, []).append(
        {state: at - wall for state, at in seen.items()})
    return took, workload


def podman_floor(launcher: Any, workload: Workload, root: Path,
                 capped: bool = False) -> tuple[float, Workload]:
    """``kube play --start`` of the same pod; ``capped``: made stopped, its pids cgroup
    capped, then started, as the launcher does (kube play takes no pids limit)."""
    import dataclasses

    from workers.launchers.podman.launcher import played_pod_id

    same = launcher.with_image(dataclasses.replace(workload, task_id=uuid.uuid4().hex))
    path = root / f"{same.run_name}.yaml"
    path.write_text(launcher.render(same, None))
    sent = uptime()
    start = "--start=false" if capped else "--start"
    played = launcher.podman("kube", "play", start, "--quiet", str(path))
    if played.returncode != 0:
        raise RuntimeError(f"podman kube play failed: {played.stderr[-300:]}")
    if capped:
        launcher.cap_processes(same, played_pod_id(played.stdout))
        launcher.podman("pod", "start", same.run_name)
    return wait_for(lambda: pod_logs(launcher, same.run_name), workload.replicas) - sent, same


def measure_podman(rounds: int) -> dict[str, Any]:
    from bench.pipeline import Taskenv
    from bench.podman_launch import remove_pods, unavailable
    from bench.processes import Processes
    from bench.run import parse_args
    from workers.launchers.podman.launcher import PodmanLauncher

    why = unavailable()
    if why:
        raise SystemExit(f"podman: {why}")
    procs = Processes(Path(tempfile.mkdtemp(prefix="taskenv-bench-")))
    stack = Taskenv(procs, procs.start_redis(), parse_args(["--quick"]), prefix="firstline")
    stack.env.update(TASKENV_LAUNCHER="podman", TASKENV_MAX_REPLICAS="4")
    launcher = PodmanLauncher(Settings(launcher="podman"))
    took: dict[str, list[float]] = {f"{w}_{n}": [] for n in PODMAN_REPLICAS
                                    for w in ("taskenv", "floor", "capped")}
    made: list[Workload] = []
    ok = False
    try:
        stack.start_api()
        stack.start_workers()
        made.append(podman_taskenv(stack, launcher, 1)[1])  # warm: the image, the workers
        remove_pods(launcher, made)
        with tempfile.TemporaryDirectory(prefix="first-line-") as tmp:
            for _ in range(rounds):
                for replicas in PODMAN_REPLICAS:
                    seconds, mine = podman_taskenv(stack, launcher, replicas)
                    made.append(mine)
                    remove_pods(launcher, made)
                    took[f"taskenv_{replicas}"].append(seconds)
                    for kind in ("floor", "capped"):
                        floor, same = podman_floor(launcher, mine, Path(tmp), kind == "capped")
                        made.append(same)
                        remove_pods(launcher, made)
                        took[f"{kind}_{replicas}"].append(floor)
        ok = True
    finally:
        procs.stop([*stack.workers, *([stack.api] if stack.api else [])])
        remove_pods(launcher, made)
        procs.close(ok)
    med = {k: statistics.median(v) for k, v in took.items()}
    return {"rounds": rounds, "median_seconds": med, "all_seconds": took,
            **{f"vs_floor_{n}": med[f"taskenv_{n}"] / med[f"floor_{n}"] for n in PODMAN_REPLICAS},
            **{f"vs_capped_{n}": med[f"taskenv_{n}"] / med[f"capped_{n}"]
               for n in PODMAN_REPLICAS},
            "four_vs_one_replica": med["taskenv_4"] / med["taskenv_1"],
            "states_after_post_median": {
                n: {state: statistics.median(p[state] for p in PHASES[n] if state in p)
                    for state in PHASES[n][-1]} for n in PODMAN_REPLICAS}}


def podman_lines(result: dict[str, Any]) -> list[str]:
    med = result["median_seconds"]
    return [f"podman, {n} replica(s), POST -> every replica's first line (medians of "
            f"{result['rounds']} rounds): taskenv {med[f'taskenv_{n}']:.2f} s, kube play of the "
            f"same pod {med[f'floor_{n}']:.2f} s (x{result[f'vs_floor_{n}']:.2f} "
            f"{'MET' if result[f'vs_floor_{n}'] <= TARGET else 'MISSED'}); made stopped, "
            f"capped and started as the launcher does {med[f'capped_{n}']:.2f} s "
            f"(x{result[f'vs_capped_{n}']:.2f})"
            for n in PODMAN_REPLICAS] + [
        f"podman, 4 replicas vs 1 (taskenv): x{result['four_vs_one_replica']:.2f}"] + [
        f"  {n} replica(s), each state reached after POST (median ms): " + ", ".join(
            f"{state} {at * 1000:.0f}" for state, at in sorted(
                result["states_after_post_median"][n].items(), key=lambda kv: kv[1]))
        for n in PODMAN_REPLICAS]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.first_line",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    p.add_argument("--slurm", action="store_true", help="only the Slurm part")
    p.add_argument("--podman", action="store_true", help="only the podman part")
    p.add_argument("--out", type=Path, help="write the results as JSON here too")
    args = p.parse_args(argv)
    both = not (args.slurm or args.podman)
    results: dict[str, Any] = {}
    if args.slurm or both:
        results["slurm"] = measure_slurm(3 if args.quick else 7)
        for text in slurm_lines(results["slurm"]):
            say(text)
    if args.podman or both:
        results["podman"] = measure_podman(3 if args.quick else 7)
        for text in podman_lines(results["podman"]):
            say(text)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
