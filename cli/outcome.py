"""Exit codes scripts can rely on, and the task states that end a follow."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    SUCCEEDED = 0
    FAILED = 1
    REJECTED = 2
    CANCELLED = 3
    USAGE = 4
    API = 5


FINAL_STATES = {"succeeded": Exit.SUCCEEDED, "failed": Exit.FAILED,
                "rejected": Exit.REJECTED, "cancelled": Exit.CANCELLED}

TABLE = """\
Exit codes:
  0  the task succeeded (or, without --follow, the command did what it was asked)
  1  the task failed
  2  the task was rejected: each error is printed with its variable
     (preview: the env would be rejected)
  3  the task was cancelled
  4  usage or configuration error (bad flags, unreadable file, no token)
  5  the API refused the request or could not be reached"""


def is_final(status: str) -> bool:
    return status in FINAL_STATES


def for_status(status: str) -> Exit:
    return FINAL_STATES[status]
