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
   user, for good; with ``--map-userns INSIDE`` (the program must be bwrap, started
   with ``--unshare-user --uid INSIDE --gid INSIDE``) a child left behind as root first
   writes the sandbox's uid and gid maps, ``INSIDE`` to UID and GID and 0 to the host's
   ``nobody`` (bwrap's ``--dev`` mounts a ``devpts``, which needs a root), through
   bwrap's ``--info-fd`` and ``--userns-block-fd``: one user namespace, whose
   ``/proc/self/uid_map`` shows the step its host uid, instead of the two bwrap makes
   alone (its outer one maps the host uid to 0, its inner one INSIDE to that 0).  The
   step inherits the block pipe's read end from bwrap, emptied, its writer gone;
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
import json
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
        self.map_userns: int | None = None
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
        elif arg == "--map-userns":
            opts.map_userns = int(value)
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


HOST_NOBODY = 65534  # who the sandbox's root is on the host: it runs nothing


def map_user_namespace(argv: list[str], inside: int, uid: int, gid: int) -> list[str]:
    """bwrap's argv, made to wait for its user namespace's maps, which a child of this
    process, still root, writes once bwrap names its sandbox's first process."""
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    if os.fork() == 0:  # the map writer: root, for the few milliseconds it takes
        try:
            os.close(info_w)
            os.close(block_r)
            write_maps(info_r, inside, uid, gid)
            os.write(block_w, b"1")
        finally:
            os._exit(0)  # without the maps bwrap reads an end and its sandbox fails
    os.close(info_r)
    os.close(block_w)
    os.set_inheritable(info_w, True)
    os.set_inheritable(block_r, True)
    return [argv[0], "--info-fd", str(info_w), "--userns-block-fd", str(block_r), *argv[1:]]


def write_maps(info: int, inside: int, uid: int, gid: int) -> None:
    data = b""
    while chunk := os.read(info, 4096):
        data += chunk
    pid = int(json.loads(data)["child-pid"])
    for name, text in (("uid_map", f"0 {HOST_NOBODY} 1\n{inside} {uid} 1\n"),
                       ("setgroups", "deny"),
                       ("gid_map", f"0 {HOST_NOBODY} 1\n{inside} {gid} 1\n")):
        with open(f"/proc/{pid}/{name}", "w") as out:
            out.write(text)


def no_new_privs() -> None:
    _call(_libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def main(argv: list[str]) -> int:
    opts = parse(argv)
    join_cgroups(opts.cgroups)
    set_rlimits(opts.rlimits)
    if opts.netns:
        enter_netns(opts.netns)
    argv = opts.argv
    if opts.map_userns is not None and opts.uid is not None and opts.gid is not None:
        argv = map_user_namespace(argv, opts.map_userns, opts.uid, opts.gid)
    drop_to(opts.uid, opts.gid)
    no_new_privs()
    if opts.hold:  # keep the namespace for others to join, until killed
        while True:
            signal.pause()
    env = {k: v for k, v in os.environ.items() if k not in opts.unset}
    os.execve(argv[0], argv, env)  # noqa: S606 - an absolute path, argv as a list
    return 127  # not reached


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except OSError as exc:
        sys.stderr.write(f"taskenv: could not enter the task's containment: {exc}\n")
        sys.exit(126)
