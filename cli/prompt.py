"""Asking for a secret: unechoed at a terminal, one line from a pipe.

``getpass`` warns (``GetPassWarning``) and may echo when standard input is not a
terminal; a secret piped in (``pass show x | taskenv login``) is read as a line of
text instead, with no prompt and no warning.
"""

from __future__ import annotations

import sys

import click

from cli.errors import UsageProblem


def secret(label: str) -> str:
    if sys.stdin is not None and sys.stdin.isatty():
        return str(click.prompt(label, hide_input=True))
    line = sys.stdin.readline() if sys.stdin is not None else ""
    value = line.removesuffix("\n").removesuffix("\r")
    if not value:
        raise UsageProblem(f"{label}: nothing on standard input")
    return value
