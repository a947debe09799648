"""The catalog of documented variables: what a name means and which values it takes.

Layered by scope: the built-in catalog shipped with taskenv (``catalog.json``, facts
from each variable's upstream documentation), then the entries of each scope of the
task's chain, outermost first (the platform's, its project's), which admins and
maintainers edit, then what the policies themselves say of a name (a rule's
description and allowed values, a protected entry's reason, a default).

Facts are never erased by words: an edited entry replaces a built-in one only when it
says so (``replaces``), else its description is a note on the built-in entry; a
policy's words are always notes on a documented entry.  Between edited scopes, an inner
scope's entry replaces an outer one's.  Everything here is pure; the entries an admin
wrote live in :mod:`shared.doctor.store`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from importlib import resources
from typing import Any

from shared.errors import Problem

TYPES = ("string", "path", "url", "enum", "list", "options", "int", "float", "hf_bool")
# Highest precedence last (the edited layers are named after their scope's kind).
LAYERS = ("builtin", "platform", "project", "policy")
ENTRY_KEYS = ("name", "description", "type", "values", "case_insensitive", "min", "max",
              "source", "replaces")
# What one entry may hold: an entry is a tenant's data stored by the platform.
MAX_DESCRIPTION = 500
MAX_SOURCE = 500
# An http(s) address with a host, and no space or control character in it.
WEB_ADDRESS = re.compile(r"https?://[^\s/?#]+[^\s\x00-\x1f\x7f]*", re.IGNORECASE)
MAX_VALUES = 100
MAX_VALUE_CHARS = 200
MAX_NAME_CHARS = 200
# huggingface_hub reads these (any case) as true; any other value is false.
HF_TRUE = ("1", "ON", "YES", "TRUE")
HF_FALSE = ("0", "OFF", "NO", "FALSE", "")


@dataclass(frozen=True)
class Entry:
    """One documented variable."""

    name: str
    description: str = ""
    type: str = "string"
    values: tuple[str, ...] = ()
    case_insensitive: bool = False
    min: float | None = None
    max: float | None = None
    source: str = ""
    layer: str = "builtin"
    scope: str | None = None  # "platform" or "project:<name>" for an edited or policy entry
    # An edited entry that stands in for the built-in one of its name (else it is a note).
    replaces: bool = False
    # What the policies say of a documented variable (a default's scope, a protected
    # entry's reason, a rule's description): shown beside its description, never in
    # place of its documented type, values or bounds.
    notes: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], layer: str = "builtin",
                  scope: str | None = None) -> Entry:
        return cls(name=data["name"], description=data.get("description") or "",
                   type=data.get("type") or "string",
                   values=tuple(data.get("values") or ()),
                   case_insensitive=bool(data.get("case_insensitive", False)),
                   min=data.get("min"), max=data.get("max"), source=data.get("source") or "",
                   layer=layer, scope=scope, replaces=bool(data.get("replaces", False)))

    def to_dict(self) -> dict[str, Any]:
        # "values" always: a mapping's own .values() must never stand in for a missing key
        out: dict[str, Any] = {"name": self.name, "description": self.description,
                               "type": self.type, "values": list(self.values),
                               "layer": self.layer}
        if self.case_insensitive:
            out["case_insensitive"] = True
        for key in ("min", "max"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.source:
            out["source"] = self.source
        if self.scope is not None:
            out["scope"] = self.scope
        if self.notes:
            out["notes"] = list(self.notes)
        if self.replaces:
            out["replaces"] = True
        return out

    def stored(self) -> dict[str, Any]:
        """The entry as its layer stores it (without where it was found)."""
        out = self.to_dict()
        out.pop("layer")
        out.pop("scope", None)
        return out


def family(name: str) -> str:
    """The family prefix of a name: ``NCCL`` of ``NCCL_DEBUG``; the name itself without one."""
    return name.split("_", 1)[0]


def one_word(name: str) -> bool:
    """``PRECISION``, not ``NCCL_DEBUG``: two one-word names count as one family."""
    return "_" not in name.strip("_")


@dataclass(frozen=True)
class Catalog:
    """The entries that apply to one task, by name."""

    entries: Mapping[str, Entry] = field(default_factory=dict)

    def kin(self, name: str) -> list[str]:
        """The documented names of ``name``'s family (see ``advice.of_one_family``): the
        only ones a typo of ``name`` can be.  A name of no documented family (most of a
        task's own) costs a lookup, not a pass over the catalog."""
        by_family, one_words = self._families
        found = by_family.get(family(name).upper(), [])
        return list(dict.fromkeys(found + one_words)) if one_word(name) else found

    @cached_property
    def _families(self) -> tuple[dict[str, list[str]], list[str]]:
        by_family: dict[str, list[str]] = {}
        for name in self.entries:
            by_family.setdefault(family(name).upper(), []).append(name)
        return by_family, [n for n in self.entries if one_word(n)]

    def get(self, name: str) -> Entry | None:
        return self.entries.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def names(self) -> list[str]:
        return sorted(self.entries)

    def listing(self) -> list[dict[str, Any]]:
        return [self.entries[n].to_dict() for n in self.names()]

    def page(self, after: str | None, limit: int) -> tuple[list[dict[str, Any]], str | None]:
        """Up to ``limit`` entries by name, after ``after``; and the name to go on after
        (None: this was the last page)."""
        names = [n for n in self.names() if after is None or n > after]
        shown = names[:limit]
        return [self.entries[n].to_dict() for n in shown], (
            shown[-1] if len(names) > limit else None)


@lru_cache(maxsize=1)
def builtin() -> tuple[Entry, ...]:
    """The catalog shipped with taskenv, read once per process."""
    text = resources.files("shared.doctor").joinpath("catalog.json").read_text("utf-8")
    return tuple(Entry.from_dict(e) for e in json.loads(text)["entries"])


def layered(*layers: Iterable[Entry]) -> Catalog:
    """The catalog of ``layers``, lowest first: a later entry for a name replaces the
    earlier one."""
    found: dict[str, Entry] = {}
    for layer in layers:
        for entry in layer:
            found[entry.name] = entry
    return Catalog(found)


def from_policies(policies: Sequence[Any], project: str | None = None) -> list[Entry]:
    """What the policies themselves document: a rule naming one variable (not a glob)
    with a description or allowed values, a protected entry's reason, each default.
    An entry whose ``when`` names another project than ``project`` is left out: no
    caller learns what another project's tasks get.

    A rule's ``allowed`` values are the policy's to enforce; here they only describe."""
    found: dict[str, Entry] = {}

    def ours(entries: Sequence[Any]) -> list[Any]:
        return [e for e in entries if e.when is None or not e.when.names_another_project(project)]

    for policy in policies:  # highest scope first: a lower (closer) layer's note wins
        for default in ours(policy.defaults):
            found[default.name] = Entry(default.name, f"a default of {policy.scope}",
                                        layer="policy", scope=policy.scope)
        for held in ours(policy.protected):
            found[held.name] = Entry(held.name, held.reason or f"protected by {policy.scope}",
                                     layer="policy", scope=policy.scope)
        for rule in ours(policy.rules):
            if _is_glob(rule.name) or not (rule.description or rule.allowed):
                continue
            base = found.get(rule.name)
            found[rule.name] = Entry(
                rule.name, rule.description or (base.description if base else ""),
                type="enum" if rule.allowed else "string", values=tuple(rule.allowed or ()),
                min=rule.min, max=rule.max, layer="policy", scope=policy.scope)
    return list(found.values())


def applying(builtin_on: bool, edited_layers: Sequence[Iterable[Entry]],
             policies: Sequence[Any] = (), project_name: str | None = None) -> Catalog:
    """Every layer that applies to a task: the built-in one unless an admin switched it
    off, each scope's edited entries (outermost first), what the policies say.  An edited
    entry replaces a built-in one only when it says so; else it is a note on it."""
    found = layered(builtin() if builtin_on else ()).entries
    documented: dict[str, Entry] = dict(found)
    for layer in edited_layers:
        for entry in layer:
            known = documented.get(entry.name)
            if known is not None and known.layer == "builtin" and not entry.replaces:
                documented[entry.name] = _noted(known, entry.description)
            else:
                documented[entry.name] = entry
    return with_policy_notes(Catalog(documented), from_policies(policies, project_name))


def _noted(entry: Entry, note: str) -> Entry:
    return replace(entry, notes=(*entry.notes, note)) if note else entry


def with_policy_notes(catalog: Catalog, noted: Iterable[Entry]) -> Catalog:
    """The policies' entries added to ``catalog``: a variable it documents keeps its entry
    (type, values, bounds, source, layer) and gains the policy's words as a note; one it
    does not document gets the policy's entry."""
    found = dict(catalog.entries)
    for entry in noted:
        known = found.get(entry.name)
        found[entry.name] = entry if known is None else replace(
            known, notes=(*known.notes, entry.description))
    return Catalog(found)


def _is_glob(name: str) -> bool:
    return any(c in name for c in "*?[")


# --- checking an entry an admin or maintainer writes ----------------------------------------

def check_entry(data: Mapping[str, Any], where: str = "entry") -> list[Problem]:
    """Every reason an edited entry cannot be stored, each naming the field and the limit."""
    name = data.get("name")
    label = name if isinstance(name, str) else None
    problems = [Problem(rule="catalog.invalid", field=f"{where}.{key}", variable=label,
                        message=f"{where}: unknown key {key!r}; an entry has "
                                f"{', '.join(ENTRY_KEYS)}")
                for key in data if key not in ENTRY_KEYS]
    if not (isinstance(name, str) and name and len(name) <= MAX_NAME_CHARS
            and "=" not in name and name.isprintable() and not _is_glob(name)):
        problems.append(Problem(
            rule="catalog.name", field=f"{where}.name", variable=label,
            message=f"{where}: a catalog entry names one variable (printable, no '=', no "
                    f"glob, at most {MAX_NAME_CHARS} characters)"))
    problems += _text_limits(data, where, label)
    problems += _source_is_a_web_address(data, where, label)
    problems += _typed_limits(data, where, label)
    return problems


def _source_is_a_web_address(data: Mapping[str, Any], where: str,
                             label: str | None) -> list[Problem]:
    """A ``source`` is shown as a link to every reader: only an http(s) address may be
    one (``javascript:``, ``data:`` and the like would run in the reader's page)."""
    source = data.get("source") or ""
    if not isinstance(source, str) or not source or WEB_ADDRESS.fullmatch(source):
        return []
    return [Problem(rule="catalog.source_url", field=f"{where}.source", variable=label,
                    message=f"{label}: source must be an http:// or https:// address, "
                            f"not {source[:40]!r}")]


def _text_limits(data: Mapping[str, Any], where: str, label: str | None) -> list[Problem]:
    problems: list[Problem] = []
    for key, limit in (("description", MAX_DESCRIPTION), ("source", MAX_SOURCE)):
        value = data.get(key, "")
        if not isinstance(value, str):
            problems.append(Problem(rule="catalog.invalid", field=f"{where}.{key}",
                                    variable=label, message=f"{where}.{key} must be a string"))
        elif len(value) > limit:
            problems.append(Problem(rule=f"catalog.{key}_length", field=f"{where}.{key}",
                                    variable=label, limit=limit,
                                    message=f"{label}: {key} is {len(value)} characters long; "
                                            f"at most {limit} are allowed"))
    return problems


def _typed_limits(data: Mapping[str, Any], where: str, label: str | None) -> list[Problem]:
    problems: list[Problem] = []
    kind = data.get("type", "string")
    if kind not in TYPES:
        problems.append(Problem(rule="catalog.type", field=f"{where}.type", variable=label,
                                message=f"{where}.type must be one of {', '.join(TYPES)}"))
    values = data.get("values", [])
    if not (isinstance(values, list) and all(isinstance(v, str) for v in values)):
        problems.append(Problem(rule="catalog.invalid", field=f"{where}.values", variable=label,
                                message=f"{where}.values must be a list of strings"))
    elif len(values) > MAX_VALUES or any(len(v) > MAX_VALUE_CHARS for v in values):
        problems.append(Problem(
            rule="catalog.values_limit", field=f"{where}.values", variable=label,
            limit=MAX_VALUES, message=f"{label}: at most {MAX_VALUES} values of at most "
                                      f"{MAX_VALUE_CHARS} characters each"))
    for key in ("min", "max"):
        bound = data.get(key)
        if bound is not None and not (isinstance(bound, int | float)
                                      and not isinstance(bound, bool) and math.isfinite(bound)):
            problems.append(Problem(rule="catalog.invalid", field=f"{where}.{key}",
                                    variable=label, message=f"{where}.{key} must be a number"))
    for key in ("case_insensitive", "replaces"):
        if not isinstance(data.get(key, False), bool):
            problems.append(Problem(rule="catalog.invalid", field=f"{where}.{key}",
                                    variable=label, message=f"{where}.{key} must be true or false"))
    return problems


def edited(data: Mapping[str, Any], scope: str) -> Entry:
    """A checked entry as its scope's layer keeps it (the layer: the scope's kind)."""
    return Entry.from_dict(data, scope.split(":", 1)[0], scope)
