"""The edited layers of the catalog in Redis: the platform's entries and each project's.

One hash per layer (name -> JSON entry) and one small settings hash; reading what
applies to a task is one round trip (a pipeline of three ``HGETALL``/``HGET``), whatever
the number of tasks.  Each layer holds at most :data:`MAX_ENTRIES` entries of bounded
size (``catalog.check_entry``): a maintainer cannot make the platform hold more.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from shared.doctor.catalog import Catalog, Entry, applying, check_entry, edited
from shared.errors import EnvInvalid, NotFound, Problem
from shared.keys import Keys
from shared.policy.scopes import Chain
from shared.redis_conn import as_text

MAX_ENTRIES = 500
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
        pipe = self.r.pipeline(transaction=False)
        pipe.hget(self.keys.catalog_settings(), "builtin")
        for scope in scopes:
            pipe.hgetall(self.keys.catalog(scope))
        found = pipe.execute()
        on = as_text(found[0] or "on") != "off"
        return on, [self._entries(raw, scope) for raw, scope in zip(found[1:], scopes,
                                                                     strict=True)]

    @staticmethod
    def _entries(raw: Any, scope: str) -> list[Entry]:
        return [Entry.from_dict(json.loads(v), scope.split(":", 1)[0], scope)
                for _, v in sorted((as_text(k), v) for k, v in (raw or {}).items())]

    def applying(self, chain: Chain) -> Catalog:
        """The catalog that applies to a task whose scopes are ``chain``'s, under their
        policies (each scope's edited layer, outermost first)."""
        on, edited_layers = self.layers(chain.scopes())
        return applying(on, edited_layers, list(chain), chain.project)
