"""Heartbeats of the launches a process holds, all beaten by one thread.

A launch is alive while its heartbeat key exists: the reconciler relaunches a
``launching`` task (or fails a ``running`` one) only when it is older than
``stuck_after`` and its heartbeat has been missing for longer than a heartbeat lives.
So a launch needs no beat until it has been held a while, and most launches
(a Kubernetes Job or a podman pod submitted, a dry run) are over within a second.

One thread per process (started in the process that uses it: a forked Celery child
gets its own) looks at the held launches every ``TICK``: a launch held for ``TICK``
gets its first beat, then one every ``interval``, all that are due in one pipeline.
A launch released before its first beat costs no Redis command and no thread; one
released after has its beat deleted.  A beat that meets Redis away is tried again
at the next tick, so a launch held across a Redis restart keeps beating once it is
back.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from shared.store.tasks import TaskStore

log = logging.getLogger(__name__)

TICK = 1.0  # seconds: how often the thread looks, and how long a launch goes unbeaten


@dataclass
class Held:
    tasks: TaskStore
    task_id: str
    revision: int
    since: float
    beaten_at: float = 0.0  # 0: never beaten


class Pulse:
    """Beats every held launch every ``interval`` seconds (a beat lives three)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.ttl = max(1, int(interval * 3))
        self._held: dict[int, Held] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, tasks: TaskStore, task_id: str, revision: int) -> Held:
        held = Held(tasks, task_id, revision, time.monotonic())
        with self._lock:
            self._held[id(held)] = held
            self._start()
        return held

    def release(self, held: Held) -> None:
        """Beat it no more, and delete its beat if it had one.  A beat in flight as it is
        released may outlive it by one heartbeat's life: the task is settled by then."""
        with self._lock:
            self._held.pop(id(held), None)
        if held.beaten_at:
            try:
                held.tasks.liveness.stop_heartbeat(held.task_id, held.revision)
            except redis.RedisError:
                pass  # it expires on its own

    def beat_due(self, now: float) -> int:
        """Beat every launch that is due; how many were beaten.  Redis is written outside
        the lock: a launch never waits on Redis to be held or released."""
        with self._lock:
            due = [h for h in self._held.values() if self._is_due(h, now)]
        for tasks, group in _by_store(due).items():
            try:
                tasks.liveness.heartbeats([(h.task_id, h.revision) for h in group], self.ttl)
            except redis.RedisError as exc:
                log.warning("heartbeat not written (%s): trying again in %.0fs", exc, TICK)
                continue
            for h in group:
                h.beaten_at = now
        return len(due)

    def _is_due(self, held: Held, now: float) -> bool:
        if not held.beaten_at:
            return now - held.since >= TICK
        return now - held.beaten_at >= self.interval

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._run, daemon=True, name="heartbeats")
        self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(TICK)
            self.beat_due(time.monotonic())


def _by_store(due: list[Held]) -> dict[TaskStore, list[Held]]:
    groups: dict[TaskStore, list[Held]] = {}
    for held in due:
        groups.setdefault(held.tasks, []).append(held)
    return groups


_pulses: dict[tuple[int, float], Pulse] = {}


def pulse(interval: float) -> Pulse:
    """This process's pulse for ``interval`` (a forked child makes its own)."""
    key = (os.getpid(), interval)
    if key not in _pulses:
        _pulses[key] = Pulse(interval)
    return _pulses[key]


@contextmanager
def keep_alive(tasks: TaskStore, task_id: str, revision: int, interval: float
               ) -> Iterator[None]:
    """Keep the revision's heartbeat alive while a launch is in this process's hands.

    A launch whose heartbeat has expired was abandoned by a process that died.
    """
    beats = pulse(interval)
    held = beats.hold(tasks, task_id, revision)
    try:
        yield
    finally:
        beats.release(held)
