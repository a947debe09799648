"""The edited layers of the catalog in Redis: the platform's entries and each project's.

One hash per layer (name -> JSON entry) and one small settings hash; reading what
applies to a task is one round trip (a pipeline of three ``HGETALL``/``HGET``), whatever
the number of tasks.  Each layer holds at most :data:`MAX_ENTRIES` entries of bounded
size (``catalog.check_entry``): a maintainer cannot make the platform hold more.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from shared.doctor.catalog import Catalog, Entry, applying, check_entry, edited
from shared.errors import EnvInvalid, NotFound, Problem
from shared.keys import Keys
from shared.policy.model import Policy
from shared.policy.scopes import Chain, scopes_for
from shared.policy.store import PolicyStore
from shared.redis_conn import as_text

MAX_ENTRIES = 500
BUILT_KEPT = 32  # catalogs a process keeps built (each a few hundred entries at most)
PLATFORM = "platform"

_PUT = """
local entries, name, entry, most = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('HEXISTS', entries, name) == 0 and redis.call('HLEN', entries) >= most then
  return 0
end
redis.call('HSET', entries, name, entry)
return 1
"""


class CatalogInvalid(EnvInvalid):
    """A catalog entry that cannot be stored."""

    code = "catalog_invalid"


class CatalogStore:
    def __init__(self, client: redis.Redis, prefix: str = "taskenv",
                 max_entries: int = MAX_ENTRIES) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self.max_entries = max_entries
        self._put = client.register_script(_PUT)
        # Catalogs built for tasks, by what they were built from (see ``applying``).
        self._built: dict[tuple[Any, ...], tuple[tuple[Policy, ...], Catalog]] = {}
        self._building = threading.Lock()

    # --- settings ----------------------------------------------------------------------

    def builtin_on(self) -> bool:
        return as_text(self.r.hget(self.keys.catalog_settings(), "builtin") or "on") != "off"

    def set_builtin(self, on: bool) -> None:
        self.r.hset(self.keys.catalog_settings(), "builtin", "on" if on else "off")

    # --- entries -----------------------------------------------------------------------

    def put(self, scope: str, data: Mapping[str, Any]) -> Entry:
        """Store one entry in ``scope``'s layer (replacing one of the same name)."""
        problems = check_entry(data)
        if problems:
            raise CatalogInvalid("the catalog entry cannot be stored", problems)
        entry = edited(data, scope)
        stored = self._put(keys=[self.keys.catalog(scope)],
                           args=[entry.name, json.dumps(entry.stored()), self.max_entries])
        if not int(stored):  # type: ignore[arg-type]
            raise CatalogInvalid("the catalog is full", [Problem(
                rule="catalog.max_entries", variable=entry.name, limit=self.max_entries,
                message=f"{entry.name}: the {scope} catalog already holds {self.max_entries} "
                        "entries, the most one layer may hold; delete one first")])
        return entry

    def delete(self, scope: str, name: str) -> None:
        if not self.r.hdel(self.keys.catalog(scope), name):
            raise NotFound(f"no catalog entry {name} in the {scope} catalog")

    def layer(self, scope: str) -> list[Entry]:
        return self._entries(self.r.hgetall(self.keys.catalog(scope)), scope)

    def layers(self, scopes: Sequence[str]) -> tuple[bool, list[list[Entry]]]:
        """Whether the built-in catalog is on, and each scope's edited entries, in one
        round trip."""
        on, raws, _ = self._read(scopes)
        return on, [self._entries(raw, scope) for raw, scope in zip(raws, scopes, strict=True)]

    def _read(self, scopes: Sequence[str], *before: str) -> tuple[bool, list[dict[Any, Any]],
                                                                   Any]:
        """The layers; with ``before`` (keys), an ``MGET`` of them in the same round trip."""
        pipe = self.r.pipeline(transaction=False)
        if before:
            pipe.mget(before)
        pipe.hget(self.keys.catalog_settings(), "builtin")
        for scope in scopes:
            pipe.hgetall(self.keys.catalog(scope))
        found = pipe.execute()
        first, found = (found[0], found[1:]) if before else (None, found)
        return as_text(found[0] or "on") != "off", found[1:], first

    @staticmethod
    def _entries(raw: Any, scope: str) -> list[Entry]:
        return [Entry.from_dict(json.loads(v), scope.split(":", 1)[0], scope)
                for _, v in sorted((as_text(k), v) for k, v in (raw or {}).items())]

    def applying(self, chain: Chain) -> Catalog:
        """The catalog that applies to a task whose scopes are ``chain``'s, under their
        policies (each scope's edited layer, outermost first).

        The layers are read for every task (one round trip); the catalog is built again
        only when what it is built from changed: the same layers (by digest) under the
        same policy objects (a policy store hands out one object per version) give the
        catalog built before, which keeps those objects alive, so that no other policy
        can come to stand in their place."""
        on, raws, _ = self._read(chain.scopes())
        return self._built_from(chain, on, raws)

    def applying_to(self, task: Mapping[str, Any],
                    policies: PolicyStore) -> tuple[Chain, Catalog]:
        """The task's chain of current policies and the catalog under it, in one round
        trip (the chain's version numbers read with the layers): what the doctor needs for
        a task, where ``chain`` then ``applying`` would take two."""
        scopes = scopes_for(task)
        on, raws, numbers = self._read(scopes, *policies.current_keys(scopes))
        chain = policies.chain_from(scopes, numbers)
        return chain, self._built_from(chain, on, raws)

    def _built_from(self, chain: Chain, on: bool, raws: list[dict[Any, Any]]) -> Catalog:
        scopes = chain.scopes()
        policies = tuple(chain)
        key = (on, tuple(_digest(raw) for raw in raws), tuple(map(id, policies)),
               chain.project)
        kept = self._built.get(key)
        if kept is not None and all(a is b for a, b in zip(kept[0], policies, strict=True)):
            return kept[1]
        catalog = applying(on, [self._entries(raw, scope) for raw, scope in
                                zip(raws, scopes, strict=True)], list(policies), chain.project)
        with self._building:  # the API's threads share the store
            while len(self._built) >= BUILT_KEPT:
                self._built.pop(next(iter(self._built)))
            self._built[key] = (policies, catalog)
        return catalog


def _digest(raw: Mapping[Any, Any]) -> bytes:
    """One layer's stored entries, by content (names and their JSON, in name order)."""
    h = hashlib.blake2b(digest_size=16)
    for name, value in sorted(raw.items()):
        for part in (name, value):
            data = part if isinstance(part, bytes) else str(part).encode()
            h.update(len(data).to_bytes(4, "big"))
            h.update(data)
    return h.digest()
