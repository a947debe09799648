"""A host uid of its own for each live pod: the kernel's per-uid budgets become per task.

Rootful podman runs a container's user as the same uid on the host.  Were every pod's
steps uid 65534, the budgets the kernel keeps per uid (``RLIMIT_NPROC``, inotify
instances and watches, POSIX message queues, keyrings) would be one budget shared by
every tenant on the host: one step holding the uid's 128 inotify instances makes another
tenant's ``inotify_init`` fail.  So each pod's containers run as a uid claimed for that
pod from the deployment's task uid range (``TASKENV_TASK_UID_FIRST``,
``TASKENV_TASK_UID_COUNT``: the range the local launcher's pool in Redis and the Slurm
launcher's claims draw from, :mod:`shared.store.uids`; a deployment runs one launcher),
held while the pod lives and released when it is removed.  Podman's pods are the
host's, as are the reconciler's listings of them, so the claims are kept on the host.

A claim is a file named after the pod in ``<work dir>/podman/uids/``, holding the uid;
every launch worker and the reconciler of the host share the directory, and a lock
(``flock`` of ``.lock`` there) makes choosing a free uid and writing the claim one step,
so two pods never hold one uid at once.  A second claim for the same pod (a redelivered
launch) answers the uid it already has.  A worker that died between its claim and its
play leaves a claim that no pod holds: the reconciler's sweep releases claims of pods
that are not there once they are older than a grace period, so a launch between its
claim and its play keeps its uid.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from shared.errors import TransientError

LOCK = ".lock"
POD_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")  # podman's names: never a path


class UidPool:
    """The host's task uids, one per live pod, claimed by pod name."""

    def __init__(self, directory: Path, first: int, count: int) -> None:
        if first <= 0 or count <= 0:
            raise ValueError("the task uid range must be above 0 and hold at least one uid "
                             "(TASKENV_TASK_UID_FIRST, TASKENV_TASK_UID_COUNT)")
        self.directory = directory
        self.first, self.count = first, count

    def claim(self, pod: str) -> int:
        """The uid ``pod`` runs as: the one it holds, else a free one, now held by it."""
        if not POD_NAME.fullmatch(pod):
            raise ValueError(f"not a pod name: {pod!r}")
        with self._locked():
            held = self._read(self.directory / pod)
            if held is not None:
                return held
            taken = set(self._claims().values())
            start = zlib.crc32(pod.encode()) % self.count  # spread, so a probe is short
            for step in range(self.count):
                uid = self.first + (start + step) % self.count
                if uid not in taken:
                    self._write(pod, uid)
                    return uid
        raise TransientError(f"all {self.count} task uids ({self.first}-"
                             f"{self.first + self.count - 1}) are held by this host's pods: "
                             "the launch waits for one to end (TASKENV_TASK_UID_COUNT)")

    def release(self, pod: str) -> None:
        """``pod`` is gone: its uid is free (nothing if it held none)."""
        with self._locked():
            (self.directory / pod).unlink(missing_ok=True)

    def held(self) -> dict[str, int]:
        """Each pod holding a uid, and its uid."""
        with self._locked():
            return self._claims()

    def release_stale(self, live: Iterable[str], older_than: float,
                      now: float | None = None) -> list[str]:
        """Release the claims of pods not in ``live`` made more than ``older_than`` seconds
        ago (a launch that died before its pod was played); the pods released."""
        now = time.time() if now is None else now
        keep = set(live)
        gone = []
        with self._locked():
            for pod in self._claims(unreadable=True):
                path = self.directory / pod
                try:
                    made = path.stat().st_mtime
                except FileNotFoundError:
                    continue
                if pod not in keep and now - made > older_than:
                    path.unlink(missing_ok=True)
                    gone.append(pod)
        return gone

    # -- the files --------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.directory / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor drops the lock

    def _claims(self, unreadable: bool = False) -> dict[str, int]:
        """Every claim: pod → uid (with ``unreadable``, claims that hold no uid as -1)."""
        out: dict[str, int] = {}
        for entry in os.scandir(self.directory):
            if entry.name.startswith("."):
                continue
            uid = self._read(Path(entry.path))
            if uid is not None or unreadable:
                out[entry.name] = -1 if uid is None else uid
        return out

    def _read(self, path: Path) -> int | None:
        try:
            text = path.read_text(encoding="ascii").strip()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() and self.first <= int(text) < self.first + self.count \
            else None

    def _write(self, pod: str, uid: int) -> None:
        """The claim, whole or absent (written beside it, then renamed)."""
        tmp = self.directory / f".{pod}.tmp"
        tmp.write_text(f"{uid}\n", encoding="ascii")
        tmp.replace(self.directory / pod)
