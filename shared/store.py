"""Task records and policy versions in Redis.

Every key is namespaced under the configured prefix (``taskenv:`` by default).
A task is one hash: ``doc`` (the JSON record), ``state`` and ``v``, a write
counter.  Every change is a compare-and-set on ``v`` in a Lua script, which
also moves the task between the per-state indexes, so an index never
disagrees with its record and two workers can never both win a transition.
"""

from __future__ import annotations

import builtins
import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis

from shared import states
from shared.errors import NotFound
from shared.keys import Keys
from shared.policy import Policy
from shared.redis_conn import as_text
from shared.secrets import Cipher, open_entries, seal_entries

Doc = dict[str, Any]

# KEYS: task, idem (or ""), all-index, owner-index, state-index, owner-state-index, seq
# ARGV: id, doc, state, idem-ttl
_CREATE = """
if KEYS[2] ~= '' then
  local existing = redis.call('GET', KEYS[2])
  if existing then return {0, existing} end
end
local seq = redis.call('INCR', KEYS[7])
redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'state', ARGV[3], 'v', 1, 'seq', seq)
redis.call('ZADD', KEYS[3], seq, ARGV[1])
redis.call('ZADD', KEYS[4], seq, ARGV[1])
redis.call('ZADD', KEYS[5], seq, ARGV[1])
redis.call('ZADD', KEYS[6], seq, ARGV[1])
if KEYS[2] ~= '' then redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[4]) end
return {1, ARGV[1]}
"""

# KEYS: task, old-state-index, new-state-index, old-owner-state-index, new-owner-state-index
# ARGV: expected v, doc, new state, id
_UPDATE = """
local v = redis.call('HGET', KEYS[1], 'v')
if v ~= ARGV[1] then return 0 end
local seq = redis.call('HGET', KEYS[1], 'seq')
redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'state', ARGV[3], 'v', tonumber(v) + 1)
if KEYS[2] ~= KEYS[3] then
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('ZREM', KEYS[4], ARGV[4])
  redis.call('ZADD', KEYS[3], seq, ARGV[4])
  redis.call('ZADD', KEYS[5], seq, ARGV[4])
end
return 1
"""

_PUT_POLICY = """
local n = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2] .. n, ARGV[1])
redis.call('SET', KEYS[3], n)
return n
"""


@dataclass
class Page:
    items: list[Doc]
    next_cursor: int | None


def _env_lists(doc: Doc) -> list[list[dict[str, Any]] | None]:
    """Every list of variables in a record: current and past revisions, as set and resolved."""
    revisions = [doc, *doc.get("history", [])]
    return [r.get(k) for r in revisions for k in ("env", "resolved")]


