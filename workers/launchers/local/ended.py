"""What ran on this host, kept a while after its run directory is gone: no revision runs twice.

A Redis failover can lose the last writes the old primary took (a primary the sentinels
replaced while it lived on takes them until no replica follows it).  A task whose runner
recorded its end, and whose run directory was then removed, may so be found one state
back: ``running`` with nobody holding it (the reconciler would fail it as lost), or
``launching`` or ``resolved`` (it would be launched again, and its steps run a second
time).  Before a run directory goes, its outcome is kept here; :func:`find` gives it back
to the launch and to the reconciler's look, which record it again instead.

The records sit in buckets of :data:`BUCKET_SECONDS`; the two newest are kept, so a record
lives between one and two buckets (ten to twenty minutes: longer than the reconciler takes
to act on a task found one state back).  Expiry removes whole buckets: one directory per
bucket, never a file per task.  A record names the time its revision was made
(``made_at``): a revision number made again, after a failover lost the first one, is a
new revision and finds no record of the old.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from workers.launchers.base import Outcome
from workers.launchers.common.run_dir import outcome_doc, outcome_from_doc

BUCKET_SECONDS = 600
LEDGER = ".ended"  # under the launcher's work directory, beside the tasks' directories


def _bucket(now: float) -> int:
    return int(now // BUCKET_SECONDS)


def _path(root: Path, bucket: int, task_id: str, revision: int) -> Path:
    return root / LEDGER / str(bucket) / f"{task_id}-r{revision}.json"


def keep(root: Path, task_id: str, revision: int, made_at: float, outcome: Outcome,
         now: float) -> None:
    """Record how ``revision`` ended on this host, before its run directory goes."""
    path = _path(root, _bucket(now), task_id, revision)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"made_at": made_at, **outcome_doc(outcome)}))
    tmp.replace(path)


def find(root: Path, task_id: str, revision: int, made_at: float, now: float) -> Outcome | None:
    """How ``revision`` (made at ``made_at``) ended on this host, if it ran here lately."""
    newest = _bucket(now)
    for bucket in (newest, newest - 1):
        try:
            found = json.loads(_path(root, bucket, task_id, revision).read_text())
        except (OSError, ValueError):
            continue
        if found.get("made_at") != made_at:
            return None  # the number made again: another revision
        return outcome_from_doc(found)
    return None


def expire(root: Path, now: float) -> None:
    """Remove the buckets older than the two newest."""
    newest = _bucket(now)
    try:
        names = os.listdir(root / LEDGER)
    except OSError:
        return
    for name in names:
        if name.isdigit() and int(name) < newest - 1:
            shutil.rmtree(root / LEDGER / name, ignore_errors=True)
