"""The seccomp filter every sandboxed step runs under, compiled with libseccomp.

bubblewrap loads a compiled classic-BPF program from a file descriptor
(``--seccomp FD``) right before it executes the step, after it has made its own
namespaces; so the filter may refuse what the step must never do without getting in
bubblewrap's way.  libseccomp (``libseccomp.so.2``, present wherever podman or
systemd are) is called through ctypes: the virtualenv needs no binding of its own,
and one compilation serves every step of a runner.

Refused with ``EPERM`` (the program sees an ordinary permission error):

* a new user namespace (``clone``/``unshare`` with ``CLONE_NEWUSER``): the step is
  already in one, and nested ones are where most kernel privilege escalations start;
  ``clone3``, whose flags a filter cannot read, answers ``ENOSYS`` so libc falls back
  to ``clone``;
* joining namespaces, mounting (old and new mount API), ``pivot_root``;
* the kernel's own machinery: modules, ``kexec``, ``reboot``, ``swapon``, BPF
  programs, ``perf_event_open``, ``userfaultfd``, the kernel keyring, ``io_uring``,
  ``open_by_handle_at`` (the classic container escape), clocks, ``acct``,
  ``quotactl``, ``syslog``, ``iopl``/``ioperm``;
* faking terminal input (``ioctl`` ``TIOCSTI``/``TIOCLINUX``);
* tracing or reading the sandbox's init, PID 1 (``ptrace``, ``process_vm_readv`` and
  ``process_vm_writev`` naming it): a stopped init leaves the task running and its slots
  held until the step's timeout.  Nor may a step take a pidfd of it (``pidfd_open``), the
  way to its descriptors (``pidfd_getfd``) and memory advice (``process_madvise``), or
  read what else ptrace's rules guard (``get_robust_list``, ``kcmp``); its ``/proc/1`` is
  sealed by the sandbox itself.  A step's own processes stay traceable (``py-spy dump``
  on a hung rank keeps working).

A step of another architecture (x32, i386 through ``int 0x80``) is killed: libseccomp
refuses what the filter was not compiled for.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os

CLONE_NEWUSER = 0x10000000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_EQ = 4
SCMP_CMP_MASKED_EQ = 7

DENIED = (
    "setns", "mount", "umount", "umount2", "pivot_root", "chroot",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "open_by_handle_at", "name_to_handle_at", "lookup_dcookie",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "acct", "quotactl",
    "syslog", "iopl", "ioperm", "uselib", "vhangup", "nfsservctl",
)


class SeccompUnavailable(RuntimeError):
    """libseccomp cannot be loaded, or refused to build the filter."""


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


@functools.cache
def compiled_filter() -> bytes:
    """The filter as the BPF program bubblewrap reads (compiled once per process)."""
    lib = _libseccomp()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    try:
        _add_rules(lib, ctx)
        read, write = os.pipe()
        try:
            _check(lib.seccomp_export_bpf(ctx, write), "seccomp_export_bpf")
            os.close(write)
            write = -1
            return _read_all(read)
        finally:
            os.close(read)
            if write >= 0:
                os.close(write)
    finally:
        lib.seccomp_release(ctx)


def _add_rules(lib: ctypes.CDLL, ctx: int) -> None:
    eperm = act_errno(errno.EPERM)
    for name in DENIED:
        _rule(lib, ctx, eperm, name)
    _rule(lib, ctx, act_errno(errno.ENOSYS), "clone3")
    newuser = _ArgCmp(0, SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
    _rule(lib, ctx, eperm, "clone", newuser)  # x86-64: flags are clone's first argument
    _rule(lib, ctx, eperm, "unshare", newuser)
    for request in (TIOCSTI, TIOCLINUX):
        _rule(lib, ctx, eperm, "ioctl", _ArgCmp(1, SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, request))
    init = 1  # the sandbox's PID 1, as the step sees it; pid_t is the low 32 bits
    _rule(lib, ctx, eperm, "ptrace", _ArgCmp(1, SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, init))
    for name in ("process_vm_readv", "process_vm_writev", "pidfd_open", "get_robust_list",
                 "kcmp"):
        _rule(lib, ctx, eperm, name, _ArgCmp(0, SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, init))
    _rule(lib, ctx, eperm, "kcmp", _ArgCmp(1, SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, init))


def _rule(lib: ctypes.CDLL, ctx: int, action: int, name: str, *args: _ArgCmp) -> None:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0:
        return  # this architecture has no such call (umount on x86-64, say): nothing to deny
    array = (_ArgCmp * len(args))(*args) if args else None
    _check(lib.seccomp_rule_add_array(ctx, action, number, len(args), array),
           f"seccomp_rule_add({name})")


def _check(result: int, what: str) -> None:
    if result < 0:
        raise SeccompUnavailable(f"{what} failed: {os.strerror(-result)}")


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


@functools.cache
def _libseccomp() -> ctypes.CDLL:
    path = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(path, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(
            f"libseccomp is not installed ({exc}): Debian's libseccomp2 package") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.c_void_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def filter_fd() -> int:
    """A fresh, inheritable descriptor holding the filter, for one bwrap (it reads it whole)."""
    fd = os.memfd_create("taskenv-seccomp", 0)
    os.write(fd, compiled_filter())
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd
