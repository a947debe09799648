"""A run's home: a size-capped tmpfs, ``nosuid,nodev``, that goes when the run ends.

The runner moves itself into a private mount namespace first thing (before any
thread starts: ``unshare(CLONE_NEWNS)`` refuses a threaded process), so the tmpfs it
mounts for the revision's home is seen by the runner and the sandboxes it starts
and by nothing else on the host, and vanishes with the runner however it ends: no
mount is ever left behind, and nothing a step wrote survives the revision on the host.
The tmpfs is RAM: its pages count against the task's memory limit, and its size
(``task_home_size``) caps it on its own.

What the launcher put in the run directory's ``home`` before the runner started (the
workdir, files for the task) is copied into the tmpfs, owned by the task's user.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
MNT_DETACH = 0x2
# Where the home tmpfs goes in the runner's namespace: the first of these that exists
# and holds nothing the runner needs (not the work directory, the project, Python).
SCRATCH_CANDIDATES = ("/mnt", "/media", "/srv", "/opt", "/tmp")  # noqa: S108


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


# This process's own mount namespace and scratch tmpfs, once made.  A runner of several
# replicas makes each replica's home in the same namespace, side by side under one
# scratch tmpfs: a second namespace or scratch mount would hide the homes made before it
# (and a replica that ended would unmount the home another replica is about to enter).
_own_namespace = False
_scratch: Path | None = None


def private_mounts() -> None:
    """This process's own mount namespace, sharing nothing back with the host's (made
    once per process, however many homes it mounts)."""
    global _own_namespace
    if _own_namespace:
        return
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _own_namespace = True


def scratch_dir(keep: list[Path]) -> Path:
    """A directory to cover with the runner's own tmpfs: none of ``keep`` lies under it."""
    for candidate in map(Path, SCRATCH_CANDIDATES):
        if candidate.is_dir() and not any(path.is_relative_to(candidate) for path in keep):
            return candidate
    raise OSError(f"no directory among {', '.join(SCRATCH_CANDIDATES)} is free to mount "
                  "the task's home on")


def mount_home(seed: Path, size: int, uid: int, gid: int, keep: list[Path]) -> Path:
    """A tmpfs of ``size`` bytes owned by the task's user, holding a copy of ``seed``;
    returns where it is mounted.

    It is mounted inside a small tmpfs of the runner's own over a :func:`scratch_dir`,
    not at the run directory: the task's user then needs no access to the directories
    above the run directory, which may be private to the workers (as a test's temporary
    directory is).  Each home is named after its seed (``home``, ``home-1``...: one per
    replica).  ``keep``: the paths the runner still needs.
    """
    global _scratch
    libc = _libc()
    if _scratch is None:
        scratch = scratch_dir([seed, *keep])
        _check(libc.mount(b"tmpfs", str(scratch).encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                          b"size=1m,mode=0755"), f"mount a private tmpfs on {scratch}")
        _scratch = scratch
    home = _scratch / seed.name
    home.mkdir(mode=0o700)
    options = f"size={size},mode=0700,uid={uid},gid={gid}".encode()
    _check(libc.mount(b"tmpfs", str(home).encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                      options), f"mount tmpfs on {home}")
    if seed.is_dir():
        copy_owned(seed, home, uid, gid)
    return home


def copy_owned(source: Path, target: Path, uid: int, gid: int) -> None:
    """``source``'s tree into ``target``, every entry owned by ``uid:gid``."""
    for entry in source.iterdir():
        dest = target / entry.name
        if entry.is_dir() and not entry.is_symlink():
            dest.mkdir(mode=0o700)
            copy_owned(entry, dest, uid, gid)
        else:
            shutil.copy2(entry, dest, follow_symlinks=False)
        os.chown(dest, uid, gid, follow_symlinks=False)


def unmount_home(home: Path, seed: Path) -> None:
    """Drop the tmpfs (and what the steps wrote), and the seed on the host."""
    _libc().umount2(str(home).encode(), MNT_DETACH)
    shutil.rmtree(seed, ignore_errors=True)
