"""The program a taskenv Slurm job runs on the cluster's node (standard library only).

The Slurm launcher copies this file, with the revision's spec filled in at
:data:`SPEC`, into the revision's directory and submits it as the batch script, with
a shebang of one argument, ``#!/usr/bin/python3 -I``: isolated mode, so no
``PYTHON*`` variable, no user site directory and no working directory is read at
start.  The nodes need ``python3``, ``srun`` and ``bwrap``, not taskenv.  The spec
holds no value of the env.  Nothing outside the sandbox ever has the task's
variables in its environment: not this program, not ``srun``, not bwrap.

As the batch script (no arguments) it

1. reads the revision's env file (``env``: NUL-separated ``NAME=value`` entries,
   mode 0600 in the revision directory, which is 0700) into a memory file of its
   own and removes it, so from then on the values are in this process's memory only;
2. starts the **holder**, a child that makes the job's own network namespace
   (loopback up, nothing else: the replicas meet there, on ``127.0.0.1``) and its
   own mount namespace, in which each replica's home is a size-capped tmpfs
   (``nosuid,nodev``) holding a copy of the task's files; both vanish when the
   holder dies, so nothing a step writes outlives the job on the node;
3. runs the steps in order, each as one ``srun`` step of ``replicas`` tasks, stops
   at the first that fails and leaves the outcome in ``outcome.json``.  Why a step
   failed is read only from what each srun task recorded of its own sandbox
   (``exits/``: exit code, when, an out-of-memory kill counted by the kernel),
   never from the output, which is the task's and may say anything.  What srun and the
   steps print comes through a pipe, a chunk at a time, into the job's output file
   (this program's stdout) as the task's log keeps it (:class:`JobOutput`): capped by
   the stored log's own code (``shared.store.outputcap``, written into this file by the
   launcher), the task's secrets hidden.

A job over several nodes (``nodes`` above 1) has a holder on each: the batch program
starts one ``hold`` task per node as a step of its own (``srun --overlap``, beside the
steps), each reads the env file into a memory file of its own, makes the namespaces
with the homes of the replicas its node runs, and joins them to the job's own network:
a VXLAN segment (VNI: the job id) whose device it moves into the holder's network
namespace, node k at ``JOB_NET.(k+1)/24``, a peer entry per other node, no route to
anything else; so a step reaches the other nodes' replicas and never a node's own
services.  The batch program removes the env file once every node has it.

Each srun task runs this file again (``task N``, isolated mode too): it reads the
values from its node's holder's memory file, joins the holder's namespaces, and
starts bubblewrap with an **empty environment** and the step's variables as
``--setenv`` arguments in a memory file (``--args FD``: never on a command line),
under the task's rlimits and, where the job runs as root, as a user of the job's
own; then it waits, prefixes each line of a replica's output with ``[replica k]``,
and records how the sandbox ended.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import fcntl
import json
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Collection, Iterable, Mapping
from typing import Any

# What the job's output file keeps: the code that caps a log in Redis.  The launcher writes
# that module's source in place of these two lines (the node has no taskenv to import it
# from); this file copied alone has no OutputCap, and runs all but the steps.
with contextlib.suppress(ImportError):
    from shared.store.outputcap import OutputCap

SPEC: dict[str, Any] | None = None  # the launcher's spec replaces this line

SLURM_PREFIXES = ("SLURM_", "SRUN_")
OUTCOME = "outcome.json"
ENV_FILE = "env"  # the values, until the batch program has them in memory
HOLDER = "holder.json"  # where the srun tasks find the holder and the values
NODES = "nodes.json"  # a job over several nodes: their names and addresses, in rank order
HOLD_WAIT_SECONDS = 120  # for every node's holder to answer
HOLD_LOG = "hold.log"  # what srun says of the holders' step
VXLAN_PORT = 4789
EXITS = "exits"  # one record per replica and step, written outside the sandbox
RECEIVED = "received"  # each replica's env as its first step gets it: name -> keyed hash
STOPPED = "stopped by Slurm (cancelled, over its time limit, or its node lost)"
# A job running as root runs its sandboxes as a user of its own, so the kernel counts its
# processes (RLIMIT_NPROC), inotify instances and the rest apart from every other job's:
# the uid the launcher claimed for it at submission (spec "task_uid"), never another live
# job's.  A spec without one (a job submitted before) falls back to BASE + job id mod SPAN.
TASK_UID_BASE, TASK_UID_SPAN = 1_900_000_000, 1_000_000
# Where the holder mounts the homes in its own mount namespace: the first of these that
# holds nothing the job needs (the revision directory, python, bwrap).
SCRATCH_CANDIDATES = ("/mnt", "/media", "/srv", "/opt", "/tmp")  # noqa: S108

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
PR_SET_PDEATHSIG = 1
SIOCGIFCONF, SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8912, 0x8913, 0x8914, 0x1


# -- what the step's environment is ------------------------------------------------------

def parse_env(raw: bytes) -> dict[str, str]:
    """The env file's ``NAME=value`` entries, each ended by a NUL."""
    env = {}
    for entry in raw.split(b"\0"):
        if entry:
            name, _, value = entry.decode("utf-8", errors="surrogateescape").partition("=")
            env[name] = value
    return env


def step_env(environ: Mapping[str, str], task_env: Mapping[str, str],
             identity: Mapping[str, str]) -> dict[str, str]:
    """The step's environment: Slurm's own variables, the task's, and its identity."""
    env = {k: v for k, v in environ.items() if k.startswith(SLURM_PREFIXES)}
    env.update(task_env)
    env.update(identity)
    return env


