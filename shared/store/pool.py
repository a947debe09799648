"""A task's value pool: long values stored once and shared by the revisions that hold them.

Each revision keeps its own env, resolved env and ``next_env``; without sharing, a
``PATCH`` of one variable of a 1 MiB env would store the whole MiB again.  So a value of
at least :data:`POOL_OVER` characters lives in the task's pool (a hash under the task's
key, ``...:vals``) under an id, and an entry holds ``{"ref": id}`` instead of the value;
the revision's ``refs`` field lists the ids it uses, so the store's read script fetches
them in the same round trip.  A new revision reuses an id when the entry of the same name
and kind in the revision it follows holds the same value, compared in memory; otherwise
the value is stored under a new id.  A revision thus stores what it changed.

Ids are drawn at random (:func:`uuid.uuid4`), never derived from a value: a digest of a
secret's plaintext would let anyone who sees keys or ids tell who holds the same secret.
Values are shared only within one task, only between revisions of it.  A secret's value
is stored sealed (``{"s": token}``), any other as ``{"v": value}``.  The pool goes when
its task goes.  Records written before the pool existed hold every value inline and read
as they always did.
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Entry = dict[str, Any]
# (name, secret) -> the ids and values the pool holds for such entries.
Known = dict[tuple[str, bool], list[tuple[str, str]]]
POOL_OVER = 256  # characters: shorter values are stored where they are used


@dataclass
class Shared:
    lists: dict[str, list[Entry]] = field(default_factory=dict)  # those not None
    refs: list[str] = field(default_factory=list)  # every id the revision's lists use
    new: dict[str, str] = field(default_factory=dict)  # id -> stored value, to write


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"),
                               b.encode("utf-8", "surrogatepass"))


def _key(entry: Mapping[str, Any]) -> tuple[str, bool]:
    return str(entry.get("name")), bool(entry.get("secret"))


def share(lists: Mapping[str, list[Entry] | None], written: set[str], known: Known,
          stored_as: Callable[[str, bool], str]) -> Shared:
    """The ``written`` lists with each long value replaced by a reference: to the value
    ``known`` (what the pool holds for the revision read) or one written earlier in this
    call when equal, else to a new id whose stored form (``stored_as(value, secret)``)
    is in ``new``.  Lists not written keep their stored form; only the ids they already
    use are counted in ``refs``."""
    out = Shared()
    seen: Known = {key: list(pairs) for key, pairs in known.items()}
    refs: set[str] = set()
    for name in sorted(written):
        entries = lists[name]
        if entries is not None:  # None (not resolved yet) stays None
            out.lists[name] = [_shared(e, seen, out, refs, stored_as) for e in entries]
    for name in set(lists) - written:  # already stored: the ids it uses, as known
        for entry in lists[name] or []:
            value = entry.get("value")
            if isinstance(value, str) and len(value) >= POOL_OVER:
                refs |= {ref for ref, v in known.get(_key(entry), []) if _same(v, value)}
    out.refs = sorted(refs)
    return out


def _shared(entry: Entry, seen: Known, out: Shared, refs: set[str],
            stored_as: Callable[[str, bool], str]) -> Entry:
    value = entry.get("value")
    if not isinstance(value, str) or len(value) < POOL_OVER or "name" not in entry:
        return entry
    key = _key(entry)
    ref = next((r for r, v in seen.get(key, []) if _same(v, value)), None)
    if ref is None:
        ref = uuid.uuid4().hex
        seen.setdefault(key, []).append((ref, value))
        out.new[ref] = stored_as(value, key[1])
    refs.add(ref)
    return {**{k: v for k, v in entry.items() if k != "value"}, "ref": ref}


def restore(entries: list[Entry] | None, stored: Mapping[str, Any]) -> list[tuple[Entry, str]]:
    """Put each referenced value back into its entry, in place (a secret's sealed form,
    opened afterwards with the rest); the entries restored, with their ids."""
    restored: list[tuple[Entry, str]] = []
    for entry in entries or []:
        ref = entry.pop("ref", None)
        if ref is None:
            continue
        value = stored.get(ref)
        if not isinstance(value, Mapping):
            raise KeyError(f"the value {ref} of {entry.get('name')} is missing from its pool")
        if "s" in value:
            entry["sealed"] = value["s"]
        else:
            entry["value"] = value["v"]
        restored.append((entry, ref))
    return restored


def known(restored: list[tuple[Entry, str]]) -> Known:
    """What the pool holds for a revision read, once its secrets are opened."""
    found: Known = {}
    for entry, ref in restored:
        if isinstance(entry.get("value"), str):
            found.setdefault(_key(entry), []).append((ref, entry["value"]))
    return found
