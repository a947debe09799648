"""Paths a task names inside its own home: checked before anything is stored.

The API refuses a bad path when the task is created; the launchers place the
path under the task's home (``workers.launchers.common.sandbox``, the manifest's volume).
A component is a file or directory name, at most :data:`NAME_MAX` bytes of UTF-8 on
every filesystem a task runs on (ext4, xfs, overlayfs, tmpfs): a longer one would be
accepted here and fail the launch (``OSError: File name too long``).
"""

from __future__ import annotations

from pathlib import PurePosixPath

MAX_WORKDIR_CHARS = 1024
NAME_MAX = 255  # bytes of one path component: Linux's NAME_MAX


def component_problem(path: str) -> str | None:
    """Why a component of ``path`` (``/``-separated) cannot be a name on a filesystem;
    None if none is too long.  Bytes are counted as UTF-8 (a character may take 4)."""
    for part in path.split("/"):
        size = len(part.encode("utf-8", "surrogatepass"))
        if size > NAME_MAX:
            shown = part[:24] + "..." if len(part) > 24 else part
            return (f"has a component of {size} bytes ({shown!r}); a file or directory "
                    f"name is at most {NAME_MAX} bytes (NAME_MAX, in UTF-8)")
    return None


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
    return component_problem(workdir)
