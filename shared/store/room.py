"""Room in Redis: new work is refused before Redis is full, so running work can finish.

Redis runs with a ``maxmemory`` and ``noeviction``: past it, every command that may
grow memory is refused with an OOM reply.  Two things follow from that here:

* **Room is kept for what is already accepted.**  A request that adds work (a new
  task, a change of env, a rerun) is refused once Redis uses more than
  ``maxmemory`` less a reserve (``TASKENV_REDIS_RESERVE_PERCENT``, 10 by default).  The
  reserve is what running tasks' state changes, outcomes, heartbeats and queue messages
  still need.  :class:`Room` reads ``INFO memory`` at most once a second per process,
  so a request costs no round trip of its own most of the time.
* **A full Redis is an answer.**  The refusal, and an OOM reply Redis itself gives, is
  :class:`StoreFull`: the API answers 503 ``store_full`` naming the condition, with
  ``Retry-After``.  The workers retry an OOM reply patiently (:func:`patiently`) where
  losing the write would lose what a user was told was accepted; a heartbeat refreshes
  its key's expiry, which Redis allows even when full.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis

from shared.errors import StoreFull

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRY_AFTER = 30  # seconds a refused client is told to wait


@dataclass(frozen=True)
class Memory:
    used: int
    limit: int  # maxmemory; 0: none set

    @classmethod
    def of(cls, info: dict[str, Any]) -> Memory:
        return cls(int(info.get("used_memory", 0)), int(info.get("maxmemory", 0)))

    def over(self, reserve_percent: float) -> bool:
        """Past the share new work may use (never, without a maxmemory)."""
        return bool(self.limit) and self.used >= self.limit * (1 - reserve_percent / 100)


def full(memory: Memory | None, reserve_percent: float) -> StoreFull:
    """The refusal, naming the condition and, when known, the numbers."""
    if memory is None or not memory.limit:
        detail = "Redis answered that it is out of memory (maxmemory reached)"
    else:
        detail = (f"Redis uses {memory.used // 1024} KiB of its maxmemory of "
                  f"{memory.limit // 1024} KiB, and the last {reserve_percent:g}% is kept for "
                  "tasks already accepted")
    return StoreFull(f"the task store is full: {detail}; nothing was stored: retry in a "
                     "while, or ask an operator to free space or raise maxmemory")


@dataclass
class Room:
    """Whether new work may be stored, from ``INFO memory`` read at most every ``every``
    seconds."""

    client: redis.Redis
    reserve_percent: float = 10
    every: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _seen: tuple[float, Memory] | None = field(default=None, repr=False)

    def memory(self) -> Memory:
        now = self.clock()
        if self._seen is None or now - self._seen[0] >= self.every:
            self._seen = (now, self._read())
        return self._seen[1]

    def _read(self) -> Memory:
        try:
            return Memory.of(self.client.info("memory"))  # type: ignore[arg-type]
        except redis.ResponseError:  # INFO refused (a restricted service): no reserve kept
            if self._seen is None:
                log.warning("Redis refuses INFO: no room is kept for running tasks; "
                            "new work is refused only when Redis itself is full")
            return Memory(0, 0)

    def check(self) -> None:
        """Raise :class:`StoreFull` when new work would eat into the reserve."""
        memory = self.memory()
        if memory.over(self.reserve_percent):
            raise full(memory, self.reserve_percent)


def patiently(call: Callable[[], T], patience: float, what: str,
              sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> T:
    """``call()``, retried while Redis answers out-of-memory, for up to ``patience``
    seconds (backing off from 0.1 s to 5 s): an operator freeing space or raising
    maxmemory lets it land.  0: no retry."""
    deadline = clock() + patience
    wait = 0.1
    warned = False
    while True:
        try:
            return call()
        except redis.exceptions.OutOfMemoryError:
            if clock() + wait > deadline:
                raise
            if not warned:
                log.warning("Redis is full (maxmemory): %s waits for room, retrying for up "
                            "to %.0fs", what, patience)
                warned = True
            sleep(wait)
            wait = min(5.0, wait * 2)
