"""The env list a user submits, and the rules it must follow.

``validate`` is pure and reports every problem at once, each naming the
variable, the rule and the limit, so a user fixes a list in one round trip.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.config import DEFAULTS
from shared.errors import Problem
from shared.secrets import MIN_SECRET_LENGTH

SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Kubernetes >= 1.34 accepts any printable ASCII except '='.
KUBERNETES_NAME = re.compile(r"[\x20-\x3c\x3e-\x7e]+")
NAME_RULES = {"shell": SHELL_NAME, "kubernetes": KUBERNETES_NAME}
NAME_RULE_TEXT = {
    "shell": "must match ^[A-Za-z_][A-Za-z0-9_]*$",
    "kubernetes": "must be printable ASCII without '='",
}
# Characters in a name.  Linux has no limit of its own below the 128 KiB of a whole
# NAME=value string, but no program reads a longer name: GitLab accepts keys of up to 255
# characters, a ConfigMap key 253.  What the platform does with a name (the doctor's search
# for the documented name it resembles, above all) grows with its length: the limit bounds
# that work for every tenant.
MAX_NAME_LENGTH = 256


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    secret: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "value": self.value}
        if self.secret:
            out["secret"] = True
        return out


@dataclass(frozen=True)
class Limits:
    name_rule: str = DEFAULTS.name_rule
    max_vars: int = DEFAULTS.max_vars
    max_value_bytes: int = DEFAULTS.max_value_bytes
    max_env_bytes: int = DEFAULTS.max_env_bytes

    @classmethod
    def from_settings(cls, settings: Any) -> Limits:
        return cls(
            name_rule=settings.name_rule,
            max_vars=settings.max_vars,
            max_value_bytes=settings.max_value_bytes,
            max_env_bytes=settings.max_env_bytes,
        )


def utf8_len(text: str) -> int | None:
    """Bytes of ``text`` in UTF-8; None if it cannot be encoded (a lone surrogate)."""
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        return None


def entry_bytes(name: str, value: str) -> int:
    """Bytes one variable takes in a process's environment: ``NAME=value\\0``."""
    return _stored_len(name) + _stored_len(value) + 2


def validate(entries: Iterable[Mapping[str, Any]], limits: Limits,
             where: str = "env") -> list[Problem]:
    """Every rule the list breaks; an empty list means it is valid.

    ``where`` names the list in fields and messages (``env``, ``defaults``...).
    """
    entries = list(entries)
    problems: list[Problem] = []
    if len(entries) > limits.max_vars:
        problems.append(Problem(
            rule="env.max_vars", limit=limits.max_vars,
            message=f"{len(entries)} variables; at most {limits.max_vars} are allowed",
        ))
    seen: dict[str, int] = {}
    total = 0
    rule = NAME_RULES[limits.name_rule]
    for index, entry in enumerate(entries):
        size = _clean_size(entry, rule, limits)
        if size is None:  # something is wrong with it: say what, in full
            problems += _check_entry(f"{where}[{index}]", entry, limits)
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        if name in seen:
            problems.append(Problem(
                rule="name.duplicate", variable=name, field=f"{where}[{index}].name",
                message=f"{_show(name)} is set twice ({where}[{seen[name]}] and "
                        f"{where}[{index}]); "
                        "set each variable once",
            ))
        else:
            seen[name] = index
        if size is not None:
            total += size
        elif isinstance(value := entry.get("value"), str):
            total += entry_bytes(name, value)
    if total > limits.max_env_bytes:
        problems.append(Problem(
            rule="env.max_bytes", limit=limits.max_env_bytes,
            message=f"the env takes {total} bytes; at most {limits.max_env_bytes} are allowed",
        ))
    return problems


# At most this many problems are stored or returned for one list; one more entry says
# how many were left out (a list of 120,000 duplicates must not become 120,000 errors).
MAX_PROBLEMS = 100
# What the API refuses before anything is stored: what could make a record large, a value
# no store can encode, a secret too short to hide.  The other rules are the validation
# stage's to report on the record (the workers check these again too).
STORABLE_RULES = frozenset({"env.max_vars", "env.max_bytes", "value.max_bytes",
                            "value.encoding", "secret.too_short"})


def check_storable(entries: Iterable[Mapping[str, Any]], limits: Limits) -> list[Problem]:
    """The problems that keep an env from being stored at all, capped."""
    return capped([p for p in validate(entries, limits) if p.rule in STORABLE_RULES])


def capped(problems: list[Problem], limit: int = MAX_PROBLEMS) -> list[Problem]:
    """The first ``limit`` problems and, if there were more, one saying how many."""
    if len(problems) <= limit:
        return problems
    more = len(problems) - limit
    return [*problems[:limit], Problem(
        rule="errors.truncated", limit=limit,
        message=f"... and {more} more problems; only the first {limit} are listed")]


def _clean_size(entry: Mapping[str, Any], rule: re.Pattern[str], limits: Limits) -> int | None:
    """The bytes an entry that breaks none of :func:`_check_entry`'s rules takes in a
    process's environment (``NAME=value\\0``), or None if it breaks one.  The common case
    at the cost of one encoding of each string; the messages only where they are needed."""
    name, value, secret = entry.get("name"), entry.get("value"), entry.get("secret", False)
    if not (isinstance(name, str) and isinstance(value, str) and isinstance(secret, bool)
            and name and len(name) <= MAX_NAME_LENGTH and rule.fullmatch(name)
            and "\x00" not in value
            and not (secret and len(value) < MIN_SECRET_LENGTH)):
        return None
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        return None
    if size > limits.max_value_bytes:
        return None
    return _stored_len(name) + size + 2


