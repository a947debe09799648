"""taskenv's stack as the run drives it: the API (``python -m api``), one worker per
queue (``TASKENV_LAUNCHER=dryrun``), and when each task reached each state."""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import uuid
from typing import Any

import redis

from bench.inputs import policy_body, task_body
from bench.measure import (
    CpuMeter,
    RedisCounter,
    SenderFactory,
    http_poster,
    in_ms,
    latency_report,
    measured,
    submit,
    summarize,
    wait_until,
)
from bench.processes import Processes
from shared import state_scores
from shared.access.tokens import PREFIX as TOKEN_PREFIX
from shared.keys import Keys
from shared.store.tasks import TaskStore
from shared.task import states
from workers.localstack import free_port, start_api, start_worker, wait_http
from workers.queues import QUEUES

PREFIX = "taskenv"
FINAL_STATES = (states.SUCCEEDED, states.FAILED, states.REJECTED)
# The states whose first time (revision 1) marks a task's progress, in order.
MARKED = (states.VALIDATED, states.RESOLVED, states.LAUNCHING, states.SUCCEEDED)

Marks = dict[str, dict[str, float]]  # state -> task id -> time it was reached


class Taskenv:
    """The API and the workers under one key prefix, and how far its tasks got."""

    def __init__(self, procs: Processes, client: redis.Redis, args: argparse.Namespace,
                 prefix: str = PREFIX) -> None:
        self.procs, self.client, self.args = procs, client, args
        self.port = free_port()
        self.token = TOKEN_PREFIX + uuid.uuid4().hex
        self.env = {"TASKENV_REDIS_URL": procs.redis_url, "TASKENV_LAUNCHER": "dryrun",
                    "TASKENV_PORT": str(self.port), "TASKENV_ADMIN_TOKEN": self.token,
                    "TASKENV_KEY_PREFIX": prefix,
                    "TASKENV_WORK_DIR": str(procs.work / "tasks"),
                    # Quotas counted as usual (their cost is measured), never reached.
                    "TASKENV_QUOTA_CREATES_PER_MINUTE": str(10**9),
                    "TASKENV_QUOTA_UNFINISHED_TASKS": str(10**9)}
        self.body = task_body()  # what every POST carries
        self.keys = Keys(prefix)
        self.store = TaskStore(client, prefix)
        self.counter = RedisCounter(client)
        self.api: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_api(self) -> subprocess.Popen[bytes]:
        self.api = self.procs.add(start_api(self.env, self.procs.logs))
        wait_http(f"http://127.0.0.1:{self.port}/healthz")
        self.put_policy()
        return self.api

    def start_workers(self) -> None:
        self.workers = [self.procs.add(start_worker(q, self.env, self.args.concurrency,
                                                    self.args.pool, self.procs.logs))
                        for q in QUEUES]

    def stop_workers(self) -> None:
        self.procs.stop(self.workers)
        self.workers = []

    def cpu(self) -> CpuMeter:
        groups = {"api": self.api.pid} if self.api else {}
        groups.update({f"worker {q}": w.pid for q, w in zip(QUEUES, self.workers, strict=False)})
        return CpuMeter(groups, self.procs.redis_pid())

    def put_policy(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("PUT", "/api/v1/policy", json.dumps(policy_body()),
                     {"Authorization": f"Bearer {self.token}",
                      "Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        if resp.status != 200:
            raise RuntimeError(f"PUT /api/v1/policy answered {resp.status}: {body[:300]!r}")

    def poster(self) -> SenderFactory:
        return http_poster(self.port, "/api/v1/tasks", self.body, self.token, 202)

    def finished(self) -> int:
        return sum(int(self.counter.call("ZCOUNT", self.keys.by_state(),
                                         *state_scores.above(s))) for s in FINAL_STATES)

    def warm_up(self, backlog: int = 0) -> None:
        submit(self.poster(), 30, 2)
        if not wait_until(self.finished, backlog + 30, 120, interval=0.25):
            raise RuntimeError(f"taskenv workers did not come up; see {self.procs.logs}")

    def docs(self, ids: list[str]) -> list[dict[str, Any]]:
        """The current records, read as the workers read them (after the run: not timed)."""
        return [doc for task_id in ids if (doc := self.store.find(task_id)) is not None]

    def marks(self, ids: list[str]) -> tuple[Marks, dict[str, int], dict[str, Any]]:
        """When each task reached each state (first event of revision 1), its final states,
        and the time spent between consecutive states."""
        marks: Marks = {s: {} for s in MARKED}
        finals: dict[str, int] = {}
        gaps: dict[str, list[float]] = {}
        for doc in self.docs(ids):
            finals[doc["state"]] = finals.get(doc["state"], 0) + 1
            seen = first_seen(doc)
            for s in MARKED:
                if s in seen:
                    marks[s][doc["id"]] = seen[s]
            chain = (states.PENDING, *MARKED)
            for a, b in zip(chain, chain[1:], strict=False):
                if a in seen and b in seen:
                    gaps.setdefault(f"{a}->{b}", []).append(seen[b] - seen[a])
        return marks, finals, {k: in_ms(summarize(v)) for k, v in gaps.items()}

    def load(self, name: str, count: int, rate: float | None) -> dict[str, Any]:
        already = self.finished()
        out = measured(name, self.poster(), count, self.args.threads, self.finished, already,
                       max(90.0, count / 5), self.counter, self.cpu(), rate)
        sub = out.pop("_sub")
        marks, finals, stage_ms = self.marks(sub.ids)
        out.update(latency_report(sub, {"resolved": marks[states.RESOLVED],
                                        "launching": marks[states.LAUNCHING],
                                        "succeeded": marks[states.SUCCEEDED]}))
        out["final_states"] = finals
        out["between_states_ms"] = stage_ms
        # Throughput to the end of the last stage; latency to the start of the last stage,
        # which is where the baseline's third hop writes its timestamp.
        out["throughput"] = out.get("throughput_to_succeeded", 0.0)
        out["latency_ms"] = out["submit_to_launching_ms"]
        out["_ids"] = sub.ids
        return out


def first_seen(doc: dict[str, Any]) -> dict[str, float]:
    """When the task's first revision first reached each state."""
    seen: dict[str, float] = {}
    for event in doc.get("events", []):
        if event["revision"] == 1:
            seen.setdefault(event["state"], event["at"])
    return seen
