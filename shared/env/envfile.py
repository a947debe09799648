""".env files in and out: text that users paste or upload, never evaluated.

Parsing uses python-dotenv's own parser (``dotenv.parser``), which splits the
text into bindings and nothing more: no ``${VAR}`` expansion (that lives in
python-dotenv's loader, which is not called), no command substitution.  A value
arrives exactly as it is written between its quotes.

Exporting must be inert when a shell sources the file (``set -a; . ./task.env``), as
people do with .env files: every value is written single-quoted, the one quoting in
which a POSIX shell expands nothing (no ``$(...)``, backticks, ``$VAR``), and which
python-dotenv reads back literally too (with interpolation off, as the header says).
A value the two cannot both read exactly is left out, with a comment naming it, as a
secret is: one holding a single quote (a shell cannot write it inside single quotes), a
backslash (python-dotenv decodes ``\\\\`` and ``\\'`` there, a shell does not) or a
carriage return (a file read in text mode turns it into a line end).  A name a shell
cannot assign (not ``^[A-Za-z_][A-Za-z0-9_]*$``, such as a Kubernetes-style name) is
left out the same way: sourcing its line would run it as a command.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping
from typing import Any

from dotenv.parser import Original, parse_stream

from shared.errors import Problem

FIELD = "env_file"
# What a shell accepts on the left of an assignment.
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Characters no single-quoted value reads the same in python-dotenv and in a shell.
UNQUOTABLE = {"'": "a single quote", "\\": "a backslash", "\r": "a carriage return"}

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


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def export(entries: Iterable[Mapping[str, Any]], header: str = "") -> str:
    """dotenv text that python-dotenv reads back to the same values and that a shell
    sources without running anything; what cannot be both is named in a comment, never
    written (secrets, and the values and names :func:`left_out` explains)."""
    lines = [f"# {line}" for line in header.splitlines()]
    for entry in entries:
        name, value = str(entry["name"]), str(entry.get("value", ""))
        why = "it is secret" if entry.get("secret") else left_out(name, value)
        if why:
            # repr() escapes a line end, so a name cannot end the comment early.
            lines.append(f"# {name!r} is not exported: {why}")
        else:
            lines.append(f"{name}='{value}'")
    return "\n".join(lines) + "\n" if lines else ""


def left_out(name: str, value: str) -> str | None:
    """Why a variable has no line both python-dotenv and a shell read exactly, or None."""
    if not encodable(name) or not SHELL_NAME.fullmatch(name):
        return "a shell cannot assign this name"
    if not encodable(value):
        return "its value is not text (a lone surrogate)"
    held = [what for char, what in UNQUOTABLE.items() if char in value]
    if held:
        return (f"its value holds {' and '.join(held)}, which python-dotenv and a shell "
                "would not read the same; set it through the API")
    return None
