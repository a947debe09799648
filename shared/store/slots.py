"""A host's run slots: at most ``cap`` local tasks run at once, the others wait in order.

Held in Redis, not in a process: every launch worker and runner of the host sees the
same slots.  A running revision holds a **lease** (a sorted set scored by when the lease
ends), which its runner renews with its heartbeat; a runner that dies stops renewing,
and its slot comes back once the lease ends.  A revision that finds no free slot joins
the host's **queue** (a list, oldest first) once, and waits there without costing
anything: no message, no process, no look from the reconciler per waiting task.  When a
slot frees (a runner ends, a lease lapses), :meth:`HostSlots.promote` gives it to the
oldest waiting revision, reserving the lease for it before its launch is sent, so no
later arrival overtakes it.

Acquiring, renewing and promoting are single Lua scripts: two launches racing for the
last slot cannot both get it.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from shared.keys import Keys

# KEYS: leases, queue.  ARGV: member, now, lease end, cap.
# Returns 1 when the member holds a slot (already, or now), else 0.  It may take a free
# slot only if nobody waits, or it is the oldest waiting.
ACQUIRE = r"""
local leases, queue = KEYS[1], KEYS[2]
local member, now, lease_end, cap = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
if redis.call('ZSCORE', leases, member) then
  redis.call('ZADD', leases, lease_end, member)
  return 1
end
local head = redis.call('LINDEX', queue, 0)
if redis.call('ZCARD', leases) < cap and (not head or head == member) then
  redis.call('LREM', queue, 1, member)
  redis.call('ZADD', leases, lease_end, member)
  return 1
end
return 0
"""

# KEYS: queue.  ARGV: member.  Joins the queue once; returns the member's place (1: next).
JOIN = r"""
local queue, member = KEYS[1], ARGV[1]
local place = redis.call('LPOS', queue, member)
if not place then
  return redis.call('RPUSH', queue, member)
end
return place + 1
"""

# KEYS: leases, queue.  ARGV: now, lease end, cap.  Pops the oldest waiting members into
# the free slots (leases reserved for them) and returns them.
PROMOTE = r"""
local leases, queue = KEYS[1], KEYS[2]
local now, lease_end, cap = ARGV[1], ARGV[2], tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local free = cap - redis.call('ZCARD', leases)
local out = {}
while free > 0 do
  local member = redis.call('LPOP', queue)
  if not member then break end
  redis.call('ZADD', leases, lease_end, member)
  out[#out + 1] = member
  free = free - 1
end
return out
"""


def member(task_id: str, revision: int) -> str:
    return f"{task_id}:{revision}"


def parse_member(text: str) -> tuple[str, int]:
    task_id, _, revision = text.rpartition(":")
    return task_id, int(revision)


class HostSlots:
    def __init__(self, client: redis.Redis, prefix: str, host: str, cap: int,
                 lease_seconds: float) -> None:
        self.r = client
        self.keys = [Keys(prefix).slot_leases(host), Keys(prefix).slot_queue(host)]
        self.host, self.cap, self.lease = host, cap, lease_seconds
        self._acquire = client.register_script(ACQUIRE)
        self._join = client.register_script(JOIN)
        self._promote = client.register_script(PROMOTE)

    def acquire(self, task_id: str, revision: int, now: float) -> bool:
        """True: the revision holds a slot and may run.  False: it must wait (:meth:`join`)."""
        if self.cap <= 0:
            return True
        return bool(self._acquire(keys=self.keys, args=[member(task_id, revision), now,
                                                        now + self.lease, self.cap]))

    def join(self, task_id: str, revision: int) -> int:
        """Wait in the queue (once, however often asked); the revision's place (1: next)."""
        return int(self._join(keys=self.keys[1:], args=[member(task_id, revision)]))

    def renew(self, task_id: str, revision: int, now: float) -> bool:
        """Extend a held lease; False if the revision holds none (it lapsed)."""
        if self.cap <= 0:
            return True
        return bool(self.r.zadd(self.keys[0], {member(task_id, revision): now + self.lease},
                                xx=True, ch=True) or
                    self.r.zscore(self.keys[0], member(task_id, revision)) is not None)

    def release(self, task_id: str, revision: int) -> None:
        if self.cap > 0:
            self.r.zrem(self.keys[0], member(task_id, revision))

    def promote(self, now: float, still_waiting: Callable[[str, int], bool],
                reserve_seconds: float) -> list[tuple[str, int]]:
        """Give free slots to the oldest waiting revisions, in order; those that no longer
        wait (cancelled meanwhile) hand their slot straight on.  Costs what it promotes."""
        if self.cap <= 0:
            return []
        promoted: list[tuple[str, int]] = []
        while True:
            popped = self._promote(keys=self.keys, args=[now, now + reserve_seconds, self.cap])
            if not popped:
                return promoted
            for raw in popped:
                task_id, revision = parse_member(raw.decode() if isinstance(raw, bytes) else raw)
                if still_waiting(task_id, revision):
                    promoted.append((task_id, revision))
                else:
                    self.release(task_id, revision)

    def running(self) -> int:
        return int(self.r.zcard(self.keys[0]))

    def waiting(self) -> int:
        return int(self.r.llen(self.keys[1]))
