"""Enter a task's containment, then execute a command: the exec helper.

``python -I -S enter.py [options] -- PROGRAM ARG...``, started by the runner for
every sandbox.  It does, in its own process, what must happen between ``fork`` and
``exec`` and cannot safely run in a ``preexec_fn`` next to the runner's threads:

1. ``--cgroup FILE`` (repeated): write its own pid into each ``cgroup.procs``, so the
   step and everything it starts are counted and limited from the first instruction;
2. ``--rlimit NAME=SOFT:HARD`` (repeated): ``nofile``, ``fsize``, ``core``, ...;
3. ``--netns new`` makes a fresh network namespace with loopback up, ``--netns PATH``
   joins an existing one (``/proc/PID/ns/net`` of a holder): how several sandboxes of
   one task will share a network;  ``--hold`` then just waits to be killed, keeping
   the namespace for the others to join;
4. ``--uid UID --gid GID``: drop every supplementary group, then to that group and
   user, for good;
5. sets ``no_new_privs`` (a setuid file gives nothing) and executes the program with
   the environment it was given, less each ``--unset NAME``: Python itself adds
   ``LC_CTYPE`` to its environment under the C locale (PEP 538), which the step's env
   must not gain.

It imports the standard library only and reads no user data but the argv it passes
on, so it runs isolated (``-I -S``) and starts in a few milliseconds.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import resource
import signal
import socket
import struct
import sys

CLONE_NEWNET = 0x40000000
PR_SET_NO_NEW_PRIVS = 38
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
RLIMITS = {"nofile": resource.RLIMIT_NOFILE, "fsize": resource.RLIMIT_FSIZE,
           "core": resource.RLIMIT_CORE, "nproc": resource.RLIMIT_NPROC,
           "memlock": resource.RLIMIT_MEMLOCK}


class Options:
    def __init__(self) -> None:
        self.cgroups: list[str] = []
        self.rlimits: list[tuple[int, int, int]] = []
        self.netns: str | None = None
        self.hold = False
        self.uid: int | None = None
        self.gid: int | None = None
        self.unset: list[str] = []
        self.argv: list[str] = []


def parse(argv: list[str]) -> Options:
    opts = Options()
    args = iter(argv)
    for arg in args:
        if arg == "--":
            opts.argv = list(args)
            break
        if arg == "--hold":
            opts.hold = True
            continue
        value = next(args)
        if arg == "--cgroup":
            opts.cgroups.append(value)
        elif arg == "--rlimit":
            name, limits = value.split("=", 1)
            soft, hard = limits.split(":", 1)
            opts.rlimits.append((RLIMITS[name], int(soft), int(hard)))
        elif arg == "--netns":
            opts.netns = value
        elif arg == "--uid":
            opts.uid = int(value)
        elif arg == "--gid":
            opts.gid = int(value)
        elif arg == "--unset":
            opts.unset.append(value)
        else:
            raise SystemExit(f"enter: unknown option {arg}")
    if not opts.argv and not opts.hold:
        raise SystemExit("enter: nothing to execute (missing '-- PROGRAM')")
    return opts


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _call(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def join_cgroups(files: list[str]) -> None:
    pid = str(os.getpid())
    for path in files:
        with open(path, "w") as procs:
            procs.write(pid)


def set_rlimits(limits: list[tuple[int, int, int]]) -> None:
    """Lower each limit to the one asked for; never raise one (an unprivileged worker, or
    a container's own ulimits, may not, and a limit is only ever meant to bound)."""
    for which, soft, hard in limits:
        _, current = resource.getrlimit(which)
        if current != resource.RLIM_INFINITY:
            hard = min(hard, current)
        resource.setrlimit(which, (min(soft, hard), hard))


def enter_netns(where: str) -> None:
    libc = _libc()
    if where == "new":
        _call(libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        loopback_up()
        return
    fd = os.open(where, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _call(libc.setns(fd, CLONE_NEWNET), f"setns({where})")
    finally:
        os.close(fd)


def loopback_up() -> None:
    """A new network namespace starts with ``lo`` down: replicas talk over it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def drop_to(uid: int | None, gid: int | None) -> None:
    if gid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
    if uid is not None:
        os.setresuid(uid, uid, uid)
        if os.geteuid() != uid or os.getuid() != uid:
            raise OSError(f"could not drop to uid {uid}")


def no_new_privs() -> None:
    _call(_libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def main(argv: list[str]) -> int:
    opts = parse(argv)
    join_cgroups(opts.cgroups)
    set_rlimits(opts.rlimits)
    if opts.netns:
        enter_netns(opts.netns)
    drop_to(opts.uid, opts.gid)
    no_new_privs()
    if opts.hold:  # keep the namespace for others to join, until killed
        while True:
            signal.pause()
    env = {k: v for k, v in os.environ.items() if k not in opts.unset}
    os.execve(opts.argv[0], opts.argv, env)  # noqa: S606 - an absolute path, argv as a list
    return 127  # not reached


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except OSError as exc:
        sys.stderr.write(f"taskenv: could not enter the task's containment: {exc}\n")
        sys.exit(126)
