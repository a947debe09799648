"""``.env`` files in and out, through python-dotenv's parser.

Reading never evaluates anything: no ``${VAR}`` expansion, no command
substitution; a value is exactly the text between its quotes.  Writing quotes
every value so that ``dotenv_values(..., interpolate=False)`` reads it back
unchanged, whatever it holds.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from dotenv.parser import Original, parse_stream

from cli.errors import UsageProblem

# Escapes python-dotenv decodes inside double quotes; everything else stays literal.
DOUBLE_QUOTE_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t",
                        "\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}
PLAIN_KEY = re.compile(r"[^=#\s'\"]+")


def read_text(path: Path) -> str:
    try:
        # newline="": a carriage return inside a quoted value is data, not a line end.
        with path.open(encoding="utf-8", newline="") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageProblem(f"cannot read {path}: {exc}") from exc


def first_line_of(original: Original) -> int:
    """The parser counts the blank lines before a bad statement as part of it."""
    blank = original.string[: len(original.string) - len(original.string.lstrip())]
    return original.line + blank.count("\n")


def check_statements(text: str, origin: str) -> None:
    """Lines the parser cannot read and names set twice are errors, not silently skipped."""
    lines: dict[str, int] = {}
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            raise UsageProblem(f"{origin}, line {first_line_of(binding.original)}: "
                               "not a NAME=value statement")
        if binding.key is None:
            continue
        if binding.key in lines:
            raise UsageProblem(f"{origin}: {binding.key} is set twice "
                               f"(lines {lines[binding.key]} and {line})")
        lines[binding.key] = line


def parse(text: str, origin: str) -> dict[str, str]:
    check_statements(text, origin)
    values = dotenv_values(stream=io.StringIO(text), interpolate=False)
    missing = [name for name, value in values.items() if value is None]
    if missing:
        raise UsageProblem(f"{origin}: {', '.join(missing)} has no value "
                           "(write NAME= for an empty one)")
    return {name: value for name, value in values.items() if value is not None}


def load(path: Path) -> dict[str, str]:
    return parse(read_text(path), str(path))


def quoted(value: str) -> str:
    return '"' + "".join(DOUBLE_QUOTE_ESCAPES.get(c, c) for c in value) + '"'


def key(name: str) -> str | None:
    """The name as a dotenv key, single-quoted when it must be; None when it cannot be."""
    if PLAIN_KEY.fullmatch(name):
        return name
    if "'" not in name and name.isprintable():
        return f"'{name}'"
    return None


def line_for(variable: dict[str, Any]) -> str:
    name = str(variable["name"])
    if variable.get("secret"):
        return f"# secret {name} not exported"
    written = key(name)
    if written is None:
        return f"# {name!r} cannot be written as a dotenv name; not exported"
    return f"{written}={quoted(str(variable['value']))}"


def export(variables: Iterable[dict[str, Any]], header: str) -> str:
    """Dotenv text; read it back with ``dotenv_values(..., interpolate=False)``."""
    lines = [f"# {header}", "# read with interpolation off: values are literal text"]
    lines += [line_for(v) for v in variables]
    return "\n".join(lines) + "\n"
