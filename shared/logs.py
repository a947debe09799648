"""Log lines every taskenv process writes the same way.

``configure(fmt)`` sets the root logger: ``json`` writes one JSON object per line
(python-json-logger) for services, whose log collectors parse it; ``text`` keeps
lines a person reads at a terminal (``make run``).  Either way each line carries
the context it was written in: ``task_id`` and ``revision`` while a stage or the
local runner works on a task, ``request_id`` while the API answers a request.  The
context lives in :mod:`contextvars`, so threads (the API's) and prefork children
(the workers') each see only their own.

Nothing here masks secrets: no code path logs a value, and the tests grep every
process's log for a secret to prove it.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from pythonjsonlogger.json import JsonFormatter

FORMATS = ("text", "json")
CONTEXT_FIELDS = ("task_id", "revision", "request_id")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s%(context)s"
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s"

_context: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar(
    "taskenv_log_context", default={})  # noqa: B039 - never mutated, only replaced


class ContextFilter(logging.Filter):
    """Adds the current task or request to every record (``None`` fields are left out)."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = _context.get()
        for name in CONTEXT_FIELDS:
            setattr(record, name, None)
        for name, value in bound.items():
            setattr(record, name, value)
        record.context = "".join(f" {k}={v}" for k, v in bound.items())
        return True


class _Json(JsonFormatter):
    def add_fields(self, log_record: dict[str, Any], record: logging.LogRecord,
                   message_dict: dict[str, Any]) -> None:
        super().add_fields(log_record, record, message_dict)
        log_record.pop("context", None)  # the text format's rendering of the fields below
        for name in CONTEXT_FIELDS:
            if log_record.get(name) is None:
                log_record.pop(name, None)


def formatter(fmt: str) -> logging.Formatter:
    if fmt not in FORMATS:
        raise ValueError(f"TASKENV_LOG_FORMAT must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt == "json":
        return _Json(JSON_FIELDS, rename_fields={"asctime": "time", "levelname": "level",
                                                 "name": "logger"})
    return logging.Formatter(TEXT_FORMAT)


def handler(fmt: str, stream: IO[str]) -> logging.Handler:
    """A handler writing ``fmt`` lines, with the current context, to ``stream``."""
    out = logging.StreamHandler(stream)
    out.setFormatter(formatter(fmt))
    out.addFilter(ContextFilter())
    return out


def configure(fmt: str = "text", level: int = logging.INFO) -> None:
    """Send this process's log lines to stderr in ``fmt``, replacing earlier handlers."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler(fmt, sys.stderr))
    root.setLevel(level)


def bind(**fields: Any) -> contextvars.Token[dict[str, Any]]:
    """Add fields to this context's log lines until :func:`unbind` with the token."""
    return _context.set({**_context.get(), **fields})


def unbind(token: contextvars.Token[dict[str, Any]]) -> None:
    _context.reset(token)


@contextmanager
def bound(**fields: Any) -> Iterator[None]:
    token = bind(**fields)
    try:
        yield
    finally:
        unbind(token)
