"""Task uids: every live task runs as a host uid of its own, drawn from a pool.

The kernel charges much of what a process may hold to its uid, not to its task: the
processes ``RLIMIT_NPROC`` counts, inotify instances and watches
(``fs.inotify.max_user_instances``: 128 here), POSIX message queues, keyrings.  Steps of
every tenant running as one uid share all of it, so one task holding the uid's inotify
instances made another's ``inotify_init`` fail.  So a task's steps run as a uid of a
range kept for tasks (``TASKENV_TASK_UID_FIRST``, ``TASKENV_TASK_UID_COUNT``: like
HTCondor's slot users, made without ``useradd``: nothing on the host needs a name for
them), which this pool gives to one live task revision at a time.

Held in Redis, one pool for the deployment (every host, the local and Slurm launchers):
a revision holds its uid under a **lease** that whoever runs it renews (the local
runner with its heartbeat, the Slurm reconciler for the jobs ``squeue`` lists), and
gives it back when it ends.  A holder that stops renewing (its runner died) loses the
uid once the lease has ended and someone else needs one: lapsed leases are expired by
the next acquisitions, in the same script (a bounded batch each), so recovery costs no
pass of its own.  A
lapsed lease nobody needed meanwhile is still its holder's: a renewal after a long
Redis outage keeps it.

Taking a uid, renewing and giving it back are single Lua scripts: two launches racing
for the last uid cannot both get it, and a uid is never the holder of two revisions.
Fresh uids of the range are given first, then those given back, the longest unused
first, so a uid just left is the last one handed out again.  A range made smaller
never gives out a uid outside it.
"""

from __future__ import annotations

import redis

from shared.errors import TransientError
from shared.keys import Keys
from shared.store.slots import member

# Lapsed leases give their uid back, at most 64 of them per call: one
# acquisition needs one uid, and a host that lost many runners at once must not make one
# script hold Redis (60,000 lapsed leases took 0.7 s in one go).
EXPIRE = r"""
local function expire(leases, held, owner, free, now)
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, 64)) do
    local uid = redis.call('HGET', held, gone)
    redis.call('ZREM', leases, gone)
    redis.call('HDEL', held, gone)
    if uid and redis.call('HGET', owner, uid) == gone then
      redis.call('HDEL', owner, uid)
      redis.call('RPUSH', free, uid)
    end
  end
end
"""

# KEYS: leases, held, owner, free, next.  ARGV: member, now, lease end, first, count.
# Returns the member's uid (held already, or now), or -1 when every uid is held.
ACQUIRE = EXPIRE + r"""
local leases, held, owner, free, nxt = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local member, now, lease_end = ARGV[1], ARGV[2], ARGV[3]
local first, count = tonumber(ARGV[4]), tonumber(ARGV[5])
expire(leases, held, owner, free, now)
local uid = redis.call('HGET', held, member)
if uid then
  redis.call('ZADD', leases, lease_end, member)
  return tonumber(uid)
end
local take = nil
local n = tonumber(redis.call('GET', nxt) or '0')
while not take and n < count do
  if redis.call('HEXISTS', owner, string.format('%d', first + n)) == 0 then
    take = first + n
  end
  n = n + 1
end
redis.call('SET', nxt, n)
while not take do
  local given = redis.call('LPOP', free)
  if not given then return -1 end
  local candidate = tonumber(given)
  if candidate >= first and candidate < first + count and
      redis.call('HEXISTS', owner, given) == 0 then
    take = candidate
  end
end
local text = string.format('%d', take)
redis.call('HSET', held, member, text)
redis.call('HSET', owner, text, member)
redis.call('ZADD', leases, lease_end, member)
return take
"""

# KEYS: leases, held.  ARGV: member, lease end.  The member's uid, its lease extended;
# -1 when it holds none (its lease lapsed and the uid went back to the pool).
RENEW = r"""
local uid = redis.call('HGET', KEYS[2], ARGV[1])
if not uid then return -1 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return tonumber(uid)
"""

# KEYS: leases, held, owner, free.  ARGV: member.  Gives its uid back (once).
RELEASE = r"""
local leases, held, owner, free, member = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
local uid = redis.call('HGET', held, member)
redis.call('ZREM', leases, member)
if not uid then return 0 end
redis.call('HDEL', held, member)
if redis.call('HGET', owner, uid) == member then
  redis.call('HDEL', owner, uid)
  redis.call('RPUSH', free, uid)
end
return 1
"""


class UidsExhausted(TransientError):
    """Every uid of the range is held by a live task: the launch waits (is retried)."""

    code = "task_uids_exhausted"


class TaskUids:
    def __init__(self, client: redis.Redis, prefix: str, first: int, count: int,
                 lease_seconds: float) -> None:
        if first <= 0 or count <= 0:
            raise ValueError("the task uid range must be above 0 and hold at least one uid "
                             "(TASKENV_TASK_UID_FIRST, TASKENV_TASK_UID_COUNT)")
        self.r = client
        keys = Keys(prefix)
        self.keys = [keys.task_uid_leases(), keys.task_uid_held(), keys.task_uid_owner(),
                     keys.task_uid_free(), keys.task_uid_next()]
        self.first, self.count, self.lease = first, count, lease_seconds
        self._acquire = client.register_script(ACQUIRE)
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)

    def acquire(self, task_id: str, revision: int, now: float) -> int | None:
        """The revision's uid (the same one however often asked while it holds it), its
        lease running ``lease_seconds`` from ``now``; None when every uid is held."""
        uid = int(self._acquire(keys=self.keys, args=[member(task_id, revision), now,
                                                      now + self.lease, self.first,
                                                      self.count]))
        return None if uid < 0 else uid

    def take(self, task_id: str, revision: int, now: float) -> int:
        """:meth:`acquire`, raising :class:`UidsExhausted` when no uid is free."""
        uid = self.acquire(task_id, revision, now)
        if uid is None:
            raise UidsExhausted(
                f"all {self.count} task uids ({self.first}-{self.first + self.count - 1}) are "
                "held by running tasks: the launch waits for one to end (a larger range: "
                "TASKENV_TASK_UID_COUNT)")
        return uid

    def renew(self, task_id: str, revision: int, now: float) -> int | None:
        """Extend the revision's lease; its uid, or None if it holds none any more."""
        uid = int(self._renew(keys=self.keys[:2], args=[member(task_id, revision),
                                                        now + self.lease]))
        return None if uid < 0 else uid

    def release(self, task_id: str, revision: int) -> None:
        """Give the revision's uid back (nothing if it holds none)."""
        self._release(keys=self.keys[:4], args=[member(task_id, revision)])

    def held(self, task_id: str, revision: int) -> int | None:
        uid = self.r.hget(self.keys[1], member(task_id, revision))
        return None if uid is None else int(uid)
