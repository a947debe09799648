"""Comparing revisions of a task's env: diff, rerun-as-it-was, drift.

Pure functions over resolved variables as stored (``{name, value, source,
secret, ...}``).  Secret values are compared in memory, in constant time, and
never shown: a secret is only ``changed`` or ``unchanged``.  Nothing derived
from a secret value (not even a hash) is returned or stored.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from typing import Any

from shared.secrets import MASK

Var = Mapping[str, Any]
# Sources whose value is always today's: the platform's identity and what admins protect.
NEVER_PINNED = frozenset({"platform", "protected"})


def _by_name(variables: Iterable[Var]) -> dict[str, Var]:
    return {v["name"]: v for v in variables}


def _same(a: Var, b: Var) -> bool:
    if bool(a.get("secret")) != bool(b.get("secret")):
        return False
    return hmac.compare_digest(str(a["value"]).encode(), str(b["value"]).encode())


def _shown(var: Var) -> Any:
    return MASK if var.get("secret") else var["value"]


def diff(old: Iterable[Var], new: Iterable[Var]) -> dict[str, Any]:
    """Variables added, removed and changed from ``old`` to ``new``; secrets masked."""
    before, after = _by_name(old), _by_name(new)
    added = [{"name": n, "value": _shown(v), "source": v.get("source"),
              "secret": bool(v.get("secret"))} for n, v in after.items() if n not in before]
    removed = [{"name": n, "value": _shown(v), "source": v.get("source"),
                "secret": bool(v.get("secret"))} for n, v in before.items() if n not in after]
    changed, unchanged = [], []
    for name in (n for n in after if n in before):
        a, b = before[name], after[name]
        if _same(a, b):
            unchanged.append(name)
            if a.get("source") == b.get("source"):
                continue
        changed.append({"name": name, "old": _shown(a), "new": _shown(b),
                        "old_source": a.get("source"), "new_source": b.get("source"),
                        "secret": bool(a.get("secret") or b.get("secret")),
                        "value_changed": name not in unchanged})
    return {"added": added, "removed": removed, "changed": changed, "unchanged": unchanged}


def pinned_env(resolved: Iterable[Var], protected_now: set[str]) -> list[dict[str, Any]]:
    """Revision n's values the user set, as the task's own env, for a rerun "as it was".

    Platform and protected values are left out (they are always today's), and so
    is any name today's policy protects: the rerun takes the protected value.  Its
    defaults are kept as defaults (:func:`pinned_defaults`), never made the user's.
    """
    return [{"name": v["name"], "value": v["value"], "secret": bool(v.get("secret"))}
            for v in _pinnable(resolved, protected_now) if v.get("source") != "default"]


def pinned_defaults(resolved: Iterable[Var], protected_now: set[str]) -> list[dict[str, Any]]:
    """Revision n's defaults, each with the scope and policy version that gave it: a
    pinned rerun keeps their values (as it was), still as defaults, so the user's own
    values stay the only ones shown as the user's."""
    return [{"name": v["name"], "value": v["value"], "secret": bool(v.get("secret")),
             "scope": v.get("scope"), "policy_version": v.get("policy_version")}
            for v in _pinnable(resolved, protected_now) if v.get("source") == "default"]


def _pinnable(resolved: Iterable[Var], protected_now: set[str]) -> list[Var]:
    return [v for v in resolved
            if v.get("source") not in NEVER_PINNED and v["name"] not in protected_now]


def drift(old: Iterable[Var], new: Iterable[Var], old_version: Any,
          new_version: Any) -> list[dict[str, Any]]:
    """Each variable whose value differs from the earlier revision, and why."""
    before, after = _by_name(old), _by_name(new)
    report = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is not None and b is not None and _same(a, b):
            continue
        if (a or b or {}).get("source") == "platform":
            continue  # identity variables (revision number, policy version) always move
        report.append({"name": name, "old": _shown(a) if a else None,
                       "new": _shown(b) if b else None,
                       "secret": bool((a or {}).get("secret") or (b or {}).get("secret")),
                       "why": _why(a, b, old_version, new_version)})
    return report


def _why(old: Var | None, new: Var | None, old_version: Any, new_version: Any) -> str:
    versions = f"policy v{old_version} -> v{new_version}"
    if new is None:
        return f"no longer set: its {old.get('source') if old else ''} entry is gone ({versions})"
    source = new.get("source")
    if old is None:
        return f"new {source} value ({versions})"
    if source == "protected":
        return f"protected value changed ({versions})"
    if source == "default":
        return f"default changed ({versions})"
    return f"the task's own value changed (now from {source})"
