"""Value rules an admin sets on variables: required, allowed, pattern, min/max, max_length.

A rule names a variable or a name glob (``NCCL_*``).  ``check_rules`` reports every
violation of a resolved env at once, each naming the variable, the rule, the limit
and the admin's description.  Patterns run on RE2, whose matching time is linear
in the value's length: an admin's pattern such as ``(a+)+$`` cannot stall a worker.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any, Protocol

import re2

from shared.errors import Problem
from shared.policy.conditions import TaskFacts, When, applies, check_when, may_overlap

RULE_KEYS = ("name", "required", "allowed", "pattern", "min", "max", "max_length",
             "description", "when", "severity", "documented")
# "error" rejects the task (as rules always did); "warning" only tells its owner.
SEVERITIES = ("error", "warning")
MAX_PATTERN_CHARS = 1000
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # an admin's typo is a Problem, not a line on stderr


class Valued(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def secret(self) -> bool: ...


@dataclass(frozen=True)
class Rule:
    name: str  # a variable name or a glob
    required: bool = False
    allowed: tuple[str, ...] | None = None
    pattern: str | None = None
    min: float | None = None
    max: float | None = None
    max_length: int | None = None
    description: str = ""
    when: When | None = None
    severity: str = "error"
    # Every variable the rule covers must be documented in the catalog that applies to the
    # task (checked by the doctor, which holds the catalog): advice made binding.
    documented: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rule:
        allowed = data.get("allowed")
        return cls(name=data["name"], required=bool(data.get("required", False)),
                   allowed=tuple(allowed) if allowed is not None else None,
                   pattern=data.get("pattern"), min=data.get("min"), max=data.get("max"),
                   max_length=data.get("max_length"), description=data.get("description") or "",
                   when=When.from_dict(data.get("when")),
                   severity=data.get("severity") or "error",
                   documented=bool(data.get("documented", False)))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.required:
            out["required"] = True
        if self.allowed is not None:
            out["allowed"] = list(self.allowed)
        for key in ("pattern", "min", "max", "max_length"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.description:
            out["description"] = self.description
        if self.when is not None:
            out["when"] = self.when.to_dict()
        if self.severity != "error":
            out["severity"] = self.severity
        if self.documented:
            out["documented"] = True
        return out

    def covers(self, name: str) -> bool:
        return fnmatchcase(name, self.name)


@lru_cache(maxsize=512)
def compiled(pattern: str) -> Any:
    """The RE2 program for ``pattern``; None if RE2 cannot compile it."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error:
        return None