def identity(environ: Mapping[str, str], template: Mapping[str, Any]) -> dict[str, str]:
    """This replica's identity variables: the same in every replica but the names that
    hold its index, which is Slurm's rank of this task."""
    if not template:
        return {}
    found = dict(template["constant"])
    found.update({name: environ.get("SLURM_PROCID", "0") for name in template["index"]})
    return found


def setenv_args(env: Mapping[str, str]) -> bytes:
    """bwrap's ``--args`` content: ``--setenv NAME VALUE`` for each variable, NUL-ended."""
    out = bytearray()
    for name, value in env.items():
        out += b"--setenv\0" + name.encode() + b"\0" + \
            value.encode("utf-8", errors="surrogateescape") + b"\0"
    return bytes(out)


def fit_proc_masks(argv: list[str], files: list[str], dirs: list[str],
                   proc: str = "/proc") -> list[str]:
    """bwrap's argv with the /proc masks of *this* node: the launcher's host chose them from
    its own /proc, and bwrap refuses to cover an entry the node does not have."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i:i + 2] == ["--ro-bind", "/dev/null"] and argv[i + 2].startswith("/proc/"):
            i += 3
            continue
        if argv[i] == "--tmpfs" and argv[i + 1].startswith("/proc/") and \
                argv[i + 1] != "/proc/1":  # the init's seal is every node's
            i += 2
            continue
        out.append(argv[i])
        if argv[i:i + 2] == ["--proc", "/proc"]:
            out.append("/proc")
            for name in files:
                if os.path.isfile(f"{proc}/{name}"):
                    out += ["--ro-bind", "/dev/null", f"/proc/{name}"]
            for name in dirs:
                if os.path.isdir(f"{proc}/{name}"):
                    out += ["--tmpfs", f"/proc/{name}"]
            i += 2
            continue
        if argv[i] == "--":
            return out + argv[i + 1:]  # the step's own argv, untouched
        i += 1
    return out


def rehome(argv: list[str], seed: str, home: str) -> list[str]:
    """bwrap's argv with the task's home bound from ``home`` (the replica's tmpfs)."""
    out = list(argv)
    for i in range(len(out) - 2):
        if out[i] == "--bind" and out[i + 1] == seed:
            out[i + 1] = home
            return out
        if out[i] == "--":
            break
    raise ValueError("the step's argv binds no home")


# -- namespaces, mounts, limits ------------------------------------------------------------

def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def task_uid(job_id: int, spec: dict[str, Any] | None = None) -> int:
    """The user a root job's sandboxes run as (the one claimed for the job); the job's own
    account otherwise."""
    if os.geteuid() != 0:
        return os.geteuid()
    if spec is not None and spec.get("task_uid") is not None:
        return int(spec["task_uid"])
    return TASK_UID_BASE + job_id % TASK_UID_SPAN


def scratch_dir(keep: list[str]) -> str:
    for candidate in SCRATCH_CANDIDATES:
        if os.path.isdir(candidate) and not any(
                os.path.realpath(path) == candidate or
                os.path.realpath(path).startswith(candidate + "/") for path in keep):
            return candidate
    raise OSError(f"no directory among {', '.join(SCRATCH_CANDIDATES)} is free to hold "
                  "the task's homes")


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def copy_owned(source: str, target: str, uid: int) -> None:
    """``source``'s tree into ``target``, every entry owned by ``uid``, no setuid bit."""
    for entry in os.scandir(source):
        dest = os.path.join(target, entry.name)
        if entry.is_dir(follow_symlinks=False):
            os.mkdir(dest, 0o700)
            copy_owned(entry.path, dest, uid)
        elif entry.is_symlink():
            os.symlink(os.readlink(entry.path), dest)
        else:
            shutil.copyfile(entry.path, dest, follow_symlinks=False)
            os.chmod(dest, entry.stat(follow_symlinks=False).st_mode & 0o777)
        os.chown(dest, uid, uid, follow_symlinks=False)


def make_namespaces(spec: dict[str, Any], uid: int, ranks: range) -> str:
    """In the holder: its own network and mount namespaces (and, for an account that is
    not root, a user namespace owning them), each replica's home a tmpfs in them.
    Returns where the homes are."""
    libc = _libc()
    own_user = os.geteuid() != 0
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | (CLONE_NEWUSER if own_user else 0)),
           "unshare")
    if own_user:  # map the account to itself: its files stay its own
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{os.getegid()} {os.getegid()} 1")):
            with open(f"/proc/self/{name}", "w") as out:
                out.write(text)
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    scratch = scratch_dir([spec["run_dir"], sys.executable, spec["bwrap"], spec["srun"]])
    _check(libc.mount(b"tmpfs", scratch.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                      b"size=1m,mode=0755"), f"mount a tmpfs on {scratch}")
    gid = uid if not own_user else os.getegid()
    for k in ranks:
        home = os.path.join(scratch, f"home-{k}")
        os.mkdir(home, 0o700)
        options = f"size={spec['home_bytes']},mode=0700,uid={uid},gid={gid}".encode()
        _check(libc.mount(b"tmpfs", home.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options),
               f"mount the home tmpfs on {home}")
        if os.path.isdir(spec["home"]):
            copy_owned(spec["home"], home, uid)
    loopback_up()
    return scratch


