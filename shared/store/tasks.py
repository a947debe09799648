"""Task records in Redis.

Every key is namespaced under the configured prefix (``taskenv:`` by default).
A task is two hashes (see below), with ``v``, a write counter.  Every change is
a compare-and-set in a Lua script, which also moves the task between the
per-state indexes and counts the state entered for insights, so an index never
disagrees with its record and two workers can never both win a transition.  A
change decided by the record (validation, policy) reads it and sets ``v``; one
decided by the state alone (:meth:`TaskStore.move`) is checked and written in
one call.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import redis

from shared import metrics, state_scores
from shared.access.quotas import WINDOW as QUOTA_WINDOW
from shared.access.quotas import CreateBudget, Quotas, refuse_bytes, user
from shared.errors import NotFound
from shared.keys import BY_STATE_SUFFIX, REVISION_SUFFIX, VALUES_SUFFIX, Keys
from shared.redis_conn import as_text
from shared.secrets import Cipher, open_entries, seal_entries
from shared.store import pool, scripts
from shared.store.insights import KEEP_SECONDS, Insights, day_of
from shared.store.legacy import legacy_env_lists, legacy_split
from shared.store.liveness import Liveness
from shared.store.logtail import LogTail, pieces
from shared.store.pool import Known
from shared.store.room import patiently
from shared.task import records, states

log = logging.getLogger(__name__)
# A record as the store reads and writes it: its fields are ``shared.types.TaskRecord``'s.
# Kept a plain dict here: the scripts' results, partial changes and older layouts pass
# through the same functions, and a TypedDict is not a dict[str, Any] to mypy.
Doc = dict[str, Any]
# An audit entry written with a task's creation: stream key, fields, stream length.
AuditEntry = tuple[str, dict[str, Any], int]




@dataclass(frozen=True)
class Read:
    """A record as read: its write counter ``v`` and the stored size of each field of the
    task's hash and of the revision's read.  A write at that same ``v`` replaces fields of
    exactly those sizes (every writer moves ``v``), so the script need not measure them."""

    v: str
    revision: Any  # the revision whose hash was read (None: none)
    task_sizes: dict[str, int]
    rev_sizes: dict[str, int]

    def sizes(self, task_fields: Doc, rev_fields: Doc, revision: Any) -> list[int]:
        """The old size of each field written, in the order written (0: absent; -1: not
        read, as for a revision's hash other than the one read, which the script measures)."""
        same = revision == self.revision
        return [*(self.task_sizes.get(n, 0) for n in task_fields),
                *(self.rev_sizes.get(n, 0) if same else -1 for n in rev_fields)]


def _sizes(flat: list[Any]) -> dict[str, int]:
    """Each field's stored size in bytes, from a hash's fields as read.  Stored values are
    JSON with ASCII escapes (json.dumps' default), so characters are bytes."""
    it = iter(flat)
    return {as_text(k): len(v) for k, v in zip(it, it, strict=True)}


@dataclass
class Page:
    items: list[Doc]
    next_cursor: int | None


# Per-revision fields: they live in the revision's hash, written when they change.
REVISION_FIELDS = frozenset({
    "env", "resolved", "errors", "warnings", "policy_version", "policy_versions",
    "exit_code", "reason", "events", "made_by", "how", "started_at", "ended_at",
    "drift", "pinned_from", "cancelled_by", "cancelled_at", "apply", "made_at", "rerun_of",
    "next_env", "files", "refs", "doctor", "replica_exit_codes", "replaces",
    "pinned_defaults", "waits_on", "received", "per_node",
})
# Fields both hashes hold: the task's for listings, the revision's for its own history.
SHARED_FIELDS = frozenset({"state", "updated_at"})
# Lists of variables whose secret values are sealed.
SEALED_FIELDS = ("env", "resolved", "next_env", "pinned_defaults")
SUMMARY_FIELDS = ("id", "name", "owner", "project", "state", "revision", "created_at",
                  "updated_at")
REVISION_SUMMARY = ("state", "policy_version", "policy_versions", "made_by", "how",
                    "made_at", "started_at", "ended_at", "exit_code", "reason", "pinned_from",
                    "rerun_of", "replica_exit_codes")
COUNTERS = ("v", "seq")
# The scripts' own fields of a task's hash, not part of its stored size.
UNCOUNTED = frozenset({"v", "seq", "bytes", "bytes_allowed"})
# Per-revision lists stored deflated once their JSON is this long (bytes).
PACKED_FIELDS = frozenset({"env", "resolved", "next_env", "files"})
PACK_OVER = 256


def _timestamps(doc: Doc, new_state: str) -> Doc:
    """When a revision started running and when it reached a final state."""
    if new_state == states.RUNNING and not doc.get("started_at"):
        return {"started_at": time.time()}
    if new_state in states.FINAL:
        return {"ended_at": time.time()}
    return {}


# json.dumps makes a new encoder on every call that asks for other separators; every
# field of every write goes through here.
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode


def _json(value: Any) -> str:
    """A field as stored: JSON without the spaces json.dumps puts after separators."""
    return _COMPACT(value)


def _encoded(fields: Doc) -> dict[Any, Any]:  # redis-py's mapping types are invariant
    return {name: _packed(_json(value)) if name in PACKED_FIELDS else _json(value)
            for name, value in fields.items()}


def _packed(text: str) -> str:
    """A long env stored deflated (a third of its size, or less: names and provenance
    repeat), as ``{"z": base64}``; a short one as it is."""
    if len(text) < PACK_OVER:
        return text
    return _json({"z": base64.b64encode(zlib.compress(text.encode())).decode()})


def _unpacked(name: str, value: Any) -> Any:
    """Inverse of :func:`_packed`, on a decoded field."""
    if name in PACKED_FIELDS and isinstance(value, dict) and set(value) == {"z"}:
        return json.loads(zlib.decompress(base64.b64decode(value["z"])))
    return value


def _flat(mapping: dict[str, str]) -> list[str]:
    return [x for pair in mapping.items() for x in pair]


def _pairs(fields: Doc) -> list[Any]:
    """Field/value pairs, flat, as the scripts take them."""
    return [x for pair in _encoded(fields).items() for x in pair]


def _decoded(flat: list[Any]) -> Doc:
    it = iter(flat)
    return {as_text(k): as_text(v) if as_text(k) in COUNTERS else _unpacked(as_text(k),
                                                                            json.loads(v))
            for k, v in zip(it, it, strict=True)}


def replicas_of(doc: Doc) -> int:
    """A task's replicas (records from before replicas existed have one)."""
    return int(doc.get("replicas") or 1)


def _extra_replicas_change(old_state: str, new: Doc) -> int:
    """How a state change moves the owner's count of extra replicas: a task of several
    replicas that ends gives the ones beyond its first back, one that reopens (a new
    revision) takes them again."""
    was_open, is_open = old_state not in states.FINAL, new["state"] not in states.FINAL
    return (replicas_of(new) - 1) * (int(is_open) - int(was_open))


class TaskStore:
    """Task records in Redis, changed only by compare-and-set.

    The verbs that change a record, and when to use which:

    ==============  ==============================  ==========  =======================
    verb            decided by                      reads       answers
    ==============  ==============================  ==========  =======================
    ``update``      any function of the whole       1 + CAS     the new record or None
                    record (a new revision, rerun)              (the function declined)
    ``advance``     the record, for one revision    1 + CAS     the record, or None if
                    in an expected state (stages)               the revision is elsewhere
    ``transition``  the state alone, fields given   1 + CAS     as ``advance``
    ``move``        the state alone, in one script  0 (1 call)  True/False
    ``claim``       as ``move``, record needed      0 (1 call)  the moved record or None
    ==============  ==============================  ==========  =======================

    ``move`` and ``claim`` never read the record into Python, so they cost the same for a
    task's first and its 200th revision; the others read the task and its current
    revision only (never older revisions).  Heartbeats and the reconciler's notes are in
    :attr:`liveness`, output in :attr:`logs`, the insights counters in :attr:`insights`.
    """

    IDEMPOTENCY_TTL = 24 * 3600
    LOG_LIMIT = 1024 * 1024  # bytes kept per revision; the tail is what matters

    def __init__(self, client: redis.Redis, prefix: str = "taskenv",
                 cipher: Cipher | None = None, retention_seconds: float = 0,
                 patience: float = 0) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self.cipher = cipher
        self.retention = retention_seconds  # 0: finished tasks are kept forever
        # How long a state write waits for room when Redis is full (a worker's outcome
        # must land); 0: an out-of-memory reply is raised at once (the API's).
        self.patience = patience
        self._create = client.register_script(scripts.CREATE)
        self._update = client.register_script(scripts.UPDATE)
        self._read = client.register_script(scripts.READ)
        self._delete = client.register_script(scripts.DELETE)
        self._move = client.register_script(scripts.MOVE)
        self._write = client.register_script(scripts.WRITE)
        self._adopt_state_index = client.register_script(scripts.ADOPT_STATE_INDEX)
        self.logs = LogTail(client, prefix)
        self.liveness = Liveness(client, prefix)
        self.insights = Insights(client, prefix)

    # --- writing -------------------------------------------------------------------------

    def create(self, doc: Doc, idempotency_key: str | None = None,
               audit: AuditEntry | None = None,
               budget: CreateBudget | None = None) -> tuple[Doc, bool]:
        """Store a new task; with a key already used, return that task instead.

        ``audit`` (a stream and its entry's fields) is appended in the same call, and only
        if the task is created.  ``budget``: the owner's quotas, counted and judged in
        that call too (a refusal raises, and stores nothing).
        """
        doc.setdefault("id", uuid.uuid4().hex)
        idem = self.keys.idempotency(doc["owner"], idempotency_key) if idempotency_key else ""
        answer = self._create(*self._create_call(doc, idem, audit, budget))
        if int(answer[0]) == -2 and budget is not None:
            budget.refuse_bytes(int(answer[1]), int(answer[2]))
        if int(answer[0]) < 0 and budget is not None:
            budget.refuse(int(answer[1]), int(answer[2]), replicas_of(doc))
        if not int(answer[0]):
            return self.get(as_text(answer[1])), False
        self._entered(doc["state"], doc.get("project"))
        return doc, True

    def load_many(self, docs: Iterable[Doc], batch: int = 1000) -> None:
        """Store many new tasks, ``batch`` per round trip, without idempotency keys.

        The same script as :meth:`create`, so the records and indexes are exactly what
        tasks created one by one would leave (benchmarks fill a store this way).
        """
        pipe = self.r.pipeline(transaction=False)
        pending = 0
        for doc in docs:
            doc.setdefault("id", uuid.uuid4().hex)
            keys, args = self._create_call(doc, "")
            self._create(keys, args, client=pipe)
            pending += 1
            if pending == batch:
                pipe.execute()
                pending = 0
        if pending:
            pipe.execute()

    def _create_call(self, doc: Doc, idem: str, audit: AuditEntry | None = None,
                     budget: CreateBudget | None = None) -> tuple[list[str], list[Any]]:
        task_id, owner, state = doc["id"], doc["owner"], doc["state"]
        k = self.keys
        task_fields, rev_fields, pool = self._split(doc, set(doc))
        project = doc.get("project")
        stream, entry, stream_length = audit if audit else ("", {}, 0)
        keys = [k.task(task_id), k.revision(task_id, doc["revision"]), idem, k.index(),
                k.index(owner), k.by_state(), k.by_state(owner), k.task_seq(),
                k.project_index(project) if project else "", *self._insights_keys(project),
                stream, k.values(task_id), k.quota_bytes(user(owner)),
                budget.rate_key if budget else "", k.extra_replicas(owner)]
        q = budget.quotas if budget else Quotas(0, 0, 0, 0)
        revision_pairs = _pairs(rev_fields)
        args = [task_id, self.IDEMPOTENCY_TTL, len(task_fields), state, KEEP_SECONDS,
                stream_length, 2 * len(entry), q.creates_per_minute, 2 * QUOTA_WINDOW,
                q.unfinished_tasks, q.stored_bytes, len(revision_pairs) // 2,
                replicas_of(doc), state_scores.base(state), state_scores.UNFINISHED_END,
                *(x for pair in entry.items() for x in pair),
                *_pairs(task_fields), *revision_pairs, *_flat(pool)]
        return keys, args

    def _insights_keys(self, project: str | None) -> list[str]:
        """Today's counters of states entered: every task's, and the project's (or "")."""
        today = day_of(time.time())
        return [self.keys.insights_states(today),
                self.keys.insights_states(today, project) if project else ""]

    def update(self, task_id: str, change: Callable[[Doc], Doc | None],
               budget: Quotas | None = None) -> Doc | None:
        """Apply ``change`` atomically; it returns the new doc, or None to leave it be.

        Only the fields ``change`` altered are written; a long value the current revision
        already stores is shared, not stored again.  ``budget``: the owner's quotas, for a
        change a user makes; its stored bytes are judged in the write itself (a refusal
        raises and writes nothing).  A stage's write is never refused.
        """
        while True:
            read, doc, known = self._load(task_id)
            before = {name: json.dumps(value) for name, value in doc.items()}
            old_state = doc["state"]
            new = change(doc)
            if new is None:
                return None
            changed = {n for n, value in new.items() if before.get(n) != json.dumps(value)}
            # A new revision (an env change, a rerun, a restart) enters pending here: it is
            # counted like every other state entered, or the insights would see it enter
            # validated without ever having been pending.
            made = "revision" in changed
            if self._commit(read, old_state, new, changed, counted=made, known=known,
                            budget=budget):
                if made:
                    self._entered(new["state"], new.get("project"))
                return new

    def transition(self, task_id: str, revision: int, expected: str | set[str],
                   new_state: str, **changes: Any) -> Doc | None:
        """Move one revision from an expected state; None if it is elsewhere already."""
        return self.advance(task_id, revision, expected, lambda doc: (new_state, changes))

    def move(self, task_id: str, revision: int, expected: str | Collection[str],
             new_state: str, **changes: Any) -> bool:
        """Like :meth:`transition` without reading the record: checked and written in one
        round trip.  False if the revision is elsewhere already; NotFound if it is gone.

        For changes decided by the state alone, whose fields hold no secret.
        """
        return self._moved(task_id, revision, expected, new_state, changes, False) is not None

    def claim(self, task_id: str, revision: int, expected: str | Collection[str],
              new_state: str) -> Doc | None:
        """:meth:`move`, answered with the record as moved: what a stage that acts on the
        whole record (the launch) needs, in the one round trip.  None if elsewhere."""
        return self._moved(task_id, revision, expected, new_state, {}, True)

    def _moved(self, task_id: str, revision: int, expected: str | Collection[str],
               new_state: str, changes: Doc, read: bool) -> Doc | None:
        allowed = {expected} if isinstance(expected, str) else set(expected)
        assert all(states.can_move(s, new_state) for s in allowed), (allowed, new_state)
        now = time.time()
        k = self.keys
        expires = now + self.retention if self.retention and new_state in states.FINAL else 0
        event = {"at": now, "revision": revision, "state": new_state}
        found = patiently(lambda: self._move(
            keys=[k.task(task_id), k.expiry(), k.insights_states(day_of(now)),
                  k.log(task_id, revision)],
            args=[_json(revision), new_state, ",".join(sorted(allowed)),
                  ",".join(sorted(states.FINAL)), _json(now), expires, REVISION_SUFFIX,
                  k.index(), k.insights_project_stem(day_of(now)),
                  KEEP_SECONDS, _json(event), task_id, "1" if read else "0",
                  k.quota_bytes(), VALUES_SUFFIX, state_scores.base(new_state), BY_STATE_SUFFIX,
                  *_pairs(changes)]),
            self.patience, f"task {task_id} r{revision} -> {new_state}")
        if not found:
            raise NotFound(f"no task {task_id}")
        if int(found[0]) == 2:  # an old layout: converted, then moved as any other
            self._migrate(task_id)
            return self._moved(task_id, revision, expected, new_state, changes, read)
        if not int(found[0]):
            return None
        project = as_text(found[1]) if len(found) > 1 and found[1] else None
        self._entered(new_state, project)
        return self._record(found[2], found[3], found[4])[1] if read else {}

    def advance(self, task_id: str, revision: int, expected: str | set[str],
                decide: Callable[[Doc], tuple[str, dict[str, Any]]]) -> Doc | None:
        """Like :meth:`transition`, the new state and fields decided from the record itself.

        One read and one compare-and-set, writing only the fields the decision sets.
        """
        allowed = {expected} if isinstance(expected, str) else expected
        while True:
            read, doc, known = self._load(task_id)
            if doc["revision"] != revision or doc["state"] not in allowed:
                return None
            old_state = doc["state"]
            new_state, decided = decide(doc)
            assert states.can_move(old_state, new_state), (old_state, new_state)
            changes = {**_timestamps(doc, new_state), **decided}
            doc.update(changes, state=new_state)
            doc["events"] = [*doc.get("events", []),
                             {"at": time.time(), "revision": revision, "state": new_state}]
            if self._commit(read, old_state, doc, {*changes, "state", "events"}, counted=True,
                            known=known):
                self._entered(new_state, doc.get("project"))
                return doc

    def _entered(self, state: str, project: str | None) -> None:
        """The metric of a state entered (its insights counter is written by the script)."""
        metrics.task_entered(state, project,
                             lambda name: bool(self.r.sismember(self.keys.projects(), name)))

    def _commit(self, read: Read, old_state: str, new: Doc, changed: set[str],
                counted: bool = False, known: Known | None = None,
                budget: Quotas | None = None) -> bool:
        """Compare-and-set: write ``changed`` fields of ``new`` if the task is still as read.

        ``known``: the long values the task's pool holds for the revision read (shared
        when unchanged); ``budget``: judge the owner's stored bytes (a user's change)."""
        task_id, owner, state = new["id"], new["owner"], new["state"]
        new["updated_at"] = time.time()
        changed = changed | {"updated_at"}
        if "revision" in changed:  # a new revision: its hash is written whole
            changed |= REVISION_FIELDS & set(new)
        task_fields, rev_fields, pool = self._split(new, changed, known)
        k = self.keys
        insights = self._insights_keys(new.get("project")) if counted else ["", ""]
        revision_pairs = _pairs(rev_fields)
        answer = patiently(lambda: self._update(
            keys=[k.task(task_id), k.revision(task_id, new["revision"]), k.by_state(),
                  k.by_state(owner), k.expiry(), *insights, k.values(task_id),
                  k.quota_bytes(user(owner)), k.extra_replicas(owner)],
            args=[read.v, task_id, self._expiry_change(old_state, new), len(task_fields), state,
                  KEEP_SECONDS, budget.stored_bytes if budget else 0,
                  len(revision_pairs) // 2, REVISION_SUFFIX,
                  _extra_replicas_change(old_state, new),
                  state_scores.base(state) if state != old_state else "",
                  *read.sizes(task_fields, rev_fields, new["revision"]), *_pairs(task_fields),
                  *revision_pairs, *_flat(pool)]),
            self.patience, f"task {task_id} r{new['revision']} -> {state}")
        if isinstance(answer, list) and budget is not None:  # {-2, stored, growth}
            refuse_bytes(budget, user(owner), int(answer[1]), int(answer[2]))
        return bool(answer)

    def _expiry_change(self, old_state: str, new: Doc) -> float | str:
        """When a task that ends now expires; "leave" when it leaves a final state (a new
        revision); 0 when the expiry index is not touched."""
        if new["state"] in states.FINAL:
            return new["updated_at"] + self.retention if self.retention else 0
        return "leave" if old_state in states.FINAL else 0

    def _split(self, doc: Doc, names: set[str], known: Known | None = None
               ) -> tuple[Doc, Doc, dict[str, str]]:
        """The task's fields and the revision's, among ``names``, secrets sealed, and the
        new values of the task's pool they refer to (see :mod:`shared.store.pool`)."""
        if "env" in names:  # the stored resolved env leans on the env: written with it
            names = names | {"resolved"}
        task = {n: doc[n] for n in names if n in doc and n not in REVISION_FIELDS}
        rev = {n: doc[n] for n in names if n in doc and (n in REVISION_FIELDS or
                                                         n in SHARED_FIELDS)}
        written = {n for n in SEALED_FIELDS if n in rev}
        new_values: dict[str, str] = {}
        if written:  # a state change alone writes no list: nothing to share
            lists = {n: doc.get(n) for n in SEALED_FIELDS}
            pooled = pool.share(lists, written, known or {}, self._pool_value)
            rev.update(pooled.lists, refs=pooled.refs)
            new_values = pooled.new
        for name in SEALED_FIELDS:
            if any(e.get("secret") and "value" in e for e in rev.get(name) or []):
                rev[name] = [dict(e) for e in rev[name]]  # the caller keeps clear values
                seal_entries(rev[name], self.cipher)
        if rev.get("resolved"):
            rev["resolved"] = records.compact_resolved(rev["resolved"], doc.get("env"))
        return task, rev, new_values

    def _pool_value(self, value: str, secret: bool) -> str:
        """A value as the pool stores it: ``{"v": value}``, a secret's ``{"s": sealed}``."""
        if not secret:
            plain = _json({"v": value})
            packed = _packed(plain)  # deflated when that is shorter: text often is
            return packed if len(packed) < len(plain) else plain
        entry = [{"name": "", "value": value, "secret": True}]
        seal_entries(entry, self.cipher)
        return _json({"s": entry[0]["sealed"]})

    def _opened(self, rev: Doc, values: list[Any] | None = None) -> Known:
        """A revision's fields as read, made whole in place: pooled values put back,
        resolved env expanded, secrets opened.  ``values``: the pool's values for the
        revision's ``refs``, in order.  Returns what the pool holds for it, to share."""
        refs = rev.pop("refs", None) or []
        stored = dict(zip(refs, (_unpacked("env", json.loads(v)) if v is not None else None
                                 for v in values or []), strict=False))
        put_back = pool.restore(rev.get("env"), stored) + pool.restore(rev.get("next_env"),
                                                                      stored)
        if rev.get("resolved"):
            rev["resolved"] = records.expand_resolved(rev["resolved"], rev.get("env"))
            put_back += pool.restore(rev["resolved"], stored)
        for name in SEALED_FIELDS:
            open_entries(rev.get(name), self.cipher)
        return pool.known(put_back)

    # --- reading -------------------------------------------------------------------------

    def get(self, task_id: str) -> Doc:
        """The task, whoever owns it: who may read it is the API's one rule
        (``ProjectStore.task_access``), not the store's."""
        return self._fetch(task_id)[1]

    def position(self, task_id: str) -> tuple[int, str] | None:
        """The current revision and its state, without the record; None if gone."""
        revision, state = self.r.hmget(self.keys.task(task_id), ["revision", "state"])  # type: ignore[misc]
        if revision is None or state is None:
            return None
        return int(json.loads(revision)), str(json.loads(state))

    def waiting(self, task_id: str) -> tuple[int, str, float, str | None] | None:
        """:meth:`position`, when the record last changed and the host whose run slots the
        revision waits for (``waits_on``); None if gone."""
        revision, state, updated_at = self.r.hmget(  # type: ignore[misc]
            self.keys.task(task_id), ["revision", "state", "updated_at"])
        if revision is None or state is None or updated_at is None:
            return None
        number = int(json.loads(revision))
        host = self.r.hget(self.keys.revision(task_id, number), "waits_on")
        return (number, str(json.loads(state)), float(json.loads(updated_at)),
                None if host is None else str(json.loads(host)))

    def find(self, task_id: str) -> Doc | None:
        try:
            return self.get(task_id)
        except NotFound:
            return None

    def _fetch(self, task_id: str) -> tuple[str, Doc]:
        """The write counter and the whole current record, in one round trip."""
        read, doc, _ = self._load(task_id)
        return read.v, doc

    def _load(self, task_id: str) -> tuple[Read, Doc, Known]:
        """:meth:`_fetch`, with the long values the task's pool holds for the revision."""
        found = self._read(keys=[self.keys.task(task_id)], args=[REVISION_SUFFIX,
                                                                 VALUES_SUFFIX])
        if not found:
            raise NotFound(f"no task {task_id}")
        if b"doc" in found[0] or "doc" in found[0]:  # from before revisions had own keys
            self._migrate(task_id)
            return self._load(task_id)
        return self._record(found[0], found[1], found[2])

    def _record(self, task_fields: list[Any], rev_fields: list[Any],
                values: list[Any] | None = None) -> tuple[Read, Doc, Known]:
        """The write counter, the record and what its pool holds, from the two hashes'
        fields and the pool's values as read."""
        task, rev = _decoded(task_fields), _decoded(rev_fields)
        read = Read(task.pop("v"), task.get("revision"), _sizes(task_fields), _sizes(rev_fields))
        for own in ("seq", "bytes", "bytes_allowed"):  # the scripts' own fields
            task.pop(own, None)
        known = self._opened(rev, [as_text(x) if x is not None else None
                                   for x in values or []])
        return read, {**rev, **task}, known

    def _migrate(self, task_id: str) -> None:
        """Rewrite a one-JSON-document record in today's layout, once, under WATCH.

        Such records (``doc``, ``state``, ``v``, ``seq`` in one hash, past revisions
        in ``doc["history"]``) stay readable: the first read converts them.
        """
        key = self.keys.task(task_id)
        with self.r.pipeline() as pipe:
            try:
                pipe.watch(key)
                raw, v = pipe.hmget(key, ["doc", "v"])
                if raw is None:
                    return  # converted by someone else meanwhile
                doc = json.loads(raw)
                for entries in legacy_env_lists(doc):
                    open_entries(entries, self.cipher)
                current, past = legacy_split(doc)
                pipe.multi()
                pipe.hdel(key, "doc")
                task_fields, _, _ = self._split(current, set(current))
                pipe.hset(key, mapping={"v": int(as_text(v)) + 1, **_encoded(task_fields)})
                for rev in [*past, current]:
                    _, rev_fields, values = self._split(rev, set(rev))
                    pipe.hset(self.keys.revision(task_id, rev["revision"]),
                              mapping=_encoded(rev_fields))
                    if values:
                        pool_values: dict[Any, Any] = dict(values)
                        pipe.hset(self.keys.values(task_id), mapping=pool_values)
                pipe.execute()
            except redis.WatchError:
                return  # it changed under us: the caller reads it again

    def revision(self, task_id: str, revision: int) -> Doc:
        """One revision as stored: env, resolved env, errors, warnings, outcome."""
        raw = self.r.hgetall(self.keys.revision(task_id, revision))
        if not raw:
            raise NotFound(f"task {task_id} has no revision {revision}")
        rev = _decoded([x for pair in raw.items() for x in pair])  # type: ignore[union-attr]
        refs = rev.get("refs") or []
        values = self.r.hmget(self.keys.values(task_id), refs) if refs else []
        self._opened(rev, [as_text(x) if x is not None else None
                           for x in values])  # type: ignore[union-attr]
        return {**rev, "revision": revision}

    def revisions(self, task_id: str, count: int) -> list[Doc]:
        """The small fields of revisions 1..count, oldest first: one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for n in range(1, count + 1):
            pipe.hmget(self.keys.revision(task_id, n), list(REVISION_SUMMARY))
        return [{"revision": n, **{f: json.loads(v) for f, v in zip(REVISION_SUMMARY, values,
                                                                    strict=True) if v}}
                for n, values in enumerate(pipe.execute(), start=1)]

    def page(self, owner: str | None = None, state: str | None = None,
             cursor: int | None = None, limit: int = 50, project: str | None = None) -> Page:
        """Summaries, newest first; ``cursor`` is the position the previous page ended at.

        With ``project``, that project's tasks (its index), in every state and of every owner.
        """
        if state is None:
            low, top = "-inf", f"({cursor}" if cursor is not None else "+inf"
        else:
            low, top = state_scores.below(state, cursor)
        pairs: Any = self.r.zrevrangebyscore(self._listed(owner, state, project), top, low,
                                             start=0, num=limit + 1, withscores=True)
        if state is not None:
            pairs = [(t, state_scores.seq_of(state, score)) for t, score in pairs]
        more = len(pairs) > limit
        pairs = pairs[:limit]
        pipe = self.r.pipeline(transaction=False)
        for task_id, _ in pairs:
            pipe.hmget(self.keys.task(as_text(task_id)), list(SUMMARY_FIELDS))
        items = []
        for (task_id, _), values in zip(pairs, pipe.execute(), strict=True):
            if values[0] is not None:
                items.append({f: json.loads(v) for f, v in zip(SUMMARY_FIELDS, values,
                                                               strict=True) if v is not None})
            elif (doc := self.find(as_text(task_id))) is not None:  # a record to migrate
                items.append({f: doc.get(f) for f in SUMMARY_FIELDS})
        return Page(items, int(pairs[-1][1]) if more and pairs else None)

    def _listed(self, owner: str | None, state: str | None, project: str | None) -> str:
        """The index a listing pages through."""
        if project is None:
            return self.keys.index(owner) if state is None else self.keys.by_state(owner)
        if owner is not None or state is not None:  # the project's index has no such split
            raise ValueError("a project's tasks are listed in every state, of every owner")
        return self.keys.project_index(project)

    def reseal(self, task_id: str) -> int:
        """Seal every revision's secrets again with the first key (rotation); the count.

        Each revision is rewritten under WATCH, so a stage writing it meanwhile is
        never overwritten: the reseal reads it again.
        """
        doc = self._fetch(task_id)[1]  # converts a record of the old layout
        last, counted = int(doc["revision"]), [self.keys.task(task_id),
                                               self.keys.quota_bytes(user(doc["owner"]))]
        for n in range(1, last + 1):
            self._reseal_revision(self.keys.revision(task_id, n), counted)
        self._reseal_pool(self.keys.values(task_id), counted)
        return last

    def _reseal_revision(self, key: str, counted: list[str]) -> None:
        with self.r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    raw = pipe.hmget(key, list(SEALED_FIELDS))
                    sealed = self._resealed({
                        name: _unpacked(name, json.loads(value)) for name, value
                        in zip(SEALED_FIELDS, raw, strict=True)  # type: ignore[arg-type]
                        if value is not None})
                    pipe.multi()
                    if sealed:  # counted: a deflated list's length may change
                        self._write(keys=[key, *counted], args=_pairs(sealed), client=pipe)
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue

    def _reseal_pool(self, key: str, counted: list[str]) -> None:
        """The pool's sealed values, sealed again.  A pool value never changes otherwise
        (a changed value gets a new id), so no other writer can race this one."""
        stored: Any = self.r.hgetall(key)
        again = {}
        for ref, raw in stored.items():
            value = json.loads(raw)
            if "s" in value:
                entry = [{"name": "", "sealed": value["s"], "secret": True}]
                open_entries(entry, self.cipher)
                again[as_text(ref)] = self._pool_value(entry[0]["value"], True)
        if again:
            self._write(keys=[key, *counted], args=_flat(again))

    def _resealed(self, stored: Doc) -> Doc:
        """Of a revision's stored lists, those holding a secret, sealed again."""
        env = stored.get("env")
        out = {}
        for name, entries in stored.items():
            if name == "resolved":
                entries = records.expand_resolved(entries or [], env)
            if not any("sealed" in e for e in entries or []):
                continue
            open_entries(entries, self.cipher)
            seal_entries(entries, self.cipher)
            out[name] = records.compact_resolved(entries, env) if name == "resolved" else entries
        return out

    # --- stored bytes ----------------------------------------------------------------------

    def stored_bytes(self, owner: str) -> int:
        """What ``owner``'s task records take, as the scripts count it (O(1))."""
        return int(self.r.get(self.keys.quota_bytes(user(owner))) or 0)

    def recount_bytes(self, owner: str) -> int:
        """What ``owner``'s counted task records and their logs take, measured field by
        field and log by log: what :meth:`stored_bytes` must always equal.  Costs every
        record: for checks only."""
        total = 0
        for task_id in (as_text(t) for t in self.r.zrange(self.keys.index(owner), 0, -1)):
            task: Any = self.r.hgetall(self.keys.task(task_id))
            fields = {as_text(k): as_text(v) for k, v in task.items()}
            if "bytes" not in fields:
                continue  # stored before counting began and not touched since
            last = int(json.loads(fields["revision"]))
            hashes = [fields, self._strings(self.keys.values(task_id))]
            hashes += [self._strings(self.keys.revision(task_id, n)) for n in range(1, last + 1)]
            total += sum(len(k.encode()) + len(v.encode()) for h in hashes
                         for k, v in h.items() if k not in UNCOUNTED)
            total += sum(int(self.r.strlen(self.keys.log(task_id, n)))
                         for n in range(1, last + 1))
        return total

    def _strings(self, key: str) -> dict[str, str]:
        found: Any = self.r.hgetall(key)
        return {as_text(k): as_text(v) for k, v in found.items()}

    def adopt_old_state_indexes(self, chunk: int = 1000) -> int:
        """Move the members of the indexes of one state each (the layout before
        :meth:`Keys.by_state`) into the by-state indexes; how many were moved.

        Run where a deployment starts (the reconciler does, before its first pass): once
        done, it leaves a mark, and a start costs one look at it; until then, one ``SCAN``
        of the keys finds the owners' indexes.  ``chunk`` members per call, so Redis is
        never held long; several processes may run it at once."""
        done = self.keys.state_indexes_adopted()
        if self.r.exists(done):
            return 0
        old = [(self.keys.old_state_index(state), self.keys.by_state(), state)
               for state in states.ALL]
        owners = self.keys.index("")  # an owner's index, without the owner's name
        for key in map(as_text, self.r.scan_iter(match=f"{owners}*:state:*", count=1000)):
            head, _, state = key.rpartition(":state:")
            if state in state_scores.RANK:
                old.append((key, self.keys.by_state(head.removeprefix(owners)), state))
        moved = 0
        for key, target, state in old:
            left = before = int(self.r.zcard(key))
            while left:
                left = int(self._adopt_state_index(keys=[key, target],
                                                   args=[state_scores.base(state), chunk]))
            moved += before
        self.r.set(done, "1")
        if moved:
            log.info("moved %d index entries of the layout before the by-state indexes", moved)
        return moved

    def ping(self) -> None:
        """Raise when Redis cannot be reached."""
        self.r.ping()

    def all_ids(self) -> list[str]:
        return [as_text(t) for t in self.r.zrange(self.keys.index(), 0, -1)]

    def ids_in_state(self, state: str, limit: int = 1000) -> list[str]:
        return [as_text(t) for t in self.r.zrangebyscore(
            self.keys.by_state(), *state_scores.above(state), start=0, num=limit)]

    def iter_ids_in_state(self, state: str, page: int = 1000) -> Iterator[str]:
        """Every id in ``state``, ``page`` per round trip, by creation order (the index's
        score): an id leaving the state meanwhile shifts no later page, so none is skipped."""
        after = None
        while True:
            batch: Any = self.r.zrangebyscore(self.keys.by_state(),
                                              *state_scores.above(state, after), start=0,
                                              num=page, withscores=True)
            yield from (as_text(member) for member, _ in batch)
            if len(batch) < page:
                return
            after = state_scores.seq_of(state, batch[-1][1])

    def latest_ids(self, project: str | None = None, final_limit: int = 1000
                   ) -> list[str]:
        """Every task not final, then the ``final_limit`` most recent final ones: all
        tasks', or one project's.  What a draft policy's impact is measured on.

        Costs the tasks in flight plus, for a project, its newest tasks until enough final
        ones are found; never the whole history.
        """
        active = [as_text(t) for t in self.r.zrangebyscore(
            self.keys.by_state(), *state_scores.unfinished())]
        if project is not None:
            active = [t for t, p in zip(active, self._fields(active, "project"), strict=True)
                      if p == project]
        final = (self._recent_final(final_limit) if project is None
                 else self._recent_final_of(project, final_limit))
        return list(dict.fromkeys(active + final))  # one that ended meanwhile is in both

    def _fields(self, ids: list[str], name: str) -> list[Any]:
        pipe = self.r.pipeline(transaction=False)
        for task_id in ids:
            pipe.hget(self.keys.task(task_id), name)
        return [json.loads(v) if v is not None else None for v in pipe.execute()]

    def _recent_final(self, limit: int) -> list[str]:
        found: list[tuple[float, str]] = []
        for state in sorted(states.FINAL):
            low, top = state_scores.below(state)
            pairs: Any = self.r.zrevrangebyscore(self.keys.by_state(), top, low, start=0,
                                                 num=limit, withscores=True)
            found += [(state_scores.seq_of(state, score), as_text(t)) for t, score in pairs]
        return [t for _, t in sorted(found, reverse=True)[:limit]]

    def _recent_final_of(self, project: str, limit: int, page: int = 500
                         ) -> list[str]:
        found: list[str] = []
        start = 0
        while len(found) < limit:
            ids = [as_text(t) for t in self.r.zrevrange(self.keys.project_index(project),
                                                        start, start + page - 1)]
            found += [t for t, state in zip(ids, self._fields(ids, "state"), strict=True)
                      if state in states.FINAL]
            if len(ids) < page:
                break
            start += page
        return found[:limit]

    # --- retention -----------------------------------------------------------------------

    def expire_finished(self, now: float, limit: int = 500) -> int:
        """Delete finished tasks past their retention: record, revisions, logs, index entries.

        Costs what expires, never what is stored.
        """
        due = self.r.zrangebyscore(self.keys.expiry(), "-inf", now, start=0, num=limit)
        return sum(self._delete_task(as_text(task_id)) for task_id in due)

    def _delete_task(self, task_id: str) -> int:
        k = self.keys
        fields: Any = self.r.hmget(k.task(task_id), ["v", "owner", "state", "revision",
                                                     "project"])
        if fields[0] is None:
            self.r.zrem(k.expiry(), task_id)
            return 0
        v = as_text(fields[0])
        owner, state, last = (json.loads(x) for x in fields[1:4])
        project = json.loads(fields[4]) if fields[4] is not None else None
        indexes = [k.index(), k.index(owner), k.by_state(), k.by_state(owner)]
        indexes += [k.project_index(project)] if project else []
        own = [key for n in range(1, last + 1) for key in (
            k.revision(task_id, n), k.log(task_id, n), k.log_cut(task_id, n),
            k.beat(task_id, n), k.suspect(task_id, n))]
        return int(self._delete(keys=[k.expiry(), *indexes, k.task(task_id), k.values(task_id),
                                      *own],
                                args=[v, task_id, len(indexes), k.quota_bytes(user(owner))]))

    # --- logs ---------------------------------------------------------------------------

    def append_log(self, task_id: str, revision: int, text: str) -> int | None:
        """Append output; past ``LOG_LIMIT`` bytes only the newest half is kept.  The
        bytes the log keeps now.

        Sent a chunk (``logtail.MAX_CHUNK``) per command, however long the text: Redis
        never holds more of it at once.  Counted in the owner's stored bytes; past their
        quota the output is dropped where it was reached, with a line saying so
        (``shared.access.quotas``): never refused, so no other owner's output waits.

        None when Redis is full: the output is dropped (and said so in the worker's
        log), so the room left goes to the task's state and outcome, which must land."""
        size = None
        try:
            for piece in pieces(text):
                size = self.logs.append(task_id, revision, piece, self.LOG_LIMIT)
        except redis.exceptions.OutOfMemoryError:
            log.warning("Redis is full (maxmemory): %d characters of task %s r%s's output "
                        "were not stored", len(text), task_id, revision)
            return None
        return self.logs.append(task_id, revision, "", self.LOG_LIMIT) if size is None \
            else size

    def read_log(self, task_id: str, revision: int) -> str:
        raw = self.r.get(self.keys.log(task_id, revision))
        return as_text(raw) if raw is not None else ""
