"""Lists of variable names only the platform's policy may give a value, kept as settings.

Two lists share this shape: the start-up hooks (``shared.policy.hooks``: what a program
loads or runs) and the endpoint variables (``shared.policy.endpoints``: where a program
sends its credentials or fetches code).  Each is a platform setting, comma-separated:
names, ``*`` families (``LD_*``), the word ``default`` for the documented list, and
``-NAME`` to take one default entry out.  An empty setting is the default list, so a
list is never off by accident.  Names are case-sensitive, as the environment is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any


def parse_setting(value: str, default: Mapping[str, str], setting: str) -> dict[str, str]:
    """pattern -> what setting it does, from a setting's text: ``default``, names,
    ``FAMILY*`` and ``-NAME``; a name of the setting's own says which setting named it."""
    chosen: dict[str, str] = {}
    removed: set[str] = set()
    for item in (part.strip() for part in (value or "default").split(",")):
        if item == "default":
            chosen.update(default)
        elif item.startswith("-"):
            removed.add(item[1:])
        elif item:
            chosen[item] = default.get(item, f"named by this platform's {setting} setting")
    return {p: why for p, why in chosen.items() if p not in removed}


@dataclass(frozen=True)
class VariableList:
    """Exact names and ``*`` families, each with what setting it does (shown in refusals
    and warnings)."""

    patterns: Mapping[str, str]

    def match(self, name: str) -> str | None:
        """The pattern that covers ``name``, or None."""
        if name in self.patterns:
            return name
        return next((p for p in self.patterns if "*" in p and fnmatchcase(name, p)), None)

    def why(self, name: str) -> str | None:
        """What setting ``name`` does, when the list covers it."""
        pattern = self.match(name)
        return None if pattern is None else self.patterns[pattern]


def valued_entries(data: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, name) of each entry of a policy's raw data that gives a name a value: every
    default, and every protected entry with a value (one without only reserves the name)."""
    for where in ("defaults", "protected"):
        for index, entry in enumerate(data.get(where) or []):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                continue
            if where == "protected" and entry.get("value") is None:
                continue
            yield f"{where}[{index}].value", entry["name"]
