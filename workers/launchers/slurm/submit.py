"""What the Slurm launcher submits, and what Slurm's answers mean: pure functions.

* :func:`sbatch_argv` — one ``sbatch`` per revision: the job's name is the
  revision's ``run_name`` and its comment ``taskenv:<task id>:<revision>`` (how a
  listing, or a redelivered launch, finds whose job it is); no value of the env
  (they travel in the revision's env file); ``resources`` become
  ``--cpus-per-task``, ``--mem`` and ``--gres=gpu:N``; ``replicas`` become
  ``--ntasks`` and ``nodes`` ``--nodes`` with as many tasks on each
  (``--ntasks-per-node``): on each node the replicas share the job's own network
  namespace, and the nodes' namespaces are joined by the job's own network.
* :func:`export_entries` — the env file's content: NUL-separated ``NAME=value``
  entries, so commas, newlines, ``$(…)`` and quotes arrive as typed.
* :func:`job_program` — the batch script: ``job.py`` with the revision's spec (the
  steps' bwrap argv, the names of the task's variables, its limits; never a value),
  run by Python in isolated mode (``#!python3 -I``).
* :func:`parse_listing`, :func:`listed_outcome` — ``squeue``'s fixed-format lines (see
  :data:`LIST_FORMAT`) as jobs, and a job as taskenv's outcome.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from shared.config import DEFAULTS
from shared.env.identity import SOCKET_IFNAME_NAMES, differing, replica_env
from shared.store import outputcap
from shared.store.tasks import TaskStore
from shared.task import runtimes
from shared.task.limits import Limits
from shared.task.workload import Workload
from workers.launchers.base import Outcome
from workers.launchers.common.sandbox import (
    MINIMAL_PATH,
    PROC_HIDDEN_DIRS,
    PROC_HIDDEN_FILES,
    bwrap_argv,
)
from workers.launchers.slurm import job as slurm_job
from workers.launchers.slurm.traits import JOB_NET, TRAITS

COMMENT_PREFIX = "taskenv:"
OUTPUT = "output.log"
PROGRAM = "job.py"
SPEC_LINE = "SPEC: dict[str, Any] | None = None  # the launcher's spec replaces this line"
# Its source replaces these lines of job.py.
CAP_LINE = ("with contextlib.suppress(ImportError):\n"
            "    from shared.store.outputcap import OutputCap\n")
FUTURE_LINE = "from __future__ import annotations\n"
MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|K|M|G|T)?$")
CPU = re.compile(r"^(\d+(?:\.\d+)?)(m)?$")
MIB_PER = {None: 1 / 2**20, "Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 2**20,
           "k": 1000 / 2**20, "K": 1000 / 2**20, "M": 10**6 / 2**20, "G": 10**9 / 2**20,
           "T": 10**12 / 2**20}
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
          "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
          "RESV_DEL_HOLD", "SPECIAL_EXIT"}
# Why a finished job failed, in taskenv's words, by Slurm's final state.
FAILED_BECAUSE = {
    "FAILED": "a step failed",
    "TIMEOUT": "the job ran over its time limit",
    "NODE_FAIL": "the node running the job failed",
    "BOOT_FAIL": "the node could not boot for the job",
    "DEADLINE": "the job reached its deadline",
    "PREEMPTED": "the job was preempted",
    "REVOKED": "the job was revoked (federation)",
    "CANCELLED": "the job was cancelled in Slurm",
}


# squeue's fields, '|'-separated, the comment last (so nothing it holds can shift a field).
# Not --json: 22.05's ignores every filter (--me, --name, --jobs) and dumps the whole cluster.
LIST_FORMAT = "JobID:|,State:|,Reason:|,exit_code:|,MinMemory:|,Comment:"
LIST_FIELDS = ("job_id", "job_state", "state_reason", "exit_code", "min_memory", "comment")


def list_argv(squeue: str, *filters: str) -> list[str]:
    return [squeue, "--me", "--states=all", "--noheader", f"--Format={LIST_FORMAT}", *filters]


def parse_listing(text: str) -> list[dict[str, Any]]:
    """squeue's lines as jobs: ``job_id`` and ``exit_code`` (a wait status) as ints."""
    jobs = []
    for line in text.splitlines():
        parts = line.split("|", len(LIST_FIELDS) - 1)
        if len(parts) != len(LIST_FIELDS) or not parts[0].strip().isdigit():
            continue
        job: dict[str, Any] = dict(zip(LIST_FIELDS, (p.strip() for p in parts), strict=True))
        job["job_id"] = int(job["job_id"])
        job["exit_code"] = int(job["exit_code"]) if job["exit_code"].isdigit() else None
        jobs.append(job)
    return jobs


