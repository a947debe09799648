"""Another user's task while a hostile script is being read: no slower than on a quiet stack.

The whole stack (the API and one worker per stage, the dry-run launcher) on the run's
redis-server.  In turns: a plain one-step task alone (**quiet**), then the same task
POSTed right after a task whose file is the worst of ``bench.doctor.pathological``'s
64 KiB inputs (**beside a hostile one**), and right after one whose file is a plain
64 KiB shell script (**beside a plain script**: what any other user's script costs its
neighbour on a machine of two cores, the hostile one's yardstick), and right after a
task with an env name at the length limit and a script reading a near miss of it
(**beside a hostile name**: the near-miss search of the policy stage).  Each plain
task is timed from its POST to its final state; the median of each over the turns, and
their ratio (target ≤ 1.2: the doctor's budget keeps one reading from holding a worker).
``python -m bench.doctor_neighbour`` (``--quick``) runs it alone.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import time
from typing import Any

import redis

from bench.doctor import pathological
from bench.pipeline import Taskenv
from bench.processes import Processes, run_alone
from bench.report import say
from shared.env.envlist import MAX_NAME_LENGTH
from shared.task import states

PREFIX = "neighbourbench"
HOSTILE = "shell: $( nested"


def post(stack: Taskenv, body: dict[str, Any]) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=30)
    conn.request("POST", "/api/v1/tasks", json.dumps(body),
                 {"Authorization": f"Bearer {stack.token}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    answer = json.loads(resp.read())
    conn.close()
    if resp.status != 202:
        raise RuntimeError(f"POST /api/v1/tasks answered {resp.status}: {answer}")
    return str(answer["id"])


def until_final(stack: Taskenv, task_id: str, timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while (doc := stack.store.find(task_id)) is None or doc["state"] not in states.FINAL:
        if time.monotonic() > deadline:
            raise RuntimeError(f"task {task_id} not final after {timeout} s")
        time.sleep(0.005)
    return time.monotonic()


def plain_body() -> dict[str, Any]:
    return {"name": "neighbour", "steps": [["true"]],
            "env": [{"name": "LEARNING_RATE", "value": "0.01"}]}


def scripted_body(which: str) -> dict[str, Any]:
    """A task whose one file is ``which`` of the 64 KiB inputs (its step runs nothing)."""
    script = pathological()[which]
    return {"name": "scripted", "steps": [["true"]], "env": [],
            "files": [{"path": script["path"], "content": script["content"]}]}


def long_name_body() -> dict[str, Any]:
    """A task with one env name at the length limit and a script reading the same name
    with one character changed: the near-miss search at its widest."""
    name = "TRAINER_" + "LEARNING_RATE_" * ((MAX_NAME_LENGTH - 8) // 14)
    name = (name + "X" * MAX_NAME_LENGTH)[:MAX_NAME_LENGTH]
    near = name[:-2] + name[-1] + name[-2]
    script = f'import os\nprint(os.environ.get("{near}"))\n'
    return {"name": "long-name", "steps": [["python3", "train.py"]],
            "env": [{"name": name, "value": "1"}],
            "files": [{"path": "train.py", "content": script}]}


def measure(procs: Processes, client: redis.Redis, args: argparse.Namespace) -> dict[str, Any]:
    stack = Taskenv(procs, client, args, prefix=PREFIX)
    stack.start_api()
    stack.start_workers()
    turns = 5 if args.quick else 9
    beside = {"beside a hostile one": lambda: scripted_body(HOSTILE),
              "beside a plain script": lambda: scripted_body("plain shell"),
              "beside a hostile name": long_name_body}
    took: dict[str, list[float]] = {"quiet": [], **{name: [] for name in beside}}
    found: dict[str, Any] = {}
    try:
        until_final(stack, post(stack, plain_body()))  # the workers are up and warm
        for _ in range(turns):
            started = time.monotonic()
            took["quiet"].append(until_final(stack, post(stack, plain_body())) - started)
            for name, body in beside.items():
                other = post(stack, body())
                started = time.monotonic()
                took[name].append(until_final(stack, post(stack, plain_body())) - started)
                until_final(stack, other)  # the next one starts quiet again
                if name == "beside a hostile one":
                    found = stack.store.find(other) or {}
    finally:
        stack.stop_workers()
        if stack.api is not None:
            procs.stop([stack.api])
    median = {name: statistics.median(t) * 1000 for name, t in took.items()}
    warned = [w.get("rule") for w in found.get("warnings") or []]
    return {"turns": turns, "median_ms": {k: round(v, 1) for k, v in median.items()},
            "ratio": round(median["beside a hostile one"] / median["quiet"], 3),
            # What any 64 KiB script of another user costs its neighbour on this machine:
            "ratio_beside_plain": round(median["beside a plain script"] / median["quiet"], 3),
            "ratio_beside_long_name": round(median["beside a hostile name"] / median["quiet"],
                                            3),
            "target": 1.2, "hostile_input": HOSTILE, "hostile_final": found.get("state"),
            "hostile_warned_too_complex": "doctor.too_complex" in warned}


def phase(procs: Processes, client: redis.Redis, args: argparse.Namespace) -> dict[str, Any]:
    result = measure(procs, client, args)
    say(f"  another user's task beside a hostile script: median "
        f"{result['median_ms']['beside a hostile one']:.0f} ms against "
        f"{result['median_ms']['quiet']:.0f} ms quiet: x{result['ratio']:.2f} "
        f"(target ≤ {result['target']}); beside a plain 64 KiB script x"
        f"{result['ratio_beside_plain']:.2f}; the hostile task ended {result['hostile_final']};"
        f" beside a name at the length limit x{result['ratio_beside_long_name']:.2f}")
    return result


def main(argv: list[str] | None = None) -> None:
    from bench.run import parse_args  # the full run's options; bench.run imports this module

    run_alone(phase, parse_args(argv))


if __name__ == "__main__":
    main()
