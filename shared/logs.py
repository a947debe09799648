"""Log lines every taskenv process writes the same way.

``configure(fmt)`` sets the root logger: ``json`` writes one JSON object per line
(python-json-logger) for services, whose log collectors parse it; ``text`` keeps
lines a person reads at a terminal (``make run``).  Either way each line carries
the context it was written in: ``task_id`` and ``revision`` while a stage or the
local runner works on a task, ``request_id`` while the API answers a request.  The
context lives in :mod:`contextvars`, so threads (the API's) and prefork children
(the workers') each see only their own.

Celery's own lines about a message ("Task taskenv.policy[...] received", succeeded,
failed) get the same fields from what Celery logs them with (the record's ``data``):
``celery_id`` (the message's id, the one in the text) and, for a taskenv stage, the
``task_id`` and ``revision`` its arguments name.  The "received" line is written before
any task is bound, so without this it would name the message but not the task.

Nothing here masks secrets: no code path logs a value, and the tests grep every
process's log for a secret to prove it.
"""

from __future__ import annotations

import contextvars
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from pythonjsonlogger.json import JsonFormatter

FORMATS = ("text", "json")
CONTEXT_FIELDS = ("task_id", "revision", "request_id", "celery_id")
STAGE_PREFIX = "taskenv."  # the names of taskenv's Celery tasks
# A stage's arguments as Celery shows them, the repr of (task id, revision): matched, not
# parsed as Python (a line is logged per message: this is on every stage's hot path).
STAGE_ARGS = re.compile(r"""[(\[]\s*'([0-9A-Za-z_-]{1,64})'\s*,\s*(\d{1,9})\s*,?\s*[)\]]""")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s%(context)s"
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s"

_context: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar(
    "taskenv_log_context", default={})  # noqa: B039 - never mutated, only replaced


class ContextFilter(logging.Filter):
    """Adds the current task or request to every record (``None`` fields are left out)."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = {**celery_fields(record), **_context.get()}
        for name in CONTEXT_FIELDS:
            setattr(record, name, None)
        for name, value in bound.items():
            setattr(record, name, value)
        record.context = "".join(f" {k}={v}" for k, v in bound.items())
        return True


def celery_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The message and task a line of Celery's is about, from its ``data`` (none for other
    lines)."""
    data = getattr(record, "data", None)
    if not record.name.startswith("celery.") or not isinstance(data, dict) \
            or not data.get("id"):
        return {}
    found: dict[str, Any] = {"celery_id": str(data["id"])}
    if str(data.get("name", "")).startswith(STAGE_PREFIX):
        found.update(stage_ids(data.get("args")))
    return found


def stage_ids(args: Any) -> dict[str, Any]:
    """``task_id`` and ``revision`` from a stage's arguments as Celery shows them (their
    ``repr``, matched as text, never evaluated) or as values."""
    if isinstance(args, str):
        found = STAGE_ARGS.fullmatch(args)
        return {"task_id": found[1], "revision": int(found[2])} if found else {}
    if isinstance(args, list | tuple) and len(args) == 2 and isinstance(args[0], str) \
            and isinstance(args[1], int):
        return {"task_id": args[0], "revision": args[1]}
    return {}


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