class BadResources(ValueError):
    """A resource request Slurm cannot be given."""


@dataclass(frozen=True)
class SlurmSettings:
    """Where jobs go and with what: from ``TASKENV_SLURM_*``."""

    partition: str = DEFAULTS.slurm_partition
    account: str = DEFAULTS.slurm_account
    sbatch: str = "sbatch"  # found on PATH by the launcher: no setting of its own
    srun: str = DEFAULTS.slurm_srun
    bwrap: str = DEFAULTS.slurm_bwrap
    python: str = DEFAULTS.slurm_python
    step_timeout_seconds: int = DEFAULTS.step_timeout_seconds
    runtimes: str = DEFAULTS.runtimes  # runtime directories, at the same path on every node
    log_bytes: int = 0  # what the job's output file keeps (0: the store's log limit)

    @classmethod
    def from_settings(cls, settings: Any, sbatch: str) -> SlurmSettings:
        return cls(partition=settings.slurm_partition, account=settings.slurm_account,
                   sbatch=sbatch, srun=settings.slurm_srun, bwrap=settings.slurm_bwrap,
                   python=settings.slurm_python,
                   step_timeout_seconds=settings.step_timeout_seconds,
                   runtimes=settings.runtimes, log_bytes=settings.log_max_bytes)

    def output_cap(self) -> int:
        """The job's output file keeps what a local runner's log keeps (its cap, the
        setting within the store's limit): the file is the log's only source."""
        store = TaskStore.LOG_LIMIT
        return min(self.log_bytes, store) if self.log_bytes else store


def runtime_root(settings: SlurmSettings, workload: Workload) -> str | None:
    """The runtime directory (on the nodes) the task's image names; None: the nodes' own
    system directories.  One no admin registered (any more) is refused."""
    problems = runtimes.problems(workload.image, settings)
    if problems:
        raise BadResources(problems[0].message)
    name = runtimes.named(workload.image)
    return None if name is None else runtimes.registered(settings)[name]


def comment(workload: Workload) -> str:
    return f"{COMMENT_PREFIX}{workload.task_id}:{workload.revision}"


def parse_comment(text: str) -> tuple[str, int] | None:
    """``taskenv:<task id>:<revision>`` -> the key; None for another job's comment."""
    if not text.startswith(COMMENT_PREFIX):
        return None
    task_id, _, revision = text[len(COMMENT_PREFIX):].rpartition(":")
    return (task_id, int(revision)) if task_id and revision.isdigit() else None


def memory_mib(quantity: str) -> int:
    """A Kubernetes memory quantity (``512Mi``, ``1G``) in whole MiB, rounded up."""
    found = MEMORY.match(quantity.strip())
    if not found:
        raise BadResources(f"resources.memory {quantity!r} is not a memory quantity "
                           "(e.g. 512Mi, 2Gi, 1G)")
    return max(1, math.ceil(float(found.group(1)) * MIB_PER[found.group(2)]))


def cpus(quantity: str) -> int:
    """A Kubernetes CPU quantity (``2``, ``500m``) as whole CPUs, rounded up."""
    found = CPU.match(quantity.strip())
    if not found:
        raise BadResources(f"resources.cpu {quantity!r} is not a CPU quantity (e.g. 2, 500m)")
    value = float(found.group(1)) / (1000 if found.group(2) else 1)
    return max(1, math.ceil(value))


def resource_options(workload: Workload) -> list[str]:
    res = workload.resources
    options = [f"--nodes={workload.nodes}", f"--ntasks={replicas(workload)}"]
    if workload.nodes > 1:
        options.append(f"--ntasks-per-node={replicas(workload) // workload.nodes}")
    if res.cpu:
        options.append(f"--cpus-per-task={cpus(res.cpu)}")
    if res.memory:
        mib = memory_mib(res.memory)
        # Per replica: one replica per task, each with its CPUs.
        options.append(f"--mem={mib}M" if replicas(workload) == 1 else
                       f"--mem-per-cpu={math.ceil(mib / (cpus(res.cpu) if res.cpu else 1))}M")
    if res.gpus:
        options.append(f"--gres=gpu:{res.gpus}")
    return options


def memory_limit(workload: Workload) -> str:
    """The memory limit as the job was given it, for a failure's reason."""
    if not workload.resources.memory:
        return "the partition's default memory"
    memory = workload.resources.memory
    return f"resources.memory={memory}, --mem={memory_mib(memory)}M"


def replicas(workload: Workload) -> int:
    return max(1, workload.replicas)


def identity_template(workload: Workload) -> dict[str, Any]:
    """How each replica's identity (``shared.env.identity``, the one definition every
    launcher uses) is made on the node by ``job.identity``: the names that hold the
    replica's index (Slurm's rank of the srun task), and the names that hold the same
    value in every replica.  On one node replica 0 listens at ``127.0.0.1`` on the default
    port, as on the local launcher: the replicas share the job's own network namespace
    there, where no other job has any address or port.  Over several nodes it listens at
    the first node's address in the job's own network (``JOB_NET_MASTER``)."""
    master = TRAITS.replica_zero_for(workload.replicas, workload.run_name, workload.nodes)
    first = dict(replica_env(workload.group(master), 0))
    index = differing(workload.group()) if workload.replicas > 1 else []
    return {"index": index,
            "constant": {name: value for name, value in first.items() if name not in index}}


def time_limit_minutes(workload: Workload, step_timeout_seconds: int) -> int:
    """The whole job's limit: every step may take the step timeout."""
    return max(1, math.ceil(len(workload.steps) * step_timeout_seconds / 60))


def sbatch_argv(settings: SlurmSettings, workload: Workload, run_dir: Path) -> list[str]:
    argv = [settings.sbatch, "--parsable", f"--job-name={workload.run_name}",
            f"--comment={comment(workload)}", f"--chdir={run_dir}",
            f"--output={run_dir / OUTPUT}", "--open-mode=append",
            "--no-requeue", f"--time={time_limit_minutes(workload, settings.step_timeout_seconds)}",
            *resource_options(workload)]
    if settings.partition:
        argv.append(f"--partition={settings.partition}")
    if settings.account:
        argv.append(f"--account={settings.account}")
    return [*argv, str(run_dir / PROGRAM)]


def export_entries(env: Mapping[str, str]) -> bytes:
    """The env file's content: ``NAME=value`` entries, each ended by a NUL."""
    return b"".join(f"{name}={value}".encode() + b"\0" for name, value in env.items())


def job_env(workload: Workload, home: str) -> dict[str, str]:
    """The env the job is given: the resolved env, plus a PATH and HOME if it sets none."""
    env = workload.env_dict()
    env.setdefault("PATH", MINIMAL_PATH)
    env.setdefault("HOME", home)
    return env