def _check_entry(where: str, entry: Mapping[str, Any], limits: Limits) -> list[Problem]:
    name, value = entry.get("name"), entry.get("value")
    label = name if isinstance(name, str) else None
    problems: list[Problem] = []
    if not isinstance(name, str) or not name:
        problems.append(Problem(
            rule="name.required", field=f"{where}.name",
            message=f"{where}: a variable needs a non-empty string name",
        ))
    elif not NAME_RULES[limits.name_rule].fullmatch(name):
        problems.append(Problem(
            rule=f"name.{limits.name_rule}", variable=name, field=f"{where}.name",
            message=f"{_show(name)}: a name {NAME_RULE_TEXT[limits.name_rule]}",
        ))
    if isinstance(name, str) and len(name) > MAX_NAME_LENGTH:
        problems.append(_too_long(where, name))
    if not isinstance(value, str):
        problems.append(Problem(
            rule="value.type", variable=label, field=f"{where}.value",
            message=f"{_show(label or where)}: the value must be a string, "
                    f"not {type(value).__name__}",
        ))
    else:
        problems += _value_problems(where, label, value, limits)
    secret = entry.get("secret", False)
    if not isinstance(secret, bool):
        problems.append(Problem(
            rule="secret.type", variable=label, field=f"{where}.secret",
            message=f"{_show(label or where)}: 'secret' must be true or false",
        ))
    elif secret and isinstance(value, str) and len(value) < MIN_SECRET_LENGTH:
        problems.append(_too_short(where, label))
    return problems


def _value_problems(where: str, label: str | None, value: str,
                    limits: Limits) -> list[Problem]:
    shown = _show(label or where)
    problems: list[Problem] = []
    if "\x00" in value:
        problems.append(Problem(
            rule="value.nul", variable=label, field=f"{where}.value",
            message=f"{shown}: the value contains a NUL byte, "
                    "which no process environment can hold",
        ))
    if utf8_len(value) is None:
        problems.append(Problem(
            rule="value.encoding", variable=label, field=f"{where}.value",
            message=f"{shown}: the value is not valid Unicode text "
                    "(it holds a lone surrogate) and cannot be encoded as UTF-8",
        ))
    # Sized even when it cannot be encoded: a huge value is refused for its size, too.
    if (size := _stored_len(value)) > limits.max_value_bytes:
        problems.append(Problem(
            rule="value.max_bytes", variable=label, field=f"{where}.value",
            limit=limits.max_value_bytes,
            message=f"{shown}: the value is {size} bytes; "
                    f"at most {limits.max_value_bytes} are allowed",
        ))
    return problems


def _too_long(where: str, name: str) -> Problem:
    return Problem(
        rule="name.max_length", variable=name, field=f"{where}.name", limit=MAX_NAME_LENGTH,
        message=f"{_show(name)}: the name is {len(name)} characters; at most "
                f"{MAX_NAME_LENGTH} are allowed (no program reads a longer name)",
    )


def _too_short(where: str, label: str | None) -> Problem:
    return Problem(
        rule="secret.too_short", variable=label, field=f"{where}.value",
        limit=MIN_SECRET_LENGTH,
        message=f"{_show(label or where)}: a secret value must be at least "
                f"{MIN_SECRET_LENGTH} characters, so that it can be hidden in logs without "
                "hiding ordinary output; use a longer value, or do not mark it secret",
    )


def _stored_len(text: str) -> int:
    """Bytes ``text`` takes, a lone surrogate counted as the 3 bytes it would take."""
    return len(text.encode("utf-8", "surrogatepass"))


SECRET_LOOKING = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL", re.IGNORECASE)


def advise(entries: Iterable[Mapping[str, Any]]) -> list[Problem]:
    """Warnings that do not stop a task: plain variables whose names look secret."""
    return [
        Problem(rule="secret.suggested", variable=e["name"],
                message=f"{e['name']} looks like a secret but is not marked secret: its value "
                        "is shown in clear; set \"secret\": true to store it encrypted and "
                        "masked")
        for e in entries
        if isinstance(e.get("name"), str) and not e.get("secret")
        and SECRET_LOOKING.search(e["name"])
    ]


def _show(name: str) -> str:
    """A name as it can be printed safely in a message (no control characters)."""
    return name if name.isprintable() and len(name) <= 200 else repr(name[:200])


def judgeable(entries: Iterable[Mapping[str, Any]], limits: Limits) -> list[dict[str, Any]]:
    """The entries of an invalid list the policy can still judge: a name that follows the
    name rule and the length limit, a string value and a boolean ``secret``, each name's
    first entry only."""
    rule = NAME_RULES[limits.name_rule]
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for entry in entries:
        name, value = entry.get("name"), entry.get("value")
        if not (isinstance(name, str) and len(name) <= MAX_NAME_LENGTH
                and rule.fullmatch(name) and isinstance(value, str)
                and isinstance(entry.get("secret", False), bool)) or name in seen:
            continue
        seen.add(name)
        out.append(dict(entry))
    return out


def parse(entries: Iterable[Mapping[str, Any]]) -> list[EnvVar]:
    """Turn validated entries into :class:`EnvVar` values (as ``EnvVar(name, value,
    secret)`` makes them, without the frozen ``__init__``'s cost per field: see
    ``Resolved.of_user``)."""
    made = []
    for e in entries:
        var = object.__new__(EnvVar)
        var.__dict__.update(name=e["name"], value=e["value"], secret=bool(e.get("secret", False)))
        made.append(var)
    return made