def hold(spec: dict[str, Any], uid: int, ranks: range, ready: int) -> None:
    """The holder's life: make the namespaces, say where the homes are, wait to be killed."""
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        scratch = make_namespaces(spec, uid, ranks)
        os.write(ready, json.dumps({"scratch": scratch}).encode())
    except OSError as exc:
        os.write(ready, json.dumps({"error": str(exc)}).encode())
        os._exit(1)
    os.close(ready)
    while True:
        signal.pause()


def join(holder: int) -> None:
    """Enter the holder's namespaces (its user namespace first, where it has one)."""
    libc = _libc()
    kinds = [("user", CLONE_NEWUSER)] if os.geteuid() != 0 else []
    for kind, flag in [*kinds, ("mnt", CLONE_NEWNS), ("net", CLONE_NEWNET)]:
        fd = os.open(f"/proc/{holder}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check(libc.setns(fd, flag), f"join the job's {kind} namespace")
        finally:
            os.close(fd)


def rlimits(spec: dict[str, Any]) -> list[tuple[int, int]]:
    lim = spec["limits"]
    found = [(resource.RLIMIT_NOFILE, lim["open_files"]), (resource.RLIMIT_FSIZE,
             lim["file_bytes"]), (resource.RLIMIT_CORE, 0)]
    if lim.get("pids"):
        found.append((resource.RLIMIT_NPROC, lim["pids"]))
    if lim.get("memory_bytes"):
        found.append((resource.RLIMIT_DATA, lim["memory_bytes"]))
    return found


def lower_limits(limits: list[tuple[int, int]]) -> None:
    """Lower each limit (never raise one: a limit only ever bounds)."""
    for which, value in limits:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


def oom_kills() -> int:
    """The kernel's count of out-of-memory kills in this process's memory cgroup and those
    above it (cgroup v1 ``memory.oom_control``, v2 ``memory.events``); 0 without one."""
    try:
        with open("/proc/self/cgroup") as groups:
            lines = groups.read().splitlines()
    except OSError:
        return 0
    v1 = [ln.split(":", 2)[2] for ln in lines if "memory" in ln.split(":", 2)[1].split(",")]
    if v1:
        base, name, rel = "/sys/fs/cgroup/memory", "memory.oom_control", v1[0]
    else:
        v2 = [ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")]
        if not v2:
            return 0
        unified = "/sys/fs/cgroup" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") \
            else "/sys/fs/cgroup/unified"
        base, name, rel = unified, "memory.events", v2[0]
    total, parts = 0, [p for p in rel.split("/") if p]
    for depth in range(len(parts), 0, -1):
        try:
            with open(os.path.join(base, *parts[:depth], name)) as counts:
                for line in counts:
                    if line.startswith("oom_kill "):
                        total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total


# -- an srun task: one replica's sandbox -----------------------------------------------------

def holder_file(spec: dict[str, Any], node: str) -> str:
    name = HOLDER if spec.get("nodes", 1) == 1 else f"holder-{node}.json"
    return os.path.join(spec["run_dir"], name)


def interface_addresses() -> dict[str, str]:
    """Each IPv4 address of this network namespace, and the interface holding it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        size = 40 * 64  # struct ifreq is 40 bytes on 64-bit Linux
        buf = ctypes.create_string_buffer(size)
        request = struct.pack("iL", size, ctypes.addressof(buf))
        used = struct.unpack("iL", fcntl.ioctl(sock, SIOCGIFCONF, request))[0]
    raw = buf.raw[:used]
    return {socket.inet_ntoa(raw[i + 20:i + 24]): raw[i:i + 16].split(b"\0", 1)[0].decode()
            for i in range(0, used, 40)}


def route_interface(address: str) -> str | None:
    """The interface this namespace sends from to reach ``address``: the one holding the
    source address the kernel picks (not the route's device, which is ``lo`` on the node
    that holds ``address`` itself, where peers would be told a loopback address)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))  # a UDP connect sends nothing: the route is chosen
            source = sock.getsockname()[0]
    except OSError:
        return None
    return interface_addresses().get(source)


def policy_node_values(spec: dict[str, Any], node: str) -> dict[str, str]:
    """The platform's per-node defaults that reach this node: for each name, the first
    entry whose glob matches the node's name (as shared.task.workload.Workload.node_env)."""
    entries = spec.get("per_node") or ()
    if not entries:
        return {}
    from fnmatch import fnmatchcase

    found: dict[str, str] = {}
    for name, value, glob in entries:
        if name not in found and fnmatchcase(node, glob):
            found[name] = value
    return found


def node_values(spec: dict[str, Any], identity_env: Mapping[str, str],
                already: Collection[str] = ()) -> dict[str, str]:
    """The variables chosen on this node (in the job's network): the interface to
    MASTER_ADDR for gloo and NCCL, for the names neither the task's env nor a per-node
    default sets."""
    names = [n for n in spec.get("socket_ifname") or [] if n not in already]
    master = identity_env.get("MASTER_ADDR")
    if not names or not master:
        return {}
    interface = route_interface(master)
    return {name: interface for name in names} if interface else {}


