"""The slurm launcher on a real one-node Slurm cluster: reconciler calls per pass at 10 and
1,000 jobs, and submit -> running against a plain ``sbatch`` loop.

It starts the private cluster the tests use (``tests/support/slurm.py``: munged,
slurmctld and slurmd in a temporary directory; root, with Debian's slurm-wlm and munge).

* **Calls per pass.**  ``n`` tasks in ``running`` (fakeredis), each with a held job
  (``sbatch --hold``: queued, never run) carrying the task's comment, as the launcher
  submits them; each measured pass cancels a few of them and runs
  :func:`workers.reconcile.reconcile_once` with :class:`SlurmLauncher`, counting the
  Slurm commands the launcher runs and timing the pass.  The count must not grow with
  ``n``: one ``squeue`` per pass.
* **Submit -> running.**  From the call to ``launch`` (the export file, the program,
  ``sbatch``) until ``squeue`` shows the job ``RUNNING``, against ``sbatch --wrap`` of
  the same one-step job; best and median of a few rounds, in the same run.

``python -m bench.slurm_cost [--quick]`` (200 jobs instead of 1,000).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import fakeredis

from bench.report import say
from shared.config import Settings
from shared.store.tasks import TaskStore
from shared.task import records, states
from shared.task.workload import Workload
from tests.support.slurm import SlurmCluster
from workers.launchers.base import Hooks
from workers.launchers.slurm.launcher import SlurmLauncher
from workers.launchers.slurm.submit import comment
from workers.reconcile import reconcile_once

FINISHED_PER_PASS = 3
NO_HOOKS = Hooks(started=lambda: None, log=lambda _: None)


def held_jobs(cluster: SlurmCluster, tasks: TaskStore, n: int) -> list[tuple[Workload, int]]:
    docs = [{**records.new_task({"name": "train", "steps": [["true"]], "env": []}, "bench"),
             "state": states.RUNNING, "resolved": [], "policy_version": 0} for _ in range(n)]
    tasks.load_many(docs)
    out = []
    for doc in docs:
        workload = Workload.from_doc(doc)
        job = cluster.run("sbatch", "--parsable", "--hold", f"--job-name={workload.run_name}",
                          f"--comment={comment(workload)}", "--output=/dev/null",
                          "--wrap=true").stdout.strip()
        out.append((workload, int(job)))
    return out


def calls_per_pass(cluster: SlurmCluster, root: Path, n: int, passes: int) -> dict[str, Any]:
    tasks = TaskStore(fakeredis.FakeRedis(), f"slurm-bench-{n}")
    jobs = held_jobs(cluster, tasks, n)
    launcher = SlurmLauncher(Settings(slurm_dir=str(root / f"jobs-{n}")))
    reconcile_once(tasks, launcher, lambda *a: None, 120, sweep_running=False)
    before, started = launcher.calls, time.perf_counter()
    for i in range(passes):
        for _, job in jobs[i * FINISHED_PER_PASS:(i + 1) * FINISHED_PER_PASS]:
            cluster.run("scancel", str(job))
        reconcile_once(tasks, launcher, lambda *a: None, 120, sweep_running=False)
    seconds = (time.perf_counter() - started) / passes
    cluster.run("scancel", "--me")
    return {"jobs": n, "slurm_calls_per_pass": (launcher.calls - before) / passes,
            "seconds_per_pass": seconds, "finished_per_pass": FINISHED_PER_PASS}


def wait_running(cluster: SlurmCluster, job: int) -> None:
    while cluster.run("squeue", "--noheader", f"--jobs={job}", "--Format=State").stdout.strip() \
            != "RUNNING":
        time.sleep(0.02)


def submit_to_running(cluster: SlurmCluster, root: Path, rounds: int,
                      replicas: int = 1) -> dict[str, Any]:
    launcher = SlurmLauncher(Settings(slurm_dir=str(root / f"latency-{replicas}")))
    ours: list[float] = []
    plain: list[float] = []
    calls: dict[str, list[float]] = {"taskenv": [], "sbatch": []}  # the submitting call alone
    for i in range(rounds):
        # Alternated: a job submitted right after another waits for the next scheduling cycle.
        for which in ((ours, plain) if i % 2 == 0 else (plain, ours)):
            started = time.perf_counter()
            if which is ours:
                workload = Workload(task_id=os.urandom(8).hex(), revision=1, name="t",
                                    steps=(("sleep", "3"),), env=(), policy_version=0)
                if replicas > 1:
                    workload = dataclasses.replace(workload, replicas=replicas)
                launcher.launch(workload, NO_HOOKS)
                calls["taskenv"].append(time.perf_counter() - started)
                job = launcher.job_id(workload) or 0
            else:
                job = int(cluster.run("sbatch", "--parsable", "--output=/dev/null",
                                      f"--ntasks={replicas}", "--wrap=srun sleep 3")
                          .stdout.strip())
                calls["sbatch"].append(time.perf_counter() - started)
            wait_running(cluster, job)
            which.append(time.perf_counter() - started)
            cluster.run("scancel", "--me")
            time.sleep(3)  # the scheduler idle again, as for the first
    return {"replicas": replicas, "rounds": rounds,
            "taskenv_best": min(ours), "taskenv_median": statistics.median(ours),
            "sbatch_best": min(plain), "sbatch_median": statistics.median(plain),
            "launch_call_median": statistics.median(calls["taskenv"]),
            "sbatch_call_median": statistics.median(calls["sbatch"])}


def has_replicas() -> bool:
    return "replicas" in {f.name for f in dataclasses.fields(Workload)}


def measure(quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="taskenv-slurm-bench-") as tmp:
        root = Path(tmp)
        cluster = SlurmCluster(root / "cluster").start()
        os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
        try:
            rows = [calls_per_pass(cluster, root, n, 2 if quick else 3)
                    for n in (10, 200 if quick else 1_000)]
            latency = [submit_to_running(cluster, root, 3 if quick else 5, n)
                       for n in ((1, 4) if has_replicas() else (1,))]
        finally:
            cluster.stop()
    ratio = rows[1]["slurm_calls_per_pass"] / rows[0]["slurm_calls_per_pass"]
    return {"rows": rows, "calls_ratio_large_vs_small": ratio, "flat": ratio <= 1.0,
            "submit_to_running": latency}


def lines(result: dict[str, Any]) -> list[str]:
    small, large = result["rows"]
    return [
        f"slurm reconciler: {small['slurm_calls_per_pass']:.1f} Slurm calls per pass at "
        f"{small['jobs']:,} jobs ({small['seconds_per_pass'] * 1000:.0f} ms), "
        f"{large['slurm_calls_per_pass']:.1f} at {large['jobs']:,} "
        f"({large['seconds_per_pass'] * 1000:.0f} ms) "
        f"(x{result['calls_ratio_large_vs_small']:.2f}, {'flat' if result['flat'] else 'GROWS'})",
        *(f"submit -> running, {lat['replicas']} replica(s): taskenv best "
          f"{lat['taskenv_best']:.2f}s median {lat['taskenv_median']:.2f}s; plain sbatch best "
          f"{lat['sbatch_best']:.2f}s median {lat['sbatch_median']:.2f}s ({lat['rounds']} "
          f"rounds); the submitting call alone: launch {lat['launch_call_median'] * 1000:.0f} "
          f"ms, sbatch {lat['sbatch_call_median'] * 1000:.0f} ms (medians)"
          for lat in result["submit_to_running"]),
    ]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.slurm_cost",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="200 jobs, not 1,000; fewer rounds")
    args = p.parse_args(argv)
    for text in lines(measure(args.quick)):
        say(text)


if __name__ == "__main__":
    main()
