"""A revision's run directory on the host (or a shared filesystem): its fresh homes, the
task's files written into them, and ``outcome.json``, how the run ended.

Shared by the backends that run steps in a bubblewrap sandbox of the host (local, and
Slurm on the cluster's nodes): one writer of these files, one reader.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shared.errors import LaunchFailed
from shared.task.files import TaskFile, path_problem
from workers.launchers.base import Outcome

OUTCOME_FILE = "outcome.json"  # how the run ended, written before it tells Redis


def prepare_home(run_dir: Path, workdir: str | None, replica: int = 0) -> Path:
    """A fresh home for the revision (replica k > 0 of several: one of its own), with the
    workdir made inside it."""
    home = run_dir / ("home" if replica == 0 else f"home-{replica}")
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    if workdir:  # already checked: relative, no '..'; the home holds no links yet
        (home / workdir).mkdir(mode=0o700, parents=True, exist_ok=True)
    return home


def write_files(workdir: Path, files: Iterable[TaskFile]) -> None:
    """The task's own files, written into its working directory before the runner starts.

    Paths were checked when the task was stored and are checked again here: relative,
    no '..'.  The directory is the revision's fresh home, so nothing in it is a link yet;
    ``O_NOFOLLOW`` refuses one all the same.
    """
    for file in files:
        if (problem := path_problem(file.path)) is not None:
            raise LaunchFailed(f"file {file.path!r}: path {problem}")
        target = workdir / file.path
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, file.mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            os.fchmod(out.fileno(), file.mode)  # the mode asked for, whatever the umask
            out.write(file.content)


def outcome_doc(outcome: Outcome) -> dict[str, Any]:
    """An outcome as its file holds it (and the local launcher's record of it, once the
    run directory is gone)."""
    return {"state": outcome.state, "exit_code": outcome.exit_code, "reason": outcome.reason,
            "replica_exit_codes": outcome.replica_exit_codes}


def outcome_from_doc(found: dict[str, Any]) -> Outcome:
    codes = found.get("replica_exit_codes")
    return Outcome(found["state"], found.get("exit_code"), found.get("reason"),
                   tuple(codes) if codes is not None else None)


def write_outcome_file(run_dir: Path, outcome: Outcome) -> None:
    tmp = run_dir / f"{OUTCOME_FILE}.tmp"
    tmp.write_text(json.dumps(outcome_doc(outcome)))
    tmp.replace(run_dir / OUTCOME_FILE)  # whole or absent


def finished_at(run_dir: Path) -> float:
    """When the runner in ``run_dir`` left its outcome (0 if the file is gone)."""
    try:
        return (run_dir / OUTCOME_FILE).stat().st_mtime
    except OSError:
        return 0.0


def read_outcome_file(run_dir: Path) -> Outcome | None:
    """How the runner in ``run_dir`` ended, as it wrote it; None if it never finished."""
    try:
        found = json.loads((run_dir / OUTCOME_FILE).read_text())
    except (OSError, ValueError):
        return None
    return outcome_from_doc(found)
