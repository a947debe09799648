"""A stack whose parts the fault tests kill and restart: real processes throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import requests

from shared.keys import Keys
from tests.support.stack import FINAL, Stack, api_url, stack_env, start_front, wait_until_serving
from workers.localstack import RedisServer, start_worker, stop_all
from workers.queues import QUEUES

LAUNCHED = "launched"  # the counting task's marker, once per launch


@dataclass
class Report:
    submitted: int = 0
    accepted: list[str] = field(default_factory=list)
    states: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    launched_twice: int = 0
    unfinished: list[str] = field(default_factory=list)  # where each one stands
    failed: list[str] = field(default_factory=list)  # where each failed one ended, and why
    output_lost: int = 0  # succeeded, its step's line lost with a failover's last writes

    def line(self, name: str) -> str:
        return (f"{name}: submitted={self.submitted} accepted={len(self.accepted)} "
                f"finished={sum(self.states.values())} {dict(self.states)} "
                f"lost={self.lost} launched_twice={self.launched_twice}"
                f" output_lost={self.output_lost}"
                + "".join(f"\n  not final: {where}" for where in self.unfinished)
                + "".join(f"\n  failed: {where}" for where in self.failed))


class FaultStack:
    def __init__(self, root: Path, **extra_env: str) -> None:
        self.root = root
        self.logs = root / "processes.log"
        self.redis = RedisServer(root / "redis", appendonly=True)
        self.env = stack_env(self.redis.url, root, **{
            "TASKENV_STUCK_AFTER_SECONDS": "3",
            "TASKENV_RECONCILE_INTERVAL_SECONDS": "1",
            "TASKENV_HEARTBEAT_SECONDS": "1",
            "TASKENV_CONSUMER_STALL_SECONDS": "6",
            **extra_env,
        })
        self.port = int(self.env["TASKENV_PORT"])
        self.token = self.env["TASKENV_ADMIN_TOKEN"]
        # The same HTTP client the integration tests use.
        self.client = Stack(api_url(self.env), redis.Redis.from_url(self.redis.url), self.env,
                            root / "tasks", self.logs)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.supervising = False
        self.restarts = 0  # workers that exited on their own and were started again
        self.lock = threading.Lock()
        self.others: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        self.redis.start()
        for queue in QUEUES:
            self.start_worker(queue)
        self.supervising = True
        in_background(self.supervise)
        self.others = start_front(self.env, self.logs)
        wait_until_serving(self.env)

    def start_worker(self, queue: str) -> None:
        self.workers[queue] = start_worker(queue, self.env, concurrency=2, logfile=self.logs)

    def supervise(self) -> None:
        """Start again a worker that exits on its own, as a service manager would."""
        while self.supervising:
            with self.lock:
                for queue, proc in list(self.workers.items()):
                    if proc.poll() is not None and self.supervising:
                        self.restarts += 1
                        self.start_worker(queue)
            time.sleep(0.5)

    def kill_worker(self, queue: str) -> None:
        """SIGKILL the worker and its pool children, then start a fresh one."""
        with self.lock:
            proc = self.workers[queue]
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            self.start_worker(queue)

    def restart_redis(self, down_for: float = 1.0) -> None:
        """SIGKILL redis-server and start it again on the same port and AOF file."""
        assert self.redis.proc is not None
        self.redis.proc.kill()
        self.redis.proc.wait()
        time.sleep(down_for)
        self.redis.start()

    def stop(self) -> None:
        self.supervising = False
        stop_all([*self.workers.values(), *self.others])
        self.redis.stop()

    def post(self, body: dict, key: str, give_up_after: float = 60.0) -> str | None:
        """POST like a careful client: retry with the same Idempotency-Key until a 202."""
        deadline = time.monotonic() + give_up_after
        while time.monotonic() < deadline:
            try:
                resp = self.client.call("POST", "/api/v1/tasks", json=body,
                                        headers={"Idempotency-Key": key}, timeout=5)
                if resp.status_code == 202:
                    return str(resp.json()["id"])
            except requests.RequestException:
                pass
            time.sleep(0.2)
        return None

    def counting_task(self, n: int) -> dict:
        """A task whose only step prints one marker line: one line in its log per launch.

        Steps run sandboxed and cannot write the host's files: the log is the record.
        """
        return {"name": f"fault-{n}", "steps": [["sh", "-c", f'echo "{LAUNCHED} $TASK_ID"']]}

    def submit(self, count: int, body_for, prefix: str) -> list[str]:
        ids = [self.post(body_for(n), key=f"{prefix}-{n}") for n in range(count)]
        return [task_id for task_id in ids if task_id is not None]

    def states_of(self, ids: list[str]) -> dict[str, str]:
        client = redis.Redis.from_url(self.redis.url, decode_responses=True)
        pipe = client.pipeline(transaction=False)
        for task_id in ids:
            pipe.hget(Keys().task(task_id), "state")
        return {task_id: json.loads(state) if state else state
                for task_id, state in zip(ids, pipe.execute(), strict=True)}

    def wait_final(self, ids: list[str], timeout: float, stalled_for: float = 60.0
                   ) -> dict[str, str]:
        """The tasks' states once all are final, or once none has moved for
        ``stalled_for`` seconds after ``timeout``: a slow machine makes tasks late, and a
        late task is waited for as long as the stack still moves any; a lost one is not."""
        deadline = time.monotonic() + timeout
        last, moved_at = {}, time.monotonic()
        while True:
            states = self.states_of(ids)
            if all(s in FINAL for s in states.values()):
                return states
            if states != last:
                last, moved_at = states, time.monotonic()
            if time.monotonic() > deadline and time.monotonic() - moved_at > stalled_for:
                return states
            time.sleep(0.2)

    def where(self, task_id: str) -> str:
        """Where an unfinished task stands: its record, its messages, its run slot."""
        client = redis.Redis.from_url(self.redis.url, decode_responses=True)
        keys = Keys()
        fields = dict(zip(["state", "revision", "updated_at", "events"],
                          client.hmget(keys.task(task_id),
                                       ["state", "revision", "updated_at", "events"]),
                          strict=True))
        doc = {name: json.loads(value) if value else None for name, value in fields.items()}
        revision = doc["revision"] or 0
        queued = {queue: sum(task_id in m for m in client.lrange(keys.queue(queue), 0, -1))
                  for queue in QUEUES}
        unacked = sum(task_id in m for m in client.hvals(f"{keys.celery_prefix()}unacked"))
        slot = f"{task_id}:{revision}"
        host_queues = [k for k in client.scan_iter(f"{keys.prefix}:slots:*")
                       if client.type(k) == "list" and slot in client.lrange(k, 0, -1)]
        leases = [k for k in client.scan_iter(f"{keys.prefix}:slots:*")
                  if client.type(k) == "zset" and client.zscore(k, slot) is not None]
        last_event = (doc["events"] or [{}])[-1]
        age = time.time() - doc["updated_at"] if doc["updated_at"] else None
        return (f"{task_id} r{revision} {doc['state']} for {age or 0:.0f}s, last event "
                f"{last_event}, messages queued {queued} unacked {unacked}, heartbeat "
                f"{bool(client.exists(keys.beat(task_id, revision)))}, waiting for a slot "
                f"{bool(host_queues)}, holding one {bool(leases)}")

    def launches(self, ids: list[str]) -> Counter[str]:
        """Launches per task id, as the counting task's step printed them in its log."""
        client = redis.Redis.from_url(self.redis.url, decode_responses=True)
        keys = Keys()
        logs = client.mget([keys.log(task_id, 1) for task_id in ids]) if ids else []
        return Counter({task_id: (log or "").count(f"{LAUNCHED} {task_id}")
                        for task_id, log in zip(ids, logs, strict=True)})

    def report(self, submitted: int, ids: list[str], timeout: float = 180.0,
               launches: Counter[str] | None = None, output_may_be_lost: bool = False
               ) -> Report:
        """Wait for the tasks, then count; ``launches`` defaults to the counting task's.

        ``output_may_be_lost``: a succeeded task whose log lacks its step's line is counted
        (``output_lost``) rather than refused: a failover that loses the old primary's last
        writes may take a step's output with them (README "When Redis goes away")."""
        states = self.wait_final(ids, timeout)
        launches = self.launches(ids) if launches is None else launches
        report = Report(submitted=submitted, accepted=ids)
        report.states = Counter(s for s in states.values() if s in FINAL)
        report.lost = sum(1 for s in states.values() if s not in FINAL)
        report.unfinished = [self.where(t) for t, s in states.items() if s not in FINAL]
        report.failed = [self.where(t) for t, s in states.items() if s == "failed"]
        report.launched_twice = sum(1 for task_id in ids if launches[task_id] > 1)
        silent = [t for t, s in states.items() if s == "succeeded" and launches[t] == 0]
        report.output_lost = len(silent) if output_may_be_lost else 0
        succeeded_without_run = {t: launches[t] for t, s in states.items()
                                 if s == "succeeded" and launches[t] != 1
                                 and not (output_may_be_lost and launches[t] == 0)}
        assert not succeeded_without_run, succeeded_without_run
        return report


@pytest.fixture
def fault_stack(tmp_path: Path) -> Iterator[FaultStack]:
    stack = FaultStack(tmp_path)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def in_background(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread
