"""The admin's policy and the merge that applies it to a user's env list.

Precedence, highest first: platform identity variables > protected (admin) >
user > defaults (admin).  ``resolve`` is pure: the preview endpoint and the
policy worker call the same function, so they can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shared import envlist
from shared.envlist import EnvVar, Limits
from shared.errors import Problem

PLATFORM_NAMES = ("TASK_ID", "TASK_NAME", "TASK_ENV_REVISION", "TASK_POLICY_VERSION")
ON_CONFLICT = ("reject", "drop")
# Layers from lowest to highest precedence; a resolved variable names one of them.
LAYERS = ("default", "user", "protected", "platform")


@dataclass(frozen=True)
class Protected:
    name: str
    reason: str
    value: str | None = None  # None: the name is reserved, nothing is injected
    secret: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "reason": self.reason}
        if self.value is not None:
            out["value"] = self.value
        if self.secret:
            out["secret"] = True
        return out


@dataclass(frozen=True)
class Policy:
    version: int = 0
    defaults: tuple[EnvVar, ...] = ()
    protected: tuple[Protected, ...] = ()
    on_conflict: str = "reject"
    author: str | None = None
    created_at: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        return cls(
            version=int(data.get("version", 0)),
            defaults=tuple(envlist.parse(data.get("defaults", []))),
            protected=tuple(
                Protected(p["name"], p.get("reason", ""), p.get("value"),
                          bool(p.get("secret", False)))
                for p in data.get("protected", [])
            ),
            on_conflict=data.get("on_conflict", "reject"),
            author=data.get("author"),
            created_at=data.get("created_at"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "defaults": [d.to_dict() for d in self.defaults],
            "protected": [p.to_dict() for p in self.protected],
            "on_conflict": self.on_conflict,
            "author": self.author,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class Resolved:
    """One variable of the processed env, with where it came from."""

    name: str
    value: str
    source: str
    overrode: tuple[str, ...] = ()
    secret: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "source": self.source,
                "overrode": list(self.overrode), "secret": self.secret}


@dataclass
class Resolution:
    policy_version: int
    variables: list[Resolved] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_env(self) -> dict[str, str]:
        return {v.name: v.value for v in self.variables}


def platform_env(task_id: str, task_name: str, revision: int, policy_version: int) -> list[EnvVar]:
    """The identity variables the platform always sets; nobody may override them."""
    values = (task_id, task_name, str(revision), str(policy_version))
    return [EnvVar(n, v) for n, v in zip(PLATFORM_NAMES, values, strict=True)]


def check_policy(data: Mapping[str, Any], limits: Limits) -> list[Problem]:
    """Every reason an admin's policy cannot be saved."""
    defaults = list(data.get("defaults", []))
    protected = list(data.get("protected", []))
    problems = envlist.validate(defaults, limits, where="defaults")
    # A protected entry without a value still needs a valid name; "" stands in for its value
    # so that every entry is checked at its own position.
    problems += envlist.validate(
        [{"name": p.get("name"), "value": "" if p.get("value") is None else p.get("value")}
         for p in protected], limits, where="protected")
    default_names = {d.get("name") for d in defaults if isinstance(d.get("name"), str)}
    for entry in [*defaults, *protected]:
        name = entry.get("name")
        if name in PLATFORM_NAMES:
            problems.append(Problem(
                rule="policy.platform_reserved", variable=name,
                message=f"{name} is set by the platform for every task; "
                        "a policy cannot default or protect it"))
    for entry in protected:
        name = entry.get("name")
        label = name if isinstance(name, str) else None
        if label in default_names:
            problems.append(Problem(
                rule="policy.ambiguous", variable=label,
                message=f"{label} is both a default and protected; keep it in one list "
                        "(a protected entry with a value is injected into every task)"))
        if not str(entry.get("reason") or "").strip():
            problems.append(Problem(
                rule="policy.reason_required", variable=label,
                message=f"{label or 'a protected entry'}: a protected variable needs a reason "
                        "users can read"))
    if data.get("on_conflict", "reject") not in ON_CONFLICT:
        problems.append(Problem(
            rule="policy.on_conflict", field="on_conflict",
            message=f"on_conflict must be one of {', '.join(ON_CONFLICT)}"))
    return problems


def resolve(user_env: Iterable[EnvVar], policy: Policy,
            platform: Iterable[EnvVar]) -> Resolution:
    """Merge defaults, the user's list, protected values and platform variables."""
    result = Resolution(policy_version=policy.version)
    platform = list(platform)
    platform_names = {v.name for v in platform}
    protected = {p.name: p for p in policy.protected}
    accepted: list[EnvVar] = []
    for var in user_env:
        if var.name in platform_names:
            result.errors.append(Problem(
                rule="platform.reserved", variable=var.name,
                message=f"{var.name} is set by the platform for every task and cannot be set"))
        elif var.name in protected:
            _conflict(result, var, protected[var.name], policy.on_conflict)
        else:
            accepted.append(var)
    user_names = {v.name for v in accepted}
    dropped_users = {w.variable for w in result.warnings}
    for p in policy.protected:
        if p.value is not None:
            overrode = ("user",) if p.name in dropped_users else ()
            result.variables.append(Resolved(p.name, p.value, "protected", overrode, p.secret))
    for d in policy.defaults:
        if d.name not in user_names:
            result.variables.append(Resolved(d.name, d.value, "default", (), d.secret))
    default_names = {d.name for d in policy.defaults}
    for var in accepted:
        overrode = ("default",) if var.name in default_names else ()
        result.variables.append(Resolved(var.name, var.value, "user", overrode, var.secret))
    # Platform variables go first, where a reader looks for the task's identity.  The order
    # carries no meaning for values: references are never expanded (see shared.manifest).
    result.variables[:0] = [Resolved(v.name, v.value, "platform") for v in platform]
    return result


def _conflict(result: Resolution, var: EnvVar, rule: Protected, on_conflict: str) -> None:
    if on_conflict == "drop":
        result.warnings.append(Problem(
            rule="policy.protected", variable=var.name,
            message=f"{var.name} was not set: it is protected by the platform "
                    f"({rule.reason})"))
    else:
        result.errors.append(Problem(
            rule="policy.protected", variable=var.name,
            message=f"{var.name} is protected by the platform and cannot be set: "
                    f"{rule.reason}"))
