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
Exit codes (one per outcome, whichever check caught it):
  0  the task succeeded (or, without --follow, the command did what it was asked)
  1  the task failed (a step exited non-zero, or it could not be launched)
  2  the env was rejected, each error printed with its variable and rule: by the
     CLI before sending (a .env line, a name in two files), by the API before
     storing (422 env_invalid or policy_conflict), by the validation or policy
     stage, or, for preview, it would be
  3  the task was cancelled
  4  usage or configuration error: bad flags, an unreadable file, a malformed
     task file (not YAML, a key it does not take, a value of the wrong shape),
     whether the CLI or the API finds it, no token
  5  the API refused the request for another reason, or could not be reached"""


def is_final(status: str) -> bool:
    return status in FINAL_STATES


def for_status(status: str) -> Exit:
    return FINAL_STATES[status]
