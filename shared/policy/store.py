"""Policy versions in Redis: immutable, numbered, one sequence per scope.

A version is written once and never changed (rotation aside, which re-seals its
secrets in place); a task records the versions it was resolved with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import redis

from shared.errors import NotFound
from shared.keys import Keys
from shared.policy.model import PLATFORM_SCOPE, Policy, project_scope
from shared.policy.scopes import Chain, scopes_for
from shared.redis_conn import as_text
from shared.secrets import Cipher, open_entries, seal_entries

_PUT_POLICY = """
local sequence, version_prefix, current, body = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local n = redis.call('INCR', sequence)
redis.call('SET', version_prefix .. n, body)
redis.call('SET', current, n)
return n
"""


class PolicyStore:
    """Immutable, numbered policy versions of one scope; version 0 is the empty policy.

    The platform's store makes the store of a project's policy (:meth:`scoped`): the same
    code and cipher over the project's own keys, numbered on their own.
    """

    def __init__(self, client: redis.Redis, prefix: str = "taskenv",
                 cipher: Cipher | None = None, scope: str = PLATFORM_SCOPE) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self.cipher = cipher
        self.scope = scope
        self._put = client.register_script(_PUT_POLICY)
        self._versions: dict[int, Policy] = {}
        self._scoped: dict[str, PolicyStore] = {}

    def scoped(self, scope: str) -> PolicyStore:
        """The store of another scope's policy (``project:<name>``), made once."""
        if scope == self.scope:
            return self
        if scope not in self._scoped:
            self._scoped[scope] = PolicyStore(self.r, self.keys.prefix, self.cipher, scope)
        return self._scoped[scope]

    def chain(self, task: Mapping[str, Any], platform: Policy | None = None) -> Chain:
        """The current policies of the scopes a task with these fields names, outermost
        first, in one round trip (``platform``: a version of the platform's policy to use
        instead of its current one, as a preview of an older version asks)."""
        scopes = scopes_for(task)
        if platform is not None:
            inner = self.currents(scopes[1:])
            return Chain((platform, *(inner[s] for s in scopes[1:])))
        current = self.currents(scopes)
        return Chain(tuple(current[s] for s in scopes))

    def current_keys(self, scopes: Sequence[str]) -> list[str]:
        """The keys of the scopes' current version numbers, for a caller that reads them in
        a round trip of its own (``MGET``) and hands them to :meth:`chain_from`."""
        return [self.keys.policy_current(scope) for scope in scopes]

    def chain_from(self, scopes: Sequence[str], numbers: Sequence[Any]) -> Chain:
        """The chain of ``scopes`` whose current version numbers were read as ``numbers``."""
        current = self._policies(scopes, numbers)
        return Chain(tuple(current[s] for s in scopes))

    def put(self, policy: Policy) -> Policy:
        body = replace(policy, scope=self.scope).to_dict()
        body.pop("version")
        seal_entries(body["defaults"], self.cipher)
        seal_entries(body["protected"], self.cipher)
        k = self.keys
        n = self._put(keys=[k.policy_seq(self.scope), k.policy_version(scope=self.scope),
                            k.policy_current(self.scope)],
                      args=[json.dumps(body)])
        return self.get(int(n))

    def current(self) -> Policy:
        n = self.r.get(self.keys.policy_current(self.scope))
        return self.get(int(n)) if n is not None else Policy(scope=self.scope)

    def currents(self, scopes: Sequence[str]) -> dict[str, Policy]:
        """The current policy of each scope: their version numbers in one round trip, each
        version then read once per process (a version never changes)."""
        if not scopes:
            return {}
        return self._policies(scopes, self.r.mget(self.current_keys(scopes)))  # type: ignore[arg-type]

    def _policies(self, scopes: Sequence[str], numbers: Sequence[Any]) -> dict[str, Policy]:
        return {scope: self.scoped(scope).get(int(n)) if n is not None else Policy(scope=scope)
                for scope, n in zip(scopes, numbers, strict=True)}

    def get(self, version: int) -> Policy:
        if version == 0:
            return Policy(scope=self.scope)
        if version in self._versions:  # versions are immutable: safe to keep
            return self._versions[version]
        self._versions[version] = policy = self._read(version)
        return policy

    def _read(self, version: int) -> Policy:
        raw = self.r.get(self.keys.policy_version(version, self.scope))
        if raw is None:
            raise NotFound(f"no policy version {version}")
        body = json.loads(raw)
        open_entries(body["defaults"], self.cipher)
        open_entries(body["protected"], self.cipher)
        return Policy.from_dict({**body, "version": version, "scope": self.scope})

    def reseal_all(self) -> int:
        """Seal every version's secrets again with the first key (rotation), in place,
        in this scope and, from the platform's store, in every project's; the count.

        Versions are immutable to readers: only their sealed form changes.
        """
        scopes = [self.scope]
        if self.scope == PLATFORM_SCOPE:
            scopes += [project_scope(as_text(name))
                       for name in self.r.smembers(self.keys.projects())]  # type: ignore[union-attr]
        return sum(self.scoped(scope)._reseal_versions() for scope in scopes)

    def _reseal_versions(self) -> int:
        count = 0
        for version in self.versions():
            key = self.keys.policy_version(version, self.scope)
            raw = self.r.get(key)
            if raw is None:
                continue
            body = json.loads(raw)  # type: ignore[arg-type]
            for entries in (body.get("defaults"), body.get("protected")):
                open_entries(entries, self.cipher)
                seal_entries(entries, self.cipher)
            self.r.set(key, json.dumps(body), xx=True)
            count += 1
        self._versions.clear()  # what was cached was opened with the old keys
        return count

    def versions(self) -> list[int]:
        n = self.r.get(self.keys.policy_seq(self.scope))
        return list(range(1, int(n) + 1)) if n is not None else []

    def retire(self) -> None:
        """Forget which version is current (a deleted project); versions stay, so the
        tasks resolved with them can still be explained, and numbering goes on."""
        self.r.delete(self.keys.policy_current(self.scope))