def pattern_error(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used, or None if it can."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"is longer than {MAX_PATTERN_CHARS} characters"
    try:
        re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as error:
        reason = error.args[0] if error.args else "invalid"
        text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        return f"is not a valid regular expression ({text}); RE2 syntax, no backreferences"
    return None


# --- checking values ---------------------------------------------------------------------

def check_rules(variables: Iterable[Valued], rules: Iterable[Rule], task: TaskFacts,
                scope: str | None = None) -> list[Problem]:
    """Every violation of ``rules`` (those whose ``when`` matches ``task``) in ``variables``."""
    variables = list(variables)
    problems: list[Problem] = []
    for rule in rules:
        if not applies(rule.when, task):
            continue
        matching = [v for v in variables if rule.covers(v.name)]
        if rule.required and not matching:
            problems.append(_missing(rule, scope))
        for var in matching:
            problems += value_problems(var, rule, scope)
    return problems


def value_problems(var: Valued, rule: Rule, scope: str | None = None) -> list[Problem]:
    """Every way one variable's value breaks one rule (``required`` aside).

    A secret's value is never checked: whether it passes a rule would tell the rule's
    author (a project maintainer, through a rejected task, a refused policy or an impact
    preview) something about the value, a character at a time.  ``required`` still
    applies to secrets.
    """
    if var.secret:
        return []
    found: list[tuple[str, str, int | None]] = []
    if rule.allowed is not None and var.value not in rule.allowed:
        found.append(("allowed", f"is not one of {_listing(rule.allowed)}", None))
    if rule.pattern is not None:
        found += _pattern_problem(var.value, rule.pattern)
    found += _number_problems(var.value, rule)
    if rule.max_length is not None and len(var.value) > rule.max_length:
        found.append(("max_length", f"is {len(var.value)} characters long; "
                                    f"at most {rule.max_length} are allowed", rule.max_length))
    return [Problem(rule=f"rule.{kind}", variable=var.name, limit=limit,
                    message=f"{var.name}: {_shown(var)} {what}{_rule_note(rule, scope)}")
            for kind, what, limit in found]


def entry_problems(entry: Valued, entry_when: When | None, rules: Iterable[Rule],
                   field: str, origin: str, scope: str | None = None) -> list[Problem]:
    """A policy value (``origin``: "project default", ...) against every rule that
    could apply to the same task as the entry; ``field`` points at the entry."""
    return [replace(p, field=field, message=f"{origin} {p.message}")
            for rule in rules if rule.covers(entry.name) and may_overlap(rule.when, entry_when)
            for p in value_problems(entry, rule, scope)]


def _pattern_problem(value: str, pattern: str) -> list[tuple[str, str, int | None]]:
    program = compiled(pattern)
    if program is None:
        return [("pattern_invalid", f"cannot be checked: the pattern {pattern!r} is invalid",
                 None)]
    if program.fullmatch(value) is None:
        return [("pattern", f"does not match the pattern {pattern!r}", None)]
    return []


def _number_problems(value: str, rule: Rule) -> list[tuple[str, str, int | None]]:
    if rule.min is None and rule.max is None:
        return []
    number = _number(value)
    kind = "min" if rule.min is not None else "max"
    if number is None:
        return [(kind, f"is not a number, but the rule sets {_bounds(rule)}", None)]
    found: list[tuple[str, str, int | None]] = []
    if rule.min is not None and number < rule.min:
        found.append(("min", f"is below the minimum {rule.min:g}", _as_limit(rule.min)))
    if rule.max is not None and number > rule.max:
        found.append(("max", f"is above the maximum {rule.max:g}", _as_limit(rule.max)))
    return found


def _number(value: str) -> float | None:
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _missing(rule: Rule, scope: str | None) -> Problem:
    what = (f"at least one variable matching {rule.name} is required" if _is_glob(rule.name)
            else f"{rule.name} is required")
    return Problem(rule="rule.required", variable=rule.name,
                   message=f"{what} but the task does not set it{_rule_note(rule, scope)}")


def _rule_note(rule: Rule, scope: str | None) -> str:
    where = f" of {scope}" if scope else ""
    note = f" (rule {rule.name}{where}"
    note += f", when {rule.when.text()})" if rule.when is not None else ")"
    return note + (f": {rule.description}" if rule.description else "")


def _shown(var: Valued) -> str:
    if var.secret:
        return "the secret value"
    text = var.value if len(var.value) <= 40 else var.value[:40] + "..."
    return f"the value {text!r}"


def _listing(values: tuple[str, ...]) -> str:
    shown = ", ".join(repr(v) for v in values[:20])
    return shown + (f" (and {len(values) - 20} more)" if len(values) > 20 else "")


def _bounds(rule: Rule) -> str:
    parts = [f"min {rule.min:g}"] if rule.min is not None else []
    return " and ".join(parts + ([f"max {rule.max:g}"] if rule.max is not None else []))


def _as_limit(bound: float) -> int | None:
    return int(bound) if float(bound).is_integer() else None


def _is_glob(name: str) -> bool:
    return any(c in name for c in "*?[")


# --- checking rules at PUT time ----------------------------------------------------------

def check_rule_entries(entries: object, where: str = "rules") -> list[Problem]:
    """Every reason a policy's ``rules`` list cannot be saved."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        return [Problem(rule="rule.invalid", field=where, message=f"{where} must be a list")]
    problems: list[Problem] = []
    for index, entry in enumerate(entries):
        problems += _check_rule_entry(entry, f"{where}[{index}]")
    return problems


def _check_rule_entry(entry: object, where: str) -> list[Problem]:
    if not isinstance(entry, Mapping):
        return [Problem(rule="rule.invalid", field=where, message=f"{where} must be an object")]
    name = entry.get("name")
    label = name if isinstance(name, str) and name else None
    problems = [Problem(rule="rule.invalid", field=f"{where}.{key}", variable=label,
                        message=f"{where}: unknown key {key!r}; a rule has "
                                f"{', '.join(RULE_KEYS)}")
                for key in entry if key not in RULE_KEYS]
    if label is None or "=" in label or "\x00" in label:
        problems.append(Problem(rule="rule.invalid", field=f"{where}.name",
                                message=f"{where}: a rule needs a variable name or glob"))
    problems += _check_types(entry, where, label)
    problems += _check_pattern(entry.get("pattern"), where, label)
    problems += _check_bounds(entry, where, label)
    return problems + check_when(entry.get("when"), f"{where}.when")


def _check_types(entry: Mapping[str, Any], where: str, label: str | None) -> list[Problem]:
    wrong: list[tuple[str, str]] = []
    if not isinstance(entry.get("required", False), bool):
        wrong.append(("required", "true or false"))
    if not isinstance(entry.get("documented", False), bool):
        wrong.append(("documented", "true or false"))
    if entry.get("severity", "error") not in SEVERITIES:
        wrong.append(("severity", f"one of {', '.join(SEVERITIES)}"))
    allowed = entry.get("allowed")
    if allowed is not None and not (isinstance(allowed, list)
                                    and all(isinstance(v, str) for v in allowed)):
        wrong.append(("allowed", "a list of strings"))
    if not isinstance(entry.get("description", ""), str | None):
        wrong.append(("description", "a string"))
    max_length = entry.get("max_length")
    if max_length is not None and not (_is_int(max_length) and max_length >= 0):
        wrong.append(("max_length", "a whole number, 0 or more"))
    return [Problem(rule="rule.invalid", field=f"{where}.{key}", variable=label,
                    message=f"{where}.{key} must be {what}") for key, what in wrong]


def _check_pattern(pattern: object, where: str, label: str | None) -> list[Problem]:
    if pattern is None:
        return []
    reason = pattern_error(pattern) if isinstance(pattern, str) else "is not a string"
    if reason is None:
        return []
    return [Problem(rule="rule.pattern_invalid", field=f"{where}.pattern", variable=label,
                    message=f"{where}.pattern {reason}")]


def _check_bounds(entry: Mapping[str, Any], where: str, label: str | None) -> list[Problem]:
    problems = [Problem(rule="rule.invalid", field=f"{where}.{key}", variable=label,
                        message=f"{where}.{key} must be a finite number")
                for key in ("min", "max")
                if entry.get(key) is not None and not _is_number(entry[key])]
    low, high = entry.get("min"), entry.get("max")
    if not problems and low is not None and high is not None and low > high:
        problems.append(Problem(rule="rule.invalid", field=f"{where}.min", variable=label,
                                message=f"{where}: min {low} is above max {high}; "
                                        "no value could satisfy the rule"))
    return problems


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def valid_rules(entries: object) -> list[Rule]:
    """The rules of a list that pass their own checks (the others are reported as problems)."""
    if not isinstance(entries, list):
        return []
    return [Rule.from_dict(e) for e in entries
            if isinstance(e, Mapping) and not _check_rule_entry(e, "rules")]
