""".env files in and out: text that users paste or upload, never evaluated.

Parsing uses python-dotenv's own parser (``dotenv.parser``), which splits the
text into bindings and nothing more: no ``${VAR}`` expansion (that lives in
python-dotenv's loader, which is not called), no command substitution.  A value
arrives exactly as it is written between its quotes.

Exporting writes every value double-quoted with python-dotenv's escapes (``\\``,
``\"``, ``\n``, ``\r``, ``\t``...), so any text reads back unchanged, newlines, carriage
returns, ``$``, ``#``, ``=`` and non-ASCII included, even from a file opened in text
mode (which would turn a raw carriage return into a line end).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping
from typing import Any

from dotenv.parser import Original, parse_stream

from shared.errors import Problem

FIELD = "env_file"
PLAIN_KEY = re.compile(r"[^=#\s'\"]+")
# The escapes python-dotenv decodes inside double quotes; everything else stays literal.
DOUBLE_QUOTE_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t",
                        "\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def parse(text: str) -> tuple[list[dict[str, Any]], list[Problem]]:
    """``KEY=value`` bindings as env entries, and every line that is not one."""
    entries: list[dict[str, Any]] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for binding in parse_stream(io.StringIO(text, newline="")):
        line = first_line_of(binding.original)
        if binding.error:
            problems.append(Problem(rule="env_file.syntax", field=FIELD, message=(
                f"line {line} of the .env text is not KEY=value (check its quotes)")))
        elif binding.key is None:
            continue  # a blank line or a comment
        elif binding.value is None:
            problems.append(Problem(rule="env_file.no_value", field=FIELD, variable=binding.key,
                                    message=f"line {line}: {binding.key} has no '=' and value"))
        elif binding.key in seen:
            problems.append(Problem(rule="env_file.duplicate", field=FIELD, variable=binding.key,
                                    message=f"line {line}: {binding.key} is set twice "
                                            f"(first on line {seen[binding.key]})"))
        else:
            seen[binding.key] = line
            entries.append({"name": binding.key, "value": binding.value, "secret": False})
    return entries, problems


def first_line_of(original: Original) -> int:
    """The parser counts the blank lines before a statement as part of it."""
    blank = original.string[: len(original.string) - len(original.string.lstrip())]
    return original.line + blank.count("\n")


def combine(env: list[dict[str, Any]], from_file: list[dict[str, Any]]) -> list[Problem]:
    """A name given both in ``env`` and in ``env_file`` is ambiguous: say which."""
    in_env = {e.get("name") for e in env}
    return [Problem(rule="env_file.conflict", field=FIELD, variable=e["name"],
                    message=f"{e['name']} is set both in env and in env_file; keep one")
            for e in from_file if e["name"] in in_env]


def quote(value: str) -> str:
    return '"' + "".join(DOUBLE_QUOTE_ESCAPES.get(c, c) for c in value) + '"'


def key(name: str) -> str | None:
    """A name as python-dotenv reads it: bare when it can be, else single-quoted.

    Kubernetes-style names may hold spaces or ``#``: python-dotenv reads a quoted key
    verbatim.  A name holding a single quote, or a lone surrogate (not text in any
    file; the validation stage refuses it), has no dotenv form: None.
    """
    if not encodable(name):
        return None
    if PLAIN_KEY.fullmatch(name) and not name.startswith("export"):
        return name
    return None if "'" in name else f"'{name}'"


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def export(entries: Iterable[Mapping[str, Any]], header: str = "") -> str:
    """dotenv text that parses back to the same values; secrets are named, not written."""
    lines = [f"# {line}" for line in header.splitlines()]
    for entry in entries:
        name = key(str(entry["name"]))
        if entry.get("secret"):
            lines.append(f"# {entry['name']!r} is secret and is not exported")
        elif name is None:
            lines.append(f"# {entry['name']!r} has no .env form (a quote or a lone "
                         "surrogate in its name)")
        else:
            lines.append(f"{name}={quote(str(entry['value']))}")
    return "\n".join(lines) + "\n" if lines else ""
