"""The bubblewrap command line that runs one step in its own sandbox.

Pure functions: what a step may see is decided here, from the workload and the
host path of the task's home, and nothing is executed.  The sandbox has its own
user, PID, network, mount, IPC and UTS namespaces; the step runs as uid 65534
with no capabilities, sees the system directories read-only, a private ``/tmp``
and ``/proc``, and of the host's files only its own home, bound read-write at
:data:`TASK_HOME`.  PID 1 inside is bwrap itself: when a step ends (or its
runner dies) every process it started dies with it.

PID 1 is the platform's process, in the step's user namespace and as its user: the
kernel would let the step open ``/proc/1/mem`` read-write and read its environment
(ptrace itself is refused by the seccomp filter, but ``/proc/PID/mem`` is not a
syscall a filter can tell apart).  So ``/proc/1`` is covered by an empty, read-only
tmpfs of mode 0000 (:data:`SEAL_INIT`): every entry of the init, ``mem``, ``environ``,
``task/1/...``, answers ``EACCES``, and the step, which owns that tmpfs, can neither
change its mode (read-only) nor mount or unmount anything.  The step's own processes
(pid 2 and up) stay as readable and traceable to it as ever.

No value of the env is ever put on bwrap's command line (a command line is
readable by anyone in ``/proc``): bwrap is started with the step's env as its
own environment, which it hands on unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from shared.task.paths import workdir_problem

TASK_HOME = "/home/task"
# The PATH of a process the platform starts, and of a step whose env sets none.
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
NOBODY = 65534
# Read-only system directories; on merged-/usr systems the others are links into /usr.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The few files of /etc a program needs to load libraries and check certificates.
ETC_ENTRIES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
               "/etc/ssl", "/etc/ca-certificates", "/etc/localtime")
ISOLATION = ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
             "--uid", str(NOBODY), "--gid", str(NOBODY))

# What /proc tells of the host that a step has no need of: the kernel's symbols, keys and
# timers, its command line and modules (files: /dev/null over them, unreadable) and the
# hardware trees (directories: an empty tmpfs over them).  Only what exists is covered:
# bwrap cannot create a mount point inside /proc.
PROC_HIDDEN_FILES = ("kallsyms", "kcore", "keys", "key-users", "timer_list", "sched_debug",
                     "sysrq-trigger", "latency_stats", "modules", "vmallocinfo", "cmdline",
                     "config.gz", "kmsg", "iomem", "ioports", "slabinfo", "zoneinfo",
                     "pagetypeinfo", "buddyinfo", "softirqs", "interrupts", "partitions",
                     "diskstats", "mdstat", "swaps", "mtrr", "dma", "execdomains")
PROC_HIDDEN_DIRS = ("acpi", "asound", "bus", "driver", "dynamic_debug", "fs", "irq", "scsi",
                    "sysvipc", "tty", "pressure")

# bwrap always sets PWD to the working directory; a step whose env does not set PWD gets
# it removed again.  The step's argv follows as the script's arguments: data, never code.
DROP_PWD = ("/bin/sh", "-c", 'unset PWD; exec "$@"', "sh")
# The sandbox's init (bwrap, pid 1) out of the step's reach: /proc/1 under an empty tmpfs
# of mode 0000, read-only, so nothing of it can be opened (see the module's docstring).
INIT_PROC = "/proc/1"
SEAL_INIT = ("--perms", "0000", "--tmpfs", INIT_PROC, "--remount-ro", INIT_PROC)


class BadWorkdir(ValueError):
    """A workdir that is not a relative path inside the task's home."""


def workdir_inside(workdir: str | None) -> str:
    """The step's working directory as the sandbox sees it."""
    if not workdir:
        return TASK_HOME
    problem = workdir_problem(workdir)
    if problem:
        raise BadWorkdir(f"workdir {problem}")
    return str(PurePosixPath(TASK_HOME, workdir))


def bwrap_argv(step: Sequence[str], home: Path, workdir: str | None,
               binary: str = "bwrap", env_sets_pwd: bool = False, *,
               tmp_bytes: int | None = None, share_net: bool = False,
               env_fd: int | None = None, runtime: str | None = None) -> list[str]:
    """bwrap's argv for one step: isolation, mounts, then the step's own argv as typed.

    ``tmp_bytes`` caps the step's /tmp; ``share_net`` keeps the network namespace bwrap
    was started in (one the local runner made; or, for the replicas of a distributed
    Slurm task, which must reach each other across nodes, the node's own) instead of a
    new one of bwrap's.  ``env_fd``: a descriptor holding the step's environment as
    bwrap arguments (:func:`env_file`), read by bwrap itself (``--args``).  ``runtime``:
    the root of a runtime directory (:mod:`shared.task.runtimes`) whose system
    directories the step sees instead of the host's; None: the host's.
    """
    return [binary, *ISOLATION, *(["--share-net"] if share_net else []),
            *system_binds(runtime or "/"), "--proc", "/proc", *proc_masks(), *SEAL_INIT,
            "--dev", "/dev",
            *(["--size", str(tmp_bytes)] if tmp_bytes else []),
            "--tmpfs", "/tmp",  # noqa: S108 - the sandbox's own empty /tmp
            "--bind", str(home), TASK_HOME, "--chdir", workdir_inside(workdir),
            *(["--args", str(env_fd)] if env_fd is not None else []), "--",
            *([] if env_sets_pwd else DROP_PWD), *step]


def env_file(env: Mapping[str, str]) -> int:
    """The step's environment as bwrap reads it from ``--args FD``: ``--clearenv``, then
    ``--setenv NAME VALUE`` for each variable, NUL-separated, in a memory file.

    So no process outside the sandbox — the exec helper's Python, bwrap itself — ever
    starts with the task's variables: a task's ``LD_PRELOAD`` or ``PYTHONPATH`` is data
    until bwrap hands it to the step, inside.  (The Slurm job's program, which carries
    only the standard library, writes the same form itself.)  The descriptor is
    inheritable; the caller closes it once the step has started.
    """
    data = bytearray(b"--clearenv\0")
    for name, value in env.items():
        data += b"--setenv\0" + name.encode() + b"\0" + \
            value.encode("utf-8", "surrogateescape") + b"\0"
    fd = os.memfd_create("taskenv-step-env", 0)  # not close-on-exec: bwrap reads it
    os.write(fd, bytes(data))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def proc_masks(proc: str = "/proc") -> list[str]:
    """Cover the host's entries of /proc that exist here (see :data:`PROC_HIDDEN_FILES`)."""
    args: list[str] = []
    for name in PROC_HIDDEN_FILES:
        if os.path.isfile(f"{proc}/{name}"):
            args += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    for name in PROC_HIDDEN_DIRS:
        if os.path.isdir(f"{proc}/{name}"):
            args += ["--tmpfs", f"/proc/{name}"]
    return args


def system_binds(root: str = "/") -> list[str]:
    """The system directories of ``root`` (the host's, or a runtime directory's),
    read-only at their usual places.  ``usr`` must be there; --ro-bind-try: one that
    ``root`` lacks (/lib32, /libx32) is simply left out."""
    source = root.rstrip("/")
    args = ["--ro-bind", f"{source}/usr", "/usr"]
    for path in (*SYSTEM_DIRS[1:], *ETC_ENTRIES):
        args += ["--ro-bind-try", f"{source}{path}", path]
    return args
