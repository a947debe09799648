"""The program a taskenv Slurm job runs on the cluster's nodes (standard library only).

The Slurm launcher copies this file, with the revision's spec filled in at
:data:`SPEC`, into the revision's directory and submits it as the batch script:
the nodes need ``python3``, ``srun`` and ``bwrap``, not taskenv.  The spec holds
no value of the env: values reach the job through ``sbatch --export-file``, and
the spec only names the variables that are the task's.

As the batch script (no arguments) it runs the steps in order, each as one
``srun`` step of ``replicas`` tasks (``--export=ALL``: a step would otherwise
inherit sbatch's export setting), stops at the first that fails, and leaves the
outcome in ``outcome.json`` beside the output, where the reconciler finds it even
after Slurm has forgotten the job.  Each srun task runs this file again
(``task N``), which builds the step's environment — exactly the task's variables,
Slurm's own ``SLURM_*``/``SRUN_*`` and, for a distributed task, the identity of
its replica — and replaces itself with the sandboxed step (bwrap's argv, made by
the launcher from ``workers.launchers.common.sandbox``), so no value is on a command line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

SPEC: dict[str, Any] | None = None  # the launcher's spec replaces this line

SLURM_PREFIXES = ("SLURM_", "SRUN_")
OUTCOME = "outcome.json"
# What slurmstepd writes when it kills a step over its memory (polling or cgroup).
OOM_SIGNS = ("exceeded job memory limit", "exceeded memory limit", "oom-kill",
             "out-of-memory", "out of memory")
DEFAULT_MASTER_PORT_BASE = 20000
# How the batch script hands the first node's address to the srun tasks (never to a step).
MASTER_ADDR_HANDOVER = "TASKENV_SLURM_MASTER_ADDR"
STOPPED = "stopped by Slurm (cancelled, over its time limit, or its node lost)"


def step_env(environ: Mapping[str, str], names: list[str],
             identity: Mapping[str, str]) -> dict[str, str]:
    """The step's environment: the task's variables, Slurm's, and the replica's identity."""
    env = {name: environ[name] for name in names if name in environ}
    env.update({k: v for k, v in environ.items() if k.startswith(SLURM_PREFIXES)})
    env.update(identity)
    return env


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list (``node[03-05,7],gpu1`` -> ``node03``)."""
    depth, end = 0, len(nodelist)
    for i, char in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            end = i
            break
    head = nodelist[:end]
    if "[" not in head:
        return head
    prefix, rest = head.split("[", 1)
    ranges, suffix = rest.split("]", 1)
    return prefix + ranges.split(",", 1)[0].split("-", 1)[0] + suffix


def master_port(environ: Mapping[str, str]) -> str:
    """A port the step reserved (``srun --resv-ports``: no other step on the node has it);
    without ``MpiParams=ports``, one derived from the job id."""
    reserved = environ.get("SLURM_STEP_RESV_PORTS", "")
    if reserved:
        return reserved.split(",", 1)[0].split("-", 1)[0]
    return str(DEFAULT_MASTER_PORT_BASE + int(environ.get("SLURM_JOB_ID", "0")) % 10000)


def node_address(scontrol: str, nodelist: str) -> str:
    """Where the allocation's first node is reached: its ``NodeAddr`` (what Slurm itself
    uses; a node's name need not resolve), else the name."""
    name = first_host(nodelist)
    try:
        shown = subprocess.run([scontrol, "show", "node", "--oneliner", name],
                               capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return name
    for field in shown.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1] or name
    return name


def identity(environ: Mapping[str, str], template: Mapping[str, Any]) -> dict[str, str]:
    """This replica's identity variables: the launcher's template (which names hold the
    replica's index, the first node's address, the rendezvous port, and which are the
    same everywhere) filled in from what Slurm set for this task."""
    if not template:
        return {}
    if not (template["index"] or template["addr"] or template["port"]):
        return dict(template["constant"])  # a world of one: nothing to ask Slurm
    rank = environ.get("SLURM_PROCID", "0")
    addr = environ.get(MASTER_ADDR_HANDOVER) or first_host(
        environ.get("SLURM_JOB_NODELIST", "localhost"))
    port = master_port(environ)
    found = dict(template["constant"])
    found.update({name: rank for name in template["index"]})
    found.update({name: addr for name in template["addr"]})
    found.update({name: port for name in template["port"]})
    return found


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
        if argv[i] == "--tmpfs" and argv[i + 1].startswith("/proc/"):
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


