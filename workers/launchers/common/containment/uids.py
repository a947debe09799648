"""Task uids for Slurm jobs, claimed on the launcher's shared filesystem.

The Slurm launcher keeps what it knows of its jobs beside them, on the filesystem the
nodes share (the revision's claim, its outcome), and talks to no Redis; so the uid each
job's sandboxes run as is claimed there too, from the same range as the local launcher's
pool (``TASKENV_TASK_UID_FIRST``, ``TASKENV_TASK_UID_COUNT``, see
:mod:`shared.store.uids`): ``<slurm_dir>/uids/<uid>`` is created with ``O_EXCL`` (atomic
on a local and on an NFS filesystem, as the revision's claim is) and names the revision
that holds it, which finds it again beside its run directory (``r<rev>.uid``, next to the
revision's claim, so a resubmission that makes the directory afresh keeps it).  Two jobs never hold
one uid: a claim is given back only once the job has ended (its outcome recorded and its
log copied, or Slurm forgot it), never after a time.

Candidates are tried from a point that depends on the revision, so a free uid is found in
a try or two while few of the range are held, whatever order jobs end in.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

UIDS = "uids"  # under the launcher's directory
UID_SUFFIX = ".uid"  # beside a revision's run directory: the uid it holds


class NoFreeUid(RuntimeError):
    """Every uid of the range is held by a live job."""


class ClaimedUids:
    def __init__(self, root: Path, first: int, count: int) -> None:
        if first <= 0 or count <= 0:
            raise ValueError("the task uid range must be above 0 and hold at least one uid "
                             "(TASKENV_TASK_UID_FIRST, TASKENV_TASK_UID_COUNT)")
        self.dir = root / UIDS
        self.first, self.count = first, count

    def take(self, member: str, run_dir: Path) -> int:
        """The uid ``member`` (``task/rN``) holds, claimed now if it holds none; it is
        noted beside ``run_dir``.  :class:`NoFreeUid` when the whole range is held."""
        held = self.held(run_dir, member)
        if held is not None:
            return held
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        start = int.from_bytes(hashlib.sha256(member.encode()).digest()[:8], "big")
        for step in range(self.count):
            uid = self.first + (start + step) % self.count
            try:
                fd = os.open(self.dir / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as claim:
                claim.write(member)
            uid_file(run_dir).write_text(str(uid))
            return uid
        raise NoFreeUid(f"all {self.count} task uids ({self.first}-"
                        f"{self.first + self.count - 1}) are held by running jobs "
                        "(TASKENV_TASK_UID_COUNT)")

    def held(self, run_dir: Path, member: str) -> int | None:
        """The uid the revision of ``run_dir`` holds (its claim still names it), or None."""
        try:
            uid = int(uid_file(run_dir).read_text())
        except (OSError, ValueError):
            return None
        return uid if self._holder(uid) == member else None

    def release(self, run_dir: Path, member: str) -> None:
        """Give the revision's uid back, once its job has ended; nothing if it holds none."""
        uid = self.held(run_dir, member)
        if uid is not None:
            (self.dir / str(uid)).unlink(missing_ok=True)
        uid_file(run_dir).unlink(missing_ok=True)

    def release_orphans(self, root: Path) -> int:
        """Give back the claims of revisions whose run directory is gone (removed once its
        job ended and was collected, by a launcher that stopped before giving the uid
        back); how many.  A live job's directory is there until it has ended."""
        freed = 0
        for claim in self.dir.glob("*") if self.dir.is_dir() else ():
            try:
                member = claim.read_text()
            except OSError:
                continue
            task, _, revision = member.partition("/")
            if member and not (root / task / revision).is_dir():
                claim.unlink(missing_ok=True)
                freed += 1
        return freed

    def _holder(self, uid: int) -> str | None:
        """The revision a claim names (None: no claim)."""
        try:
            return (self.dir / str(uid)).read_text()
        except OSError:
            return None


def uid_file(run_dir: Path) -> Path:
    return run_dir.parent / f"{run_dir.name}{UID_SUFFIX}"
