"""A network namespace private to one task, that its replicas' sandboxes share.

bubblewrap cannot join an existing namespace, and running one sandbox inside another is
what containment forbids.  So the runner makes the namespace itself: a small holder
process (``sleep``) is started in a new network namespace whose loopback is brought up,
and each replica's sandbox is started in that namespace (``setns`` between fork and
exec) with bwrap told not to make a network namespace of its own.  The replicas reach
each other on ``127.0.0.1`` and nothing else: the namespace has no interface but its own
loopback, so neither the host's loopback services (Redis, the API) nor the host's
addresses nor another task's replicas can be reached.  The runner itself stays in the
host's namespace (it talks to Redis), and the holder dies with the runner.

Needs CAP_SYS_ADMIN (the local launcher's runner runs as root); without it
:class:`NetnsUnavailable` says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import signal
import socket
import struct
import subprocess
from pathlib import Path

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class NetnsUnavailable(RuntimeError):
    """The task's network namespace could not be made: its replicas cannot run isolated."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def loopback_up() -> None:
    """Bring ``lo`` up in the calling process's network namespace (it starts down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def _become_holder() -> None:  # runs in the holder, between fork and exec
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the runner gone, the namespace goes
    _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    loopback_up()


class TaskNetwork:
    """The namespace of one task's replicas, held open by a process of its own."""

    def __init__(self) -> None:
        try:
            self.holder = subprocess.Popen(["sleep", "infinity"], preexec_fn=_become_holder,
                                           stdin=subprocess.DEVNULL, env={"PATH": "/bin:/usr/bin"})
        except (OSError, subprocess.SubprocessError) as exc:
            raise NetnsUnavailable(
                f"the task's network namespace could not be made ({exc}): the local "
                "launcher needs CAP_SYS_ADMIN (root) to run several replicas") from exc
        self.path = Path(f"/proc/{self.holder.pid}/ns/net")
        self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)

    def enter(self) -> None:
        """Move the calling process into the namespace: a replica's sandbox calls it
        between fork and exec (``Popen(preexec_fn=network.enter)``)."""
        _check(_libc.setns(self.fd, CLONE_NEWNET), "setns(CLONE_NEWNET)")

    def inode(self) -> int:
        return os.stat(self.path).st_ino

    def close(self) -> None:
        os.close(self.fd)
        self.holder.kill()
        self.holder.wait()

    def __enter__(self) -> TaskNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def without_own_network(argv: list[str]) -> list[str]:
    """A bwrap command line that makes every namespace but the network one: the sandbox
    stays in the namespace it was started in (the task's)."""
    if "--unshare-all" not in argv:
        return [a for a in argv if a != "--unshare-net"]
    at = argv.index("--unshare-all")
    return [*argv[:at], "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
            "--unshare-cgroup-try", *argv[at + 1:]]