def failed_replica(output_path: str) -> tuple[int, int] | None:
    """The replica srun said failed first, and its exit code, from the output's tail
    (``srun: error: node1: task 1: Exited with exit code 3``); None if it said none."""
    try:
        with open(output_path, "rb") as out:
            out.seek(max(0, os.path.getsize(output_path) - 8192))
            tail = out.read().decode(errors="replace")
    except OSError:
        return None
    found = re.search(r"srun: error: \S+: tasks? (\d+)[-,\d]*: Exited with exit code (\d+)",
                      tail)
    return (int(found.group(1)), int(found.group(2))) if found else None


def out_of_memory(output_path: str) -> bool:
    """Whether slurmstepd said, near the end of the output, that it killed a step for memory."""
    try:
        with open(output_path, "rb") as out:
            out.seek(max(0, os.path.getsize(output_path) - 8192))
            tail = out.read().decode(errors="replace").lower()
    except OSError:
        return False
    return any(sign in tail for sign in OOM_SIGNS)


def write_outcome(run_dir: str, outcome: dict[str, Any]) -> None:
    tmp = os.path.join(run_dir, OUTCOME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(outcome, out)
    os.replace(tmp, os.path.join(run_dir, OUTCOME))  # whole or absent


def stopped(run_dir: str) -> None:
    write_outcome(run_dir, {"state": "failed", "exit_code": None, "reason": STOPPED})
    os._exit(143)


def run_steps(spec: dict[str, Any]) -> dict[str, Any]:
    steps = spec["argv"]
    srun_env = {k: v for k, v in os.environ.items()
                if k in spec["names"] or k.startswith(SLURM_PREFIXES)}
    if spec["replicas"] > 1:  # asked once per job, not once per replica and step
        srun_env[MASTER_ADDR_HANDOVER] = node_address(
            spec["scontrol"], os.environ.get("SLURM_JOB_NODELIST", "localhost"))
    for number, _ in enumerate(steps, start=1):
        print(f"==> step {number}/{len(steps)}: {spec['step_names'][number - 1]}", flush=True)
        argv = [spec["srun"], "--export=ALL", f"--ntasks={spec['replicas']}",
                "--kill-on-bad-exit=1", *(["--resv-ports=1"] if spec["replicas"] > 1 else []),
                sys.executable, spec["program"], "task", str(number - 1)]
        code = subprocess.call(argv, env=srun_env, stdin=subprocess.DEVNULL)
        if code != 0:
            if out_of_memory(spec["output"]):
                return {"state": "failed", "exit_code": code,
                        "reason": f"step {number} was killed: out of memory "
                                  f"(over its memory limit, {spec['memory_limit']})"}
            replica = failed_replica(spec["output"]) if spec["replicas"] > 1 else None
            if replica is not None:
                return {"state": "failed", "exit_code": replica[1],
                        "reason": f"step {number}: replica {replica[0]} exited with "
                                  f"{replica[1]}"}
            return {"state": "failed", "exit_code": code,
                    "reason": f"step {number} exited with {code}"}
    return {"state": "succeeded", "exit_code": 0, "reason": None}


def main(spec: dict[str, Any], args: list[str]) -> int:
    if args[:1] == ["task"]:
        argv = fit_proc_masks(spec["argv"][int(args[1])], spec["proc_files"],
                              spec["proc_dirs"])
        if spec.get("seccomp"):  # bwrap reads the filter from an inherited descriptor
            fd = os.open(spec["seccomp"], os.O_RDONLY)
            os.set_inheritable(fd, True)
            end = argv.index("--")
            argv = [*argv[:end], "--seccomp", str(fd), *argv[end:]]
        env = step_env(os.environ, spec["names"], identity(os.environ, spec["identity"]))
        try:
            os.execve(argv[0], argv, env)  # noqa: S606 - the step replaces this process, no shell
        except OSError as exc:  # the node lacks the sandbox: say so, never run unsandboxed
            print(f"taskenv: cannot start the sandbox {argv[0]} on {os.uname().nodename}: "
                  f"{exc.strerror} (TASKENV_SLURM_BWRAP)", file=sys.stderr, flush=True)
            return 127
    # Slurm signals the batch script when the job is cancelled, runs over its time or loses
    # its node: leave that much behind; the listing, while Slurm keeps the job, says which.
    signal.signal(signal.SIGTERM, lambda *_: stopped(spec["run_dir"]))
    outcome = run_steps(spec)
    write_outcome(spec["run_dir"], outcome)
    return 0 if outcome["state"] == "succeeded" else int(outcome["exit_code"] or 1) & 0xFF or 1


if __name__ == "__main__":
    if SPEC is None:
        sys.exit("this program runs as a taskenv Slurm job, with its spec filled in")
    sys.exit(main(SPEC, sys.argv[1:]))