def job_spec(settings: SlurmSettings, workload: Workload, run_dir: Path,
             names: Sequence[str], limits: Limits,
             task_uid: int | None = None) -> dict[str, Any]:
    home = run_dir / "home"
    env_sets_pwd = "PWD" in names
    count = replicas(workload)
    runtime = runtime_root(settings, workload)
    return {
        "argv": [bwrap_argv(step, home, workload.workdir, binary=settings.bwrap,
                            env_sets_pwd=env_sets_pwd, tmp_bytes=limits.tmp_bytes,
                            share_net=count > 1, runtime=runtime)
                 for step in workload.steps],
        "step_names": [step[0] for step in workload.steps],
        "proc_files": list(PROC_HIDDEN_FILES), "proc_dirs": list(PROC_HIDDEN_DIRS),
        "names": list(names),
        "replicas": count,
        "nodes": workload.nodes,
        "job_net": JOB_NET,
        # Chosen on the node for a task of several, unless its env sets them.
        "socket_ifname": [n for n in SOCKET_IFNAME_NAMES if n not in names] if count > 1
        else [],
        "identity": identity_template(workload),
        # Never over a name the job's env holds, as Workload.node_env (job.py stands alone).
        "per_node": [list(entry) for entry in workload.per_node if entry[0] not in names],
        "srun": settings.srun,
        "scontrol": sibling(settings.srun, "scontrol"),
        "bwrap": settings.bwrap,
        "program": str(run_dir / PROGRAM),
        "run_dir": str(run_dir),
        "home": str(home),
        "home_bytes": limits.home_bytes,
        # The host uid the job's sandboxes run as where it runs as root: its own, claimed
        # for it (containment.uids), never another live job's.
        "task_uid": task_uid,
        # Per process inside the sandbox, whatever the cluster's cgroups: open files, file
        # size, the data a process may map (memory, when resources.memory asks for some)
        # and the processes of the job's own user (its replicas together).
        "limits": {"open_files": limits.open_files, "file_bytes": limits.file_bytes,
                   "pids": limits.pids * count,
                   "memory_bytes": limits.memory_bytes if workload.resources.memory else 0},
        "output": str(run_dir / OUTPUT),
        "memory_limit": memory_limit(workload),
        # The output file's cap, and the variables whose values it hides (names only).
        "log_bytes": settings.output_cap(),
        "secret_names": [v.name for v in workload.env if v.secret],
    }


def sibling(binary: str, name: str) -> str:
    """``name`` in the directory of ``binary`` where that is a path (Slurm's commands are
    installed together); found on the node's PATH otherwise."""
    head = Path(binary).parent
    return str(head / name) if "/" in binary else name


def job_program(settings: SlurmSettings, spec: dict[str, Any]) -> str:
    """``job.py`` as the batch script: a shebang of one argument (``-I``: isolated mode,
    no ``PYTHON*`` variable, user site or working directory read), then the module with
    its spec."""
    source = Path(slurm_job.__file__).read_text(encoding="utf-8")
    if SPEC_LINE not in source or CAP_LINE not in source:
        raise RuntimeError("job.py lost its SPEC line or its import of the output's cap")
    filled = source.replace(SPEC_LINE, f"SPEC = json.loads({json.dumps(spec)!r})", 1)
    filled = filled.replace(CAP_LINE, inlined(outputcap), 1)
    if any(char.isspace() for char in settings.python):
        raise BadResources(f"TASKENV_SLURM_PYTHON {settings.python!r}: a shebang cannot "
                           "hold a path with spaces")
    return f"#!{settings.python} -I\n{filled}"


def inlined(module: ModuleType) -> str:
    """A module of the standard library alone, as lines of another program: its source
    without its ``from __future__`` import (the program has its own, first)."""
    source = Path(str(module.__file__)).read_text(encoding="utf-8")
    return source.replace(FUTURE_LINE, "", 1)


def listed_outcome(job: Mapping[str, Any], known_reason: str | None = None) -> Outcome:
    """A listed job as taskenv's outcome (``running`` until it has ended)."""
    state = str(job.get("job_state", ""))
    if state in ACTIVE:
        if state == "RUNNING":
            return Outcome("running")
        reason = str(job.get("state_reason") or "")
        return Outcome("running", reason=reason if reason and reason != "None" else state.lower())
    code = exit_status(job.get("exit_code"))
    if state == "COMPLETED" and code == 0:
        return Outcome("succeeded", exit_code=0)
    if state == "OUT_OF_MEMORY":
        return Outcome("failed", exit_code=code, reason=known_reason or oom_reason(job))
    because = FAILED_BECAUSE.get(state, f"Slurm ended the job as {state}")
    slurm_reason = str(job.get("state_reason") or "")
    if slurm_reason and slurm_reason != "None":
        because += f" ({slurm_reason})"
    return Outcome("failed", exit_code=code, reason=known_reason or because)


def oom_reason(job: Mapping[str, Any]) -> str:
    limit = str(job.get("min_memory") or "")
    named = f"--mem={limit}" if limit else "the partition's default"
    return f"out of memory: a step went over its memory limit ({named})"


def exit_status(raw: Any) -> int | None:
    """squeue's ``exit_code`` is a wait status: the code is its high byte, a signal the low."""
    if not isinstance(raw, int):
        return None
    return (raw >> 8) & 0xFF if raw & 0x7F == 0 else 128 + (raw & 0x7F)
