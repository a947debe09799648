"""``.env`` files in and out, with the same reader and writer as the server
(``shared.env.envfile``, python-dotenv's parser).

Reading never evaluates anything: no ``${VAR}`` expansion, no command
substitution; a value is exactly the text between its quotes.  Writing quotes
every value so that ``dotenv_values(..., interpolate=False)`` reads it back
unchanged, whatever it holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cli.errors import EnvRejected, UsageProblem
from shared.env import envfile


def read_text(path: Path) -> str:
    try:
        # newline="": a carriage return inside a quoted value is data, not a line end.
        with path.open(encoding="utf-8", newline="") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageProblem(f"cannot read {path}: {exc}") from exc


def parse(text: str, origin: str) -> dict[str, str]:
    """Every binding, or a usage problem naming each line that is not one."""
    entries, problems = envfile.parse(text)
    if problems:
        raise EnvRejected("; ".join(f"{origin}, {p.message}" for p in problems))
    return {e["name"]: e["value"] for e in entries}


def load(path: Path) -> dict[str, str]:
    return parse(read_text(path), str(path))


def export(variables: Iterable[dict[str, Any]], header: str) -> str:
    """Dotenv text; read it back with ``dotenv_values(..., interpolate=False)``."""
    return envfile.export(variables, f"{header}\n"
                                     "read with interpolation off: values are literal text")