def run_task(spec: dict[str, Any], number: int) -> int:
    node = os.environ.get("SLURMD_NODENAME", "")
    with open(holder_file(spec, node)) as found:
        holder = json.load(found)
    with open(f"/proc/{holder['batch']}/fd/{holder['env_fd']}", "rb") as values:
        task_env = parse_env(values.read())
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    job_id = int(os.environ.get("SLURM_JOB_ID", "0"))
    seccomp = os.open(spec["seccomp"], os.O_RDONLY) if spec.get("seccomp") else None
    join(holder["holder"])
    os.chdir(spec["run_dir"])
    argv = rehome(fit_proc_masks(spec["argv"][number], spec["proc_files"], spec["proc_dirs"]),
                  spec["home"], os.path.join(holder["scratch"], f"home-{rank}"))
    own = identity(os.environ, spec["identity"])
    env = step_env(os.environ, task_env, own)
    here = node or os.uname().nodename
    by_policy = policy_node_values(spec, here)
    chosen = {**by_policy, **node_values(spec, own, by_policy)}
    env.update(chosen)
    if chosen and number == 0 and rank % (spec["replicas"] // spec.get("nodes", 1)) == 0:
        print(f"==> on {here}: " + " ".join(f"{k}={v}" for k, v in chosen.items()), flush=True)
    if number == 0 and spec.get("look_key"):
        record_received(spec, rank, env, here, by_policy)
    args = os.memfd_create("taskenv-step-env", 0)  # not CLOEXEC: bwrap reads it
    os.write(args, setenv_args(env))
    os.lseek(args, 0, os.SEEK_SET)
    fds = [args, *([seccomp] if seccomp is not None else [])]
    argv = [argv[0], "--args", str(args),
            *(["--seccomp", str(seccomp)] if seccomp is not None else []), *argv[1:]]
    limits = rlimits(spec)
    uid = task_uid(job_id, spec)
    as_user: dict[str, Any] = {}
    if os.geteuid() == 0:
        as_user = {"user": uid, "group": uid, "extra_groups": []}
    prefix = spec["replicas"] > 1
    before = oom_kills()
    try:
        proc = subprocess.Popen(  # noqa: S603 - bwrap's argv as a list, an empty env
            argv, env={}, pass_fds=fds, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if prefix else None,
            stderr=subprocess.STDOUT if prefix else None,
            preexec_fn=lambda: lower_limits(limits), **as_user)  # noqa: PLW1509
    except OSError as exc:  # the node lacks the sandbox: say so, never run unsandboxed
        print(f"taskenv: cannot start the sandbox {argv[0]} on {os.uname().nodename}: "
              f"{exc.strerror} (TASKENV_SLURM_BWRAP)", file=sys.stderr, flush=True)
        code = 127
    else:
        for fd in fds:
            os.close(fd)
        if prefix and proc.stdout is not None:
            relay(proc.stdout.fileno(), rank)
        code = proc.wait()
        code = code if code >= 0 else 128 - code
    record_exit(spec["run_dir"], number, rank, code, oom_kills() > before)
    return code


def value_hash(key: bytes, value: str) -> str:
    """As shared.env.received.value_hash (a test holds the two equal).  Its modules are
    imported here, for the tasks that are looked at: OpenSSL's library weighs megabytes in
    every srun task, inside the job's memory limit."""
    import hashlib
    import hmac

    data = value.encode("utf-8", "surrogateescape")
    return hmac.new(key, data, hashlib.sha256).hexdigest()[:24]


def record_received(spec: dict[str, Any], rank: int, env: Mapping[str, str], node: str,
                    by_policy: Mapping[str, str]) -> None:
    """What this replica's sandbox is started with, each value as a keyed hash: the last
    look before exec, outside the sandbox, where the step cannot alter it; and the node's
    per-node defaults (non-secret), in clear."""
    key = bytes.fromhex(spec["look_key"])
    path = os.path.join(spec["run_dir"], RECEIVED, f"{rank}.json")
    write_json(path, {"node": node, "node_values": dict(by_policy),
                      "hashes": {name: value_hash(key, value) for name, value in env.items()}})


def relay(source: int, rank: int, fd: int = 1) -> None:
    """A replica's output, whole lines each prefixed ``[replica k] ``, to this process's
    stdout (srun's, then the job's output file).  A line longer than :data:`RELAY_LINE`
    goes in pieces, each a line of its own: this process never holds more."""
    head, pending = f"[replica {rank}] ".encode(), b""
    while chunk := os.read(source, READ_CHUNK):
        pending += chunk
        cut = pending.rfind(b"\n") + 1 or (len(pending) if len(pending) >= RELAY_LINE else 0)
        if cut:
            write_all(fd, prefixed(head, pending[:cut]))
            pending = pending[cut:]
    if pending:
        write_all(fd, prefixed(head, pending))


def prefixed(head: bytes, data: bytes) -> bytes:
    """Each line of ``data`` begun with ``head``; the last one ended."""
    out = b"".join(head + line for line in data.splitlines(True))
    return out if out.endswith(b"\n") else out + b"\n"


def write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def record_exit(run_dir: str, number: int, rank: int, code: int, oom: bool) -> None:
    path = os.path.join(run_dir, EXITS, f"{number}-{rank}")
    with open(path + ".tmp", "w") as out:
        json.dump({"code": code, "at": time.monotonic_ns(), "oom": oom}, out)
    os.replace(path + ".tmp", path)


# -- the job's output: capped and redacted before it reaches the shared filesystem -------

REDACTED = "[secret]"  # as shared.secrets.REDACTED
MIN_FORM = 8  # shared.secrets.MIN_LINE_REDACTED and MIN_ENCODED
READ_CHUNK = 64 * 1024  # what one read of a pipe takes
# The platform's own lines start with MARK; a step's MARK is kept as SHOWN, so no step
# can print a line that passes for the platform's (as shared.task.replica_logs).
MARK, SHOWN = "\x1f", "\u241f"
RELAY_LINE = 64 * 1024  # a replica's line longer than this is relayed in pieces


def redaction_targets(secrets: Iterable[str]) -> list[str]:
    """The strings the job's output must never show, longest first: each secret value,
    each line of at least 8 characters of a multi-line one, and the encoded forms of each
    (base64 at three offsets in both alphabets, URL and JSON string escapes).  The rule of
    ``shared.secrets.redaction_targets``, for the standard library alone (a test holds the
    two equal)."""
    forms: set[str] = set()
    for value in secrets:
        if value:
            forms.add(value)
        if "\n" in value or "\r" in value:
            forms |= {line for line in re.split(r"\r?\n|\r", value) if len(line) >= MIN_FORM}
    targets = set(forms)
    for form in forms:
        targets |= encodings(form)
    return sorted(targets, key=lambda t: (-len(t), t))


def encodings(value: str) -> set[str]:
    """A secret's encoded forms (``shared.secrets.encodings``); none under 8 characters."""
    import base64
    from urllib.parse import quote, quote_plus

    if len(value) < MIN_FORM:
        return set()
    raw = value.encode("utf-8", "surrogatepass")
    forms = {quote(value, safe=""), quote_plus(value, safe="")}
    forms |= {json.dumps(value, ensure_ascii=ascii)[1:-1] for ascii in (True, False)}
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(encode(raw[shift:]).decode()[:len(raw[shift:]) * 8 // 6])
    return {f for f in forms if f and f != value}


class Redactor:
    """Hides secrets in output that arrives in pieces, as ``shared.secrets.StreamRedactor``
    does: ``feed`` emits what can no longer be part of a secret and keeps back the
    shortest tail that could still begin one (at most the longest target less one
    character), ``flush`` emits it at the end of the stream, ``drop`` forgets it where
    the output was cut (it may be the start of a secret the cut went through)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.targets = redaction_targets(secrets)
        self.pattern = re.compile("|".join(map(re.escape, self.targets))) \
            if self.targets else None
        self.keep = max((len(t) for t in self.targets), default=1) - 1
        self.by_first: dict[str, list[str]] = {}
        for target in self.targets:
            self.by_first.setdefault(target[0], []).append(target)
        self.pending = ""

    def feed(self, text: str) -> str:
        if self.pattern is None:
            return text
        buffer = self.pending + text
        cut = max(0, len(buffer) - self.keep)  # a match starting before has all it needs
        out: list[str] = []
        pos = 0
        for match in self.pattern.finditer(buffer):
            if match.start() >= cut:
                break
            out += [buffer[pos:match.start()], REDACTED]
            pos = match.end()
        hold = self._hold_from(buffer, max(pos, cut))
        out.append(buffer[pos:hold])
        self.pending = buffer[hold:]
        return "".join(out)

    def flush(self) -> str:
        rest, self.pending = self.pending, ""
        return self.pattern.sub(REDACTED, rest) if self.pattern else rest

    def drop(self) -> None:
        self.pending = ""

    def _hold_from(self, buffer: str, start: int) -> int:
        """The first position from ``start`` where a target starts or may start."""
        for at in range(start, len(buffer)):
            common = len(buffer) - at
            if any(buffer.startswith(t[:common], at) for t in self.by_first.get(buffer[at], ())):
                return at
        return len(buffer)

    def after_cut(self, text: str) -> int:
        """Where ``text``, which begins where output was cut, begins clear of a secret the
        cut went through: past its longest start that is the end of a target."""
        return max((len(t) - k for t in self.targets for k in _first(_ends(t, text))),
                   default=0)


def _ends(target: str, text: str) -> Iterable[int]:
    """Each ``k`` from 1 up where ``target[k:]`` begins ``text``: the long ends found by
    ``text``'s first characters, the short ones each looked at."""
    probe = text[:MIN_FORM]
    if not probe:
        return
    last_long = len(target) - len(probe)  # an end from k <= last_long holds the probe
    k = target.find(probe, max(1, len(target) - len(text)))  # no longer than the text
    while 0 < k <= last_long:
        if text.startswith(target[k:]):
            yield k
        k = target.find(probe, k + 1)
    for k in range(max(1, last_long + 1), len(target)):
        if text.startswith(target[k:]):
            yield k


def _first(found: Iterable[int]) -> list[int]:
    return next(([k] for k in found), [])


class JobOutput:
    """The job's output as its file (this program's stdout) keeps it: capped as the log
    in Redis is (:class:`OutputCap`: the start, a line saying how much was dropped, the
    end), the task's secrets hidden in what is kept, and a secret cut at either edge of
    what was dropped left out.  Holds at most the cap's tail and what the redactor keeps
    back, whatever the size of the output or of one of its lines."""

    def __init__(self, limit: int, secrets: Iterable[str], fd: int = 1) -> None:
        self.cap = OutputCap(limit)
        self.redactor = Redactor(secrets)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.fd = fd
        self.ended = False

    def write(self, data: bytes | str) -> None:
        """What the steps (and srun) printed: never the platform's mark."""
        text = data if isinstance(data, str) else self.decoder.decode(data)
        self._out(self.redactor.feed(self.cap.feed(text.replace(MARK, SHOWN))))

    def say(self, line: str) -> None:
        """One line of the platform's own, marked (its control characters shown escaped,
        so it stays one line)."""
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
        self._out(self.redactor.feed(self.cap.feed(f"{MARK}{shown}\n")))

    def pipe(self, source: int) -> None:
        """Everything ``source`` says until its end, a chunk at a time."""
        while chunk := os.read(source, READ_CHUNK):
            self.write(chunk)

    def finish(self) -> None:
        """Once the output has ended: what the cap held back (the note and the end)."""
        if self.ended:
            return
        self.ended = True
        self.write(self.decoder.decode(b"", final=True))
        ended = self.cap.finish()
        if not self.cap.dropped:
            self._out(self.redactor.feed(ended) + self.redactor.flush())
            return
        self.redactor.drop()  # the head's end: what could begin a secret is cut off
        note = f"\n{self.cap.note()}\n"
        tail = ended[len(note):]
        tail = tail[self.redactor.after_cut(tail):]
        marked = f"\n{MARK}{self.cap.note()}\n"  # the platform's line
        self._out(marked + self.redactor.feed(tail) + self.redactor.flush())

    def _out(self, text: str) -> None:
        if text:
            write_all(self.fd, text.encode("utf-8", "surrogatepass"))


def job_output(spec: dict[str, Any], raw_env: bytes) -> JobOutput:
    """The job's output, capped at the log's limit, hiding the values of the task's secret
    variables (the spec names them; the env file holds their values)."""
    env = parse_env(raw_env)
    return JobOutput(spec.get("log_bytes", 0),
                     [env[name] for name in spec.get("secret_names", ()) if name in env])


# -- the batch script ----------------------------------------------------------------------

def write_outcome(run_dir: str, outcome: dict[str, Any]) -> None:
    tmp = os.path.join(run_dir, OUTCOME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(outcome, out)
    os.replace(tmp, os.path.join(run_dir, OUTCOME))  # whole or absent


def step_failure(spec: dict[str, Any], number: int, srun_code: int) -> dict[str, Any]:
    """Why step ``number`` failed, from its replicas' own records (never its output)."""
    records = []
    for rank in range(spec["replicas"]):
        try:
            with open(os.path.join(spec["run_dir"], EXITS, f"{number - 1}-{rank}")) as found:
                records.append((rank, json.load(found)))
        except (OSError, ValueError):
            continue
    failed = sorted((r for r in records if r[1]["code"] != 0), key=lambda r: r[1]["at"])
    code = failed[0][1]["code"] if failed else srun_code
    if any(r[1]["oom"] for r in records):
        return {"state": "failed", "exit_code": code,
                "reason": f"step {number} was killed: out of memory "
                          f"(over its memory limit, {spec['memory_limit']})"}
    if failed and spec["replicas"] > 1:
        return {"state": "failed", "exit_code": code,
                "reason": f"step {number}: replica {failed[0][0]} exited with {code}"}
    return {"state": "failed", "exit_code": code, "reason": f"step {number} exited with {code}"}


def run_steps(spec: dict[str, Any]) -> dict[str, Any]:
    steps = spec["argv"]
    srun_env = {k: v for k, v in os.environ.items() if k.startswith(SLURM_PREFIXES)}
    output = job_output(spec, values_here(spec))
    finish_when_stopped(output)
    try:
        for number, _ in enumerate(steps, start=1):
            output.say(f"==> step {number}/{len(steps)}: {spec['step_names'][number - 1]}")
            argv = [spec["srun"], "--export=ALL", *placement(spec), "--kill-on-bad-exit=1",
                    sys.executable, "-I", spec["program"], "task", str(number - 1)]
            code = run_step(argv, srun_env, output)
            if code != 0:
                return step_failure(spec, number, code)
        return {"state": "succeeded", "exit_code": 0, "reason": None}
    finally:
        output.finish()


def run_step(argv: list[str], env: dict[str, str], output: JobOutput) -> int:
    """srun's exit code; what it and the step's replicas print (both streams, in order)
    goes through ``output`` to the job's output file."""
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,  # noqa: S603
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    with proc:
        assert proc.stdout is not None
        output.pipe(proc.stdout.fileno())
    return proc.returncode


def values_here(spec: dict[str, Any]) -> bytes:
    """The env's entries, from this node's holder (where the steps read them too); none
    if it has none to give (the steps then fail, saying why)."""
    try:
        with open(holder_file(spec, os.environ.get("SLURMD_NODENAME", ""))) as found:
            holder = json.load(found)
        with open(f"/proc/{holder['batch']}/fd/{holder['env_fd']}", "rb") as values:
            return values.read()
    except (OSError, ValueError, KeyError):
        return b""


def finish_when_stopped(output: JobOutput) -> None:
    """Slurm's SIGTERM (a cancel, the time limit) ends the output first: the note and the
    end the cap held back reach the file before the handler already set exits."""
    then = signal.getsignal(signal.SIGTERM)

    def stopped(signum: int, frame: Any) -> None:
        try:
            output.finish()
        except OSError:
            pass
        if callable(then):
            then(signum, frame)

    signal.signal(signal.SIGTERM, stopped)


def placement(spec: dict[str, Any]) -> list[str]:
    """srun's options placing a step's replicas: block by block over the nodes, so node k
    runs ranks k*n..k*n+n-1 and replica 0 is on the first."""
    options = [f"--ntasks={spec['replicas']}"]
    if spec.get("nodes", 1) > 1:
        options += [f"--nodes={spec['nodes']}",
                    f"--ntasks-per-node={spec['replicas'] // spec['nodes']}",
                    "--distribution=block"]
    return options


def take_values(run_dir: str, remove: bool = True) -> int:
    """The env file's content in a memory file of this process; the file removed, unless
    other nodes have still to read it."""
    path = os.path.join(run_dir, ENV_FILE)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as found:
        raw = found.read()
    if remove:
        os.unlink(path)
    memfd = os.memfd_create("taskenv-env", os.MFD_CLOEXEC)
    write_all(memfd, raw)
    return memfd


def start_holder(spec: dict[str, Any], uid: int, ranks: range) -> tuple[int, str]:
    """The holder's pid and where it mounted the homes; OSError if it could not."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            hold(spec, uid, ranks, write)
        finally:
            os._exit(1)
    os.close(write)
    with os.fdopen(read, "rb") as said:
        answer = json.loads(said.read() or b'{"error": "the holder died"}')
    if "error" in answer:
        os.waitpid(pid, 0)
        raise OSError(answer["error"])
    return pid, answer["scratch"]


def end_holder(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


# -- a job over several nodes: a holder on each, and the job's own network --------------

def tool(name: str) -> str:
    """An iproute2 or util-linux command of the node, found where root's PATH has it."""
    found = shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise OSError(f"{name} is not installed on {os.uname().nodename}")
    return found


def run_tool(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def job_network(spec: dict[str, Any], holder: int, index: int, addresses: list[str],
                job_id: int) -> str:
    """Join the holder's network namespace to the job's VXLAN segment as node ``index``;
    the device's name.  Made in the node's namespace (where its packets travel, from the
    node's address), then moved into the holder's: it vanishes with it."""
    ip, bridge, nsenter = tool("ip"), tool("bridge"), tool("nsenter")
    device = f"tj{job_id}"[:15]
    run_tool(ip, "link", "add", device, "type", "vxlan", "id", str(job_id % (1 << 24) or 1),
             "local", addresses[index], "dstport", str(VXLAN_PORT), "nolearning")
    try:
        for k, peer in enumerate(addresses):
            if k != index:
                run_tool(bridge, "fdb", "append", "00:00:00:00:00:00", "dev", device,
                         "dst", peer)
        run_tool(ip, "link", "set", device, "netns", str(holder))
    except OSError:
        subprocess.run([ip, "link", "del", device], capture_output=True, check=False)  # noqa: S603
        raise
    inside = [nsenter, f"--net=/proc/{holder}/ns/net", "--", ip]
    run_tool(*inside, "addr", "add", f"{spec['job_net']}.{index + 1}/24", "dev", device)
    run_tool(*inside, "link", "set", device, "up")
    return device


def job_nodes(spec: dict[str, Any]) -> list[dict[str, str]]:
    """The job's nodes in Slurm's order (the first runs replica 0), with their addresses."""
    names = subprocess.run(  # noqa: S603
        [spec["scontrol"], "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
        capture_output=True, text=True, check=True).stdout.split()
    nodes = []
    for name in names:
        shown = subprocess.run([spec["scontrol"], "-o", "show", "node", name],  # noqa: S603
                               capture_output=True, text=True, check=True).stdout
        addr = next((f.split("=", 1)[1] for f in shown.split() if f.startswith("NodeAddr=")),
                    name)
        nodes.append({"name": name, "addr": socket.gethostbyname(addr)})
    return nodes


def write_json(path: str, data: object) -> None:
    with open(path + ".tmp", "w") as out:
        json.dump(data, out)
    os.replace(path + ".tmp", path)


def run_hold(spec: dict[str, Any]) -> int:
    """One node's holder, as a task of the job's ``hold`` step: lives until the batch
    program ends the step."""
    node = os.environ.get("SLURMD_NODENAME", "")
    path = holder_file(spec, node)
    job_id = int(os.environ.get("SLURM_JOB_ID", "0"))
    holder = 0

    def ended(*_: object) -> None:
        if holder:
            end_holder(holder)
        os._exit(0)

    signal.signal(signal.SIGTERM, ended)
    signal.signal(signal.SIGINT, ended)
    try:
        with open(os.path.join(spec["run_dir"], NODES)) as found:
            nodes = json.load(found)
        index = [n["name"] for n in nodes].index(node)
        per = spec["replicas"] // spec["nodes"]
        memfd = take_values(spec["run_dir"], remove=False)
        holder, scratch = start_holder(spec, task_uid(job_id, spec),
                                       range(index * per, (index + 1) * per))
        device = job_network(spec, holder, index, [n["addr"] for n in nodes], job_id)
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        write_json(path, {"error": f"on {node}: {exc}"})
        ended()
    write_json(path, {"batch": os.getpid(), "env_fd": memfd, "holder": holder,
                      "scratch": scratch, "device": device})
    while True:
        signal.pause()


def start_node_holders(spec: dict[str, Any], srun_env: dict[str, str]
                       ) -> subprocess.Popen[bytes]:
    """Every node's holder, as one step beside the job's steps; once each has answered
    (its namespaces made, the values read), the env file is removed.  OSError naming the
    node whose holder could not."""
    run_dir = spec["run_dir"]
    nodes = job_nodes(spec)
    write_json(os.path.join(run_dir, NODES), nodes)
    # srun's and slurmstepd's own words about this step (its end is a cancellation) are
    # not the task's output: they go to a file of their own, quoted if no holder answers.
    with open(os.path.join(run_dir, HOLD_LOG), "ab") as said:
        step = subprocess.Popen(  # noqa: S603
            [spec["srun"], "--overlap", f"--nodes={spec['nodes']}",
             f"--ntasks={spec['nodes']}", "--ntasks-per-node=1", sys.executable, "-I",
             spec["program"], "hold"],
            env=srun_env, stdin=subprocess.DEVNULL, stdout=said, stderr=said)
    deadline = time.monotonic() + HOLD_WAIT_SECONDS
    waiting = [n["name"] for n in nodes]
    try:
        while waiting:
            for name in list(waiting):
                try:
                    with open(holder_file(spec, name)) as found:
                        answer = json.load(found)
                except (OSError, ValueError):
                    continue
                if "error" in answer:
                    raise OSError(answer["error"])
                waiting.remove(name)
            if waiting and (step.poll() is not None or time.monotonic() > deadline):
                raise OSError(f"on {', '.join(waiting)}: no holder answered "
                              f"({last_line(os.path.join(run_dir, HOLD_LOG))})")
            time.sleep(0.01)  # the holders answer within tens of milliseconds
    except OSError:
        end_step(step)
        raise
    finally:
        try:
            os.unlink(os.path.join(run_dir, ENV_FILE))
        except FileNotFoundError:
            pass
    return step


def last_line(path: str) -> str:
    try:
        with open(path, "rb") as found:
            found.seek(max(0, os.path.getsize(path) - 400))
            lines = found.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return "srun said nothing"
    return lines[-1] if lines else "srun said nothing"


def end_step(step: subprocess.Popen[bytes]) -> None:
    step.terminate()
    try:
        step.wait(timeout=10)
    except subprocess.TimeoutExpired:
        step.kill()
        step.wait()


def run_batch(spec: dict[str, Any]) -> int:
    run_dir = spec["run_dir"]
    holder = 0

    def stopped(*_: object) -> None:
        if holder:
            end_holder(holder)
        write_outcome(run_dir, {"state": "failed", "exit_code": None, "reason": STOPPED})
        os._exit(143)

    # Slurm signals the batch script when the job is cancelled, runs over its time or loses
    # its node: leave that much behind; the listing, while Slurm keeps the job, says which.
    signal.signal(signal.SIGTERM, stopped)
    if not os.path.exists(os.path.join(run_dir, ENV_FILE)):
        # Cancelled before it started: the launcher removed the values.
        write_outcome(run_dir, {"state": "failed", "exit_code": None,
                                "reason": "the job's values were gone: No such file or "
                                          "directory"})
        return 1
    for name in (EXITS, RECEIVED):
        os.makedirs(os.path.join(run_dir, name), mode=0o700, exist_ok=True)
    if spec.get("nodes", 1) > 1:
        return run_on_nodes(spec)
    try:
        memfd = take_values(run_dir)
    except OSError as exc:
        write_outcome(run_dir, {"state": "failed", "exit_code": None,
                                "reason": f"the job's values were gone: {exc.strerror}"})
        return 1
    try:
        holder, scratch = start_holder(spec, task_uid(int(os.environ.get("SLURM_JOB_ID", "0")),
                                                      spec), range(spec["replicas"]))
    except OSError as exc:
        outcome = {"state": "failed", "exit_code": None,
                   "reason": f"could not make the job's own network and homes on "
                             f"{os.uname().nodename}: {exc}"}
    else:
        shutil.rmtree(spec["home"], ignore_errors=True)  # copied into every replica's home
        with open(os.path.join(run_dir, HOLDER), "w") as out:
            json.dump({"batch": os.getpid(), "env_fd": memfd, "holder": holder,
                       "scratch": scratch}, out)
        outcome = run_steps(spec)
        end_holder(holder)
        holder = 0
    os.close(memfd)
    return ended(run_dir, outcome)


def ended(run_dir: str, outcome: dict[str, Any]) -> int:
    write_outcome(run_dir, outcome)
    return 0 if outcome["state"] == "succeeded" else int(outcome["exit_code"] or 1) & 0xFF or 1


def run_on_nodes(spec: dict[str, Any]) -> int:
    """The batch program of a job over several nodes: a holder on each, then the steps."""
    srun_env = {k: v for k, v in os.environ.items() if k.startswith(SLURM_PREFIXES)}
    try:
        holders = start_node_holders(spec, srun_env)
    except (OSError, subprocess.CalledProcessError) as exc:
        return ended(spec["run_dir"], {
            "state": "failed", "exit_code": None,
            "reason": f"could not make the job's own network and homes {exc}"})

    def stopped(*_: object) -> None:
        end_step(holders)
        write_outcome(spec["run_dir"], {"state": "failed", "exit_code": None,
                                        "reason": STOPPED})
        os._exit(143)

    signal.signal(signal.SIGTERM, stopped)
    shutil.rmtree(spec["home"], ignore_errors=True)  # copied into every replica's home
    outcome = run_steps(spec)
    end_step(holders)
    return ended(spec["run_dir"], outcome)


def main(spec: dict[str, Any], args: list[str]) -> int:
    if args[:1] == ["task"]:
        return run_task(spec, int(args[1]))
    if args[:1] == ["hold"]:
        return run_hold(spec)
    return run_batch(spec)


if __name__ == "__main__":
    if SPEC is None:
        sys.exit("this program runs as a taskenv Slurm job, with its spec filled in")
    sys.exit(main(SPEC, sys.argv[1:]))
