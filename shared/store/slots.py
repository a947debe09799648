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

# Shared by the scripts: a revision takes as many slots as it has replicas (its weight,
# kept in the weights hash while it holds or waits); leases past their end are dropped
# with their weights.  ``used`` costs one look per holding revision: at most ``cap``.
SLOTS = r"""
local function weight_of(weights, member)
  return tonumber(redis.call('HGET', weights, member) or '1')
end
local function expire(leases, weights, now)
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now)) do
    redis.call('ZREM', leases, gone)
    redis.call('HDEL', weights, gone)
  end
end
local function used(leases, weights)
  local n = 0
  for _, held in ipairs(redis.call('ZRANGE', leases, 0, -1)) do
    n = n + weight_of(weights, held)
  end
  return n
end
"""

# KEYS: leases, queue, weights.  ARGV: member, now, lease end, cap, weight.
# Returns 1 when the member holds its slots (already, or now), else 0.  It may take free
# slots only if all it needs are free and nobody waits, or it is the oldest waiting: a
# task of several replicas starts whole or not at all.
ACQUIRE = SLOTS + r"""
local leases, queue, weights = KEYS[1], KEYS[2], KEYS[3]
local member, now, lease_end = ARGV[1], ARGV[2], ARGV[3]
local cap, weight = tonumber(ARGV[4]), tonumber(ARGV[5])
expire(leases, weights, now)
if redis.call('ZSCORE', leases, member) then
  redis.call('ZADD', leases, lease_end, member)
  return 1
end
local head = redis.call('LINDEX', queue, 0)
if used(leases, weights) + weight <= cap and (not head or head == member) then
  redis.call('LREM', queue, 1, member)
  redis.call('ZADD', leases, lease_end, member)
  redis.call('HSET', weights, member, weight)
  return 1
end
return 0
"""

# KEYS: queue, weights.  ARGV: member, weight.  Joins the queue once; returns the
# member's place (1: next).
JOIN = r"""
local queue, weights, member, weight = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local place = redis.call('LPOS', queue, member)
if not place then
  redis.call('HSET', weights, member, weight)
  return redis.call('RPUSH', queue, member)
end
return place + 1
"""

# KEYS: leases, queue, weights.  ARGV: now, lease end, cap.  Pops the oldest waiting
# members into the free slots while the oldest fits whole (leases reserved for them)
# and returns them; a big task at the head is never overtaken by a smaller one.
PROMOTE = SLOTS + r"""
local leases, queue, weights = KEYS[1], KEYS[2], KEYS[3]
local now, lease_end, cap = ARGV[1], ARGV[2], tonumber(ARGV[3])
expire(leases, weights, now)
local free = cap - used(leases, weights)
local out = {}
while true do
  local member = redis.call('LINDEX', queue, 0)
  if not member or weight_of(weights, member) > free then break end
  redis.call('LPOP', queue)
  redis.call('ZADD', leases, lease_end, member)
  free = free - weight_of(weights, member)
  out[#out + 1] = member
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
        keys = Keys(prefix)
        self.keys = [keys.slot_leases(host), keys.slot_queue(host), keys.slot_weights(host)]
        self.host, self.cap, self.lease = host, cap, lease_seconds
        self._acquire = client.register_script(ACQUIRE)
        self._join = client.register_script(JOIN)
        self._promote = client.register_script(PROMOTE)

    def acquire(self, task_id: str, revision: int, now: float, weight: int = 1) -> bool:
        """True: the revision holds its ``weight`` slots (one per replica) and may run.
        False: it must wait (:meth:`join`)."""
        if self.cap <= 0:
            return True
        return bool(self._acquire(keys=self.keys, args=[member(task_id, revision), now,
                                                        now + self.lease, self.cap, weight]))

    def join(self, task_id: str, revision: int, weight: int = 1) -> int:
        """Wait in the queue (once, however often asked); the revision's place (1: next)."""
        return int(self._join(keys=self.keys[1:], args=[member(task_id, revision), weight]))

    def renew(self, task_id: str, revision: int, now: float) -> bool:
        """Extend a held lease; False if the revision holds none (it lapsed)."""
        if self.cap <= 0:
            return True
        return bool(self.r.zadd(self.keys[0], {member(task_id, revision): now + self.lease},
                                xx=True, ch=True) or
                    self.r.zscore(self.keys[0], member(task_id, revision)) is not None)

    def release(self, task_id: str, revision: int) -> None:
        if self.cap > 0:
            pipe = self.r.pipeline()
            pipe.zrem(self.keys[0], member(task_id, revision))
            pipe.hdel(self.keys[2], member(task_id, revision))
            pipe.execute()

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

    def holds_or_waits(self, task_id: str, revision: int, now: float) -> bool:
        """Whether the revision holds a lease not yet lapsed at ``now``, or waits in the
        queue: one round trip."""
        if self.cap <= 0:
            return True
        pipe = self.r.pipeline(transaction=False)
        pipe.zscore(self.keys[0], member(task_id, revision))
        pipe.lpos(self.keys[1], member(task_id, revision))
        lease_end, place = pipe.execute()
        return (lease_end is not None and float(lease_end) > now) or place is not None

    def running(self) -> int:
        """Revisions holding slots (a task of several replicas is one of them)."""
        return int(self.r.zcard(self.keys[0]))

    def waiting(self) -> int:
        return int(self.r.llen(self.keys[1]))