class TaskStore:
    IDEMPOTENCY_TTL = 24 * 3600
    LOG_LIMIT = 1024 * 1024  # bytes kept per revision; the tail is what matters

    def __init__(self, client: redis.Redis, prefix: str = "taskenv",
                 cipher: Cipher | None = None) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self.cipher = cipher
        self._create = client.register_script(_CREATE)
        self._update = client.register_script(_UPDATE)

    def create(self, doc: Doc, idempotency_key: str | None = None) -> tuple[Doc, bool]:
        """Store a new task; with a key already used, return that task instead."""
        task_id = doc.setdefault("id", uuid.uuid4().hex)
        owner, state = doc["owner"], doc["state"]
        idem = self.keys.idempotency(owner, idempotency_key) if idempotency_key else ""
        created, found_id = self._create(
            keys=self._create_keys(task_id, owner, state, idem),
            args=[task_id, self._dump(doc), state, self.IDEMPOTENCY_TTL])
        if not created:
            return self.get(as_text(found_id)), False
        return doc, True

    def load_many(self, docs: Iterable[Doc], batch: int = 1000) -> None:
        """Store many new tasks, ``batch`` per round trip, without idempotency keys.

        The same script as :meth:`create`, so the records and indexes are exactly what
        tasks created one by one would leave (benchmarks fill a store this way).
        """
        pipe = self.r.pipeline(transaction=False)
        pending = 0
        for doc in docs:
            task_id = doc.setdefault("id", uuid.uuid4().hex)
            self._create(keys=self._create_keys(task_id, doc["owner"], doc["state"], ""),
                         args=[task_id, self._dump(doc), doc["state"], 0], client=pipe)
            pending += 1
            if pending == batch:
                pipe.execute()
                pending = 0
        if pending:
            pipe.execute()

    def _create_keys(self, task_id: str, owner: str, state: str, idem: str) -> list[str]:
        """The keys ``_CREATE`` takes, in its order."""
        k = self.keys
        return [k.task(task_id), idem, k.index(), k.index(owner), k.index(state=state),
                k.index(owner, state), k.task_seq()]

    def get(self, task_id: str, owner: str | None = None) -> Doc:
        raw = self.r.hget(self.keys.task(task_id), "doc")
        if raw is None:
            raise NotFound(f"no task {task_id}")
        doc = self._load(raw)
        if owner is not None and doc["owner"] != owner:
            raise NotFound(f"no task {task_id}")  # someone else's task does not exist for you
        return doc

    def find(self, task_id: str) -> Doc | None:
        try:
            return self.get(task_id)
        except NotFound:
            return None

    def update(self, task_id: str, change: Callable[[Doc], Doc | None]) -> Doc | None:
        """Apply ``change`` atomically; it returns the new doc, or None to leave it be."""
        key = self.keys.task(task_id)
        while True:
            fields: Any = self.r.hmget(key, ["v", "doc"])
            v, raw = fields
            if raw is None:
                raise NotFound(f"no task {task_id}")
            doc = self._load(raw)
            old_state, owner = doc["state"], doc["owner"]  # before ``change`` edits doc
            new = change(doc)
            if new is None:
                return None
            new["updated_at"] = time.time()
            k = self.keys
            ok = self._update(
                keys=[key, k.index(state=old_state), k.index(state=new["state"]),
                      k.index(owner, old_state), k.index(owner, new["state"])],
                args=[as_text(v), self._dump(new), new["state"], task_id])
            if ok:
                return new

    def transition(self, task_id: str, revision: int, expected: str | set[str],
                   new_state: str, **changes: Any) -> Doc | None:
        """Move one revision from an expected state; None if it is elsewhere already."""
        return self.advance(task_id, revision, expected, lambda doc: (new_state, changes))

    def advance(self, task_id: str, revision: int, expected: str | set[str],
                decide: Callable[[Doc], tuple[str, dict[str, Any]]]) -> Doc | None:
        """Like :meth:`transition`, the new state and fields decided from the record itself.

        One read and one compare-and-set: a stage needs no separate read first.
        """
        allowed = {expected} if isinstance(expected, str) else expected

        def change(doc: Doc) -> Doc | None:
            if doc["revision"] != revision or doc["state"] not in allowed:
                return None
            new_state, changes = decide(doc)
            assert states.can_move(doc["state"], new_state), (doc["state"], new_state)
            doc.update(changes, state=new_state)
            doc.setdefault("events", []).append(
                {"at": time.time(), "revision": revision, "state": new_state})
            return doc

        return self.update(task_id, change)

    def list(self, owner: str | None = None, state: str | None = None,
             cursor: int | None = None, limit: int = 50) -> Page:
        """Newest first; ``cursor`` is the position the previous page ended at."""
        top = f"({cursor}" if cursor is not None else "+inf"
        pairs: Any = self.r.zrevrangebyscore(self.keys.index(owner, state), top, "-inf",
                                        start=0, num=limit + 1, withscores=True)
        more = len(pairs) > limit
        pairs = pairs[:limit]
        pipe = self.r.pipeline(transaction=False)
        for task_id, _ in pairs:
            pipe.hget(self.keys.task(as_text(task_id)), "doc")
        docs = [self._load(raw) for raw in pipe.execute() if raw is not None]
        return Page(docs, int(pairs[-1][1]) if more and pairs else None)

    def _dump(self, doc: Doc) -> str:
        """JSON for Redis, with every secret value sealed."""
        if not any(e.get("secret") for entries in _env_lists(doc) for e in entries or []):
            return json.dumps(doc)
        sealed = json.loads(json.dumps(doc))  # seal a copy: the caller keeps clear values
        for entries in _env_lists(sealed):
            seal_entries(entries, self.cipher)
        return json.dumps(sealed)

    def _load(self, raw: str | bytes) -> Doc:
        doc: Doc = json.loads(raw)
        for entries in _env_lists(doc):
            open_entries(entries, self.cipher)
        return doc

    def ping(self) -> None:
        """Raise when Redis cannot be reached."""
        self.r.ping()

    def all_ids(self) -> builtins.list[str]:
        return [as_text(t) for t in self.r.zrange(self.keys.index(), 0, -1)]

    def ids_in_state(self, state: str, limit: int = 1000) -> builtins.list[str]:
        return [as_text(t) for t in self.r.zrange(self.keys.index(state=state), 0, limit - 1)]

    def heartbeat(self, task_id: str, revision: int, ttl: int) -> None:
        """A launch is alive for ``ttl`` more seconds."""
        self.r.set(self.keys.beat(task_id, revision), "1", ex=ttl)

    def claim_requeue(self, task_id: str, revision: int, state: str, ttl: int) -> bool:
        """True at most once per ``ttl`` seconds for one task revision in one state."""
        key = self.keys.requeue_claim(task_id, revision, state)
        return bool(self.r.set(key, "1", nx=True, ex=max(1, ttl)))

    def dead_for(self, task_id: str, revision: int, now: float, forget_after: int) -> float:
        """Seconds since a reconciler first found this revision without a heartbeat."""
        key = self.keys.suspect(task_id, revision)
        self.r.set(key, repr(now), nx=True, ex=max(1, forget_after))
        first = self.r.get(key)
        return now - float(first) if first is not None else 0.0

    def seen_alive(self, task_id: str, revision: int) -> None:
        self.r.delete(self.keys.suspect(task_id, revision))

    def is_alive(self, task_id: str, revision: int) -> bool:
        return bool(self.r.exists(self.keys.beat(task_id, revision)))

    def stop_heartbeat(self, task_id: str, revision: int) -> None:
        self.r.delete(self.keys.beat(task_id, revision))

    def append_log(self, task_id: str, revision: int, text: str) -> None:
        """Append output; past ``LOG_LIMIT`` bytes only the newest half is kept."""
        key = self.keys.log(task_id, revision)
        if int(self.r.append(key, text)) > self.LOG_LIMIT:  # type: ignore[arg-type]
            tail = self.r.getrange(key, -(self.LOG_LIMIT // 2), -1)
            self.r.set(key, tail)

    def read_log(self, task_id: str, revision: int) -> str:
        raw = self.r.get(self.keys.log(task_id, revision))
        return as_text(raw) if raw is not None else ""


class PolicyStore:
    """Immutable, numbered policy versions; version 0 is the empty policy."""

    def __init__(self, client: redis.Redis, prefix: str = "taskenv",
                 cipher: Cipher | None = None) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self.cipher = cipher
        self._put = client.register_script(_PUT_POLICY)
        self._versions: dict[int, Policy] = {}

    def put(self, policy: Policy) -> Policy:
        body = policy.to_dict()
        body.pop("version")
        seal_entries(body["defaults"], self.cipher)
        seal_entries(body["protected"], self.cipher)
        k = self.keys
        n = self._put(keys=[k.policy_seq(), k.policy_version(), k.policy_current()],
                      args=[json.dumps(body)])
        return self.get(int(n))

    def current(self) -> Policy:
        n = self.r.get(self.keys.policy_current())
        return self.get(int(n)) if n is not None else Policy()

    def get(self, version: int) -> Policy:
        if version == 0:
            return Policy()
        if version in self._versions:  # versions are immutable: safe to keep
            return self._versions[version]
        self._versions[version] = policy = self._read(version)
        return policy

    def _read(self, version: int) -> Policy:
        raw = self.r.get(self.keys.policy_version(version))
        if raw is None:
            raise NotFound(f"no policy version {version}")
        body = json.loads(raw)
        open_entries(body["defaults"], self.cipher)
        open_entries(body["protected"], self.cipher)
        return Policy.from_dict({**body, "version": version})

    def versions(self) -> list[int]:
        n = self.r.get(self.keys.policy_seq())
        return list(range(1, int(n) + 1)) if n is not None else []
