"""Paths a task names inside its own home: checked before anything is stored.

The API refuses a bad path when the task is created; the launchers place the
path under the task's home (``workers.launchers.common.sandbox``, the manifest's volume).
"""

from __future__ import annotations

from pathlib import PurePosixPath

MAX_WORKDIR_CHARS = 1024


def workdir_problem(workdir: str) -> str | None:
    """Why ``workdir`` cannot be a directory inside the task's home; None if it can."""
    if len(workdir) > MAX_WORKDIR_CHARS:
        return f"must be at most {MAX_WORKDIR_CHARS} characters"
    if "\0" in workdir:
        return "must not contain a NUL character"
    if workdir.startswith("/"):
        return "must be a relative path inside the task's home, not an absolute path"
    if ".." in PurePosixPath(workdir).parts:
        return "must not contain a '..' component"
    return None
