"""The chain of scopes whose policies apply to a task: the platform's, then each narrower
scope the task names (today its project), outermost first.

One type, built in one place (:func:`scopes_for` names the scopes; the store reads
their current policies in one round trip), and passed whole to everything that
resolves, checks or describes a task's env: resolution, a draft's impact, the check of
a scope's own policy against every scope above it, the catalog and the doctor.  A new
scope (a team's, a user's, a cluster's) is a new name in :func:`scopes_for` and keys in
the store: no code that resolves a task changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from shared.policy.model import PLATFORM_SCOPE, SCOPE_PREFIX, Policy, project_scope


def scopes_for(task: Mapping[str, Any]) -> list[str]:
    """The scopes whose policies apply to a task with these fields, outermost first."""
    project = task.get("project")
    return [PLATFORM_SCOPE, *([project_scope(project)] if project else [])]


@dataclass(frozen=True)
class Chain:
    """The policies of a task's scopes, outermost (the platform's) first.  An outer
    scope's protected value holds against every inner one; an inner scope's default
    is closer to the task and wins over an outer one's."""

    policies: tuple[Policy, ...]

    def __post_init__(self) -> None:
        if not self.policies or self.policies[0].scope != PLATFORM_SCOPE:
            raise ValueError("a chain of scopes starts with the platform's policy")

    @classmethod
    def of(cls, platform: Policy, *inner: Policy | None) -> Chain:
        """The platform's policy and each inner scope's that exists (None: no such scope)."""
        return cls((platform, *(p for p in inner if p is not None)))

    @property
    def platform(self) -> Policy:
        return self.policies[0]

    def __iter__(self) -> Iterator[Policy]:
        return iter(self.policies)

    def __len__(self) -> int:
        return len(self.policies)

    def scopes(self) -> list[str]:
        return [p.scope for p in self.policies]

    @property
    def project(self) -> str | None:
        """The project the chain's task is in, if any (what ``when: {project}`` matches)."""
        return next((s.removeprefix(SCOPE_PREFIX) for s in self.scopes()
                     if s.startswith(SCOPE_PREFIX)), None)

    def above(self, scope: str) -> Chain:
        """The scopes outside ``scope``: what a policy of ``scope`` is checked against."""
        names = self.scopes()
        return Chain(self.policies[:names.index(scope)] if scope in names else self.policies)

    def with_policy(self, policy: Policy) -> Chain:
        """The chain with ``policy`` standing in for its scope's current one (a draft)."""
        return Chain(tuple(policy if p.scope == policy.scope else p for p in self.policies))

    def versions(self) -> dict[str, int]:
        return {p.scope: p.version for p in self.policies}

    def protected_names(self) -> set[str]:
        """Every name some scope of the chain protects (whatever its ``when``)."""
        return {held.name for policy in self.policies for held in policy.protected}
