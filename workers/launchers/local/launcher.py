"""Run a task's steps on the worker's machine, each in a bubblewrap sandbox.

Like podman and Kubernetes, ``launch`` only starts the task: it hands the
workload to a detached runner process (``workers.launchers.local.runner``) and
returns ``running`` at once, so a long task never holds a launch worker.  The
runner runs the steps one after another, streams their output into the task's
log, keeps the revision's heartbeat alive and records the outcome.  Its pid and
start time are kept in the revision's directory, so :meth:`LocalLauncher.observe`
can tell a live runner from a dead one (and a redelivered launch adopts it).

Each step sees exactly the resolved env plus a minimal ``PATH`` and ``HOME``
when the env does not set them, and of the host only the system directories
and its own home (see ``workers.launchers.common.sandbox``).  ``TASKENV_LOCAL_SANDBOX=
off-unsafe-dev`` runs steps as plain processes instead: for development only,
since a step can then read everything the worker can.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.config import Settings
from shared.errors import LaunchFailed
from shared.redis_conn import connect_for
from shared.store.slots import HostSlots
from shared.store.tasks import TaskStore
from shared.store.uids import TaskUids, UidsExhausted
from shared.task import runtimes
from shared.task.limits import Limits, Maxima, limits_for
from shared.task.workload import Workload
from workers.launchers.base import Change, Hooks, Outcome, WaitForSlot
from workers.launchers.common import containment
from workers.launchers.common.run_dir import (
    finished_at,
    prepare_home,
    read_outcome_file,
    write_files,
)
from workers.launchers.common.sandbox import MINIMAL_PATH, TASK_HOME, BadWorkdir, workdir_inside
from workers.launchers.local import ended, spare
from workers.launchers.local.slots import admit_waiting, rescue_stranded

log = logging.getLogger(__name__)

SANDBOXED = "bwrap"
UNSAFE = "off-unsafe-dev"
SANDBOX_MODES = (SANDBOXED, UNSAFE)
# What the runner needs of the settings; handed over on its stdin, never on argv or env.
# The node a local task runs on, as a per-node default's glob (``when: {node: ...}``) sees it.
HOST = socket.gethostname()
CANCEL_GRACE = 5.0  # seconds a cancelled runner has to end its step before it is killed
RUNNER_SETTINGS = ("redis_url", "redis_master_name", "redis_sentinel_password",
                   "redis_timeout_seconds", "key_prefix", "secret_keys",
                   "heartbeat_seconds", "step_timeout_seconds", "log_max_bytes",
                   "local_max_running", "local_host_name", "stuck_after_seconds",
                   "visibility_timeout_seconds", "task_uid_first", "task_uid_count")


class SandboxUnavailable(RuntimeError):
    """The sandbox was asked for and cannot be had: refuse rather than run unsandboxed."""


# The runners this process started, kept to reap them once they end.  Per process, not per
# launcher: a launcher dropped while its runners live must not drop their handles (an
# unreaped handle collected with its launcher is a "subprocess still running" warning).
_RUNNERS: list[subprocess.Popen[bytes]] = []

class LocalLauncher:
    name = "local"
    sweep_every_pass = True
    never_starts: frozenset[str] = frozenset()

    def __init__(self, settings: Settings) -> None:
        self.root = Path(settings.work_dir).resolve()
        self.settings = settings
        self.bwrap = sandbox_binary(settings.local_sandbox)
        self.maxima = Maxima.from_settings(settings)
        runtimes.registered(settings)  # a TASKENV_RUNTIMES that cannot be read stops here
        self.abilities, self.not_enforced = containment_abilities(settings, self.bwrap)
        self._applied: set[Path] = set()  # finished run dirs whose outcome is recorded
        self._slots: HostSlots | None = None
        self._uids: TaskUids | None = None

    @classmethod
    def setup_problems(cls, settings: Settings) -> list[str]:
        """The check the launch worker makes when it builds the launcher, made at start: a
        host that cannot contain steps (no bwrap, not root, no writable cgroup) is said
        once, with the setting that runs anyway."""
        try:
            runtimes.registered(settings)
            containment_abilities(settings, sandbox_binary(settings.local_sandbox))
        except (SandboxUnavailable, ValueError) as exc:
            return [str(exc)]
        return []

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        run_dir = self.run_dir(workload)
        if runner_alive(run_dir):  # a redelivered launch: the task already runs
            hooks.started()
            return Outcome("running")
        ran = self.ended(workload)
        if ran is not None:  # its end was recorded, and a Redis failover lost the record
            hooks.log("local: this revision already ran on this host; its outcome is "
                      "recorded again, and its steps are not run a second time\n")
            return ran
        try:
            workdir_inside(workload.workdir)
        except BadWorkdir as exc:
            raise LaunchFailed(str(exc)) from exc
        runtime = runtime_root(self.settings, workload)
        if runtime and not self.bwrap:
            raise LaunchFailed(f"the runtime {workload.image} is bound into the sandbox, and "
                               f"TASKENV_LOCAL_SANDBOX={UNSAFE} runs none")
        self.take_slot(workload)
        uid = self.take_uid(workload)
        home = prepare_home(run_dir, workload.workdir)
        write_files(home / (workload.workdir or ""), workload.files)
        limits = limits_for(resources_doc(workload), self.maxima)
        spec = {**runner_spec(self.settings, workload, home, self.bwrap),
                **self.containment_spec(workload, limits, uid)}
        runner = "single"
        if workload.replicas > 1:
            spec, runner = with_replicas(spec, workload, run_dir, self.bwrap), "group"
        (run_dir / MADE_AT_FILE).write_text(repr(workload.made_at))
        pid = self._start_runner(run_dir, spec, runner)
        write_pid_file(run_dir, pid)
        how = "in a bwrap sandbox" if self.bwrap else "UNSANDBOXED (development mode)"
        if uid is not None:
            how += f" as host uid {uid}"
        if runtime and self.bwrap:
            how += f", runtime {workload.image} ({runtime})"
        hooks.log(f"local: started the steps {how}, limits: {limits.describe()}\n")
        for problem in self.not_enforced:
            hooks.log(f"local: NOT ENFORCED on this host: {problem}\n")
        if limits.gpus:
            hooks.log(f"local: resources.gpus is {limits.gpus}, but the local sandbox passes "
                      "no device of the host through: the steps see no GPU (use the podman "
                      "or kubernetes launcher for GPU tasks)\n")
        hooks.started()
        return Outcome("running")

    def containment_spec(self, workload: Workload, limits: Limits,
                         uid: int | None) -> dict[str, Any]:
        """What the runner needs to hold the steps in (nothing when unsandboxed)."""
        if not self.bwrap:
            return {}
        return {"plan": containment.plan_for(limits, self.settings, self.abilities, uid).to_doc(),
                "cgroup_name": cgroup_name(workload)}

    @property
    def uids(self) -> TaskUids:
        """The pool of task uids, in Redis (connected on first use)."""
        if self._uids is None:
            self._uids = task_uids(self.settings, connect_for(self.settings))
        return self._uids

    def take_uid(self, workload: Workload) -> int | None:
        """A host uid of the revision's own, for all its steps and replicas (None where the
        launcher cannot change user: unsandboxed, or not root).  With none free the run slot
        just taken goes back and the launch is retried later (:class:`UidsExhausted`)."""
        if not (self.bwrap and self.abilities.root):
            return None
        try:
            return self.uids.take(workload.task_id, workload.revision, time.time())
        except UidsExhausted:
            if self.settings.local_max_running > 0:
                self.slots.release(workload.task_id, workload.revision)
            raise

    @property
    def slots(self) -> HostSlots:
        """This host's run slots, in Redis (connected on first use)."""
        if self._slots is None:
            self._slots = host_slots(self.settings,
                                     connect_for(self.settings))
        return self._slots

    def take_slot(self, workload: Workload) -> None:
        """Hold one of the host's run slots, or raise :class:`WaitForSlot`."""
        if self.settings.local_max_running <= 0:
            return
        slots, task_id, revision = self.slots, workload.task_id, workload.revision
        weight = workload.replicas  # a task's replicas start together or not at all
        if not slots.acquire(task_id, revision, time.time(), weight):
            raise WaitForSlot(slots.host, slots.cap,
                              lambda: slots.join(task_id, revision, weight))

    def admit_waiting(self, tasks: TaskStore, send: Callable[[str, str, int], None]) -> int:
        """The reconciler's turn at the host's queue: slots freed by runners that died."""
        if self.settings.local_max_running <= 0:
            return 0
        return admit_waiting(tasks, self.slots, send, reserve_seconds(self.settings))

    def rescue_stranded(self, tasks: TaskStore, send: Callable[[str, str, int], None],
                        older_than: float) -> int:
        """The reconciler's full sweep of the revisions recorded as waiting."""
        if self.settings.local_max_running <= 0:
            return 0
        return rescue_stranded(tasks, self.slots, send, older_than)

    def observe(self, workload: Workload) -> Outcome | None:
        """``running`` while the runner lives, then the outcome it left; None if it left none.

        The runner records the end in Redis itself; the file it leaves first is what the
        reconciler goes by when that write was lost (Redis crashed within its fsync).
        """
        self.reap()
        if runner_alive(self.run_dir(workload)):
            return Outcome("running")
        return self.ended(workload)

    def ended(self, workload: Workload) -> Outcome | None:
        """How the revision ended on this host: its run directory's outcome file, or, once
        the directory is gone, the record :mod:`ended` keeps of it a while.  Either is that
        of another revision when its revision was made at another time (the number made
        again after a failover lost the first); a run directory that does not say when
        (made before it was kept) is taken as this revision's."""
        run_dir = self.run_dir(workload)
        found = read_outcome_file(run_dir)
        if found is not None:
            return found if made_at(run_dir) in (None, workload.made_at) else None
        return ended.find(self.root, workload.task_id, workload.revision, workload.made_at,
                          time.time())

    def cancel(self, workload: Workload) -> None:
        """Stop the runner: it kills its step's process group, then it is killed with its own.

        The runner gets ``SIGTERM`` first so it can end the step it runs (a sandboxed
        step also dies with its runner: bwrap runs with ``--die-with-parent``); whatever
        outlives ``CANCEL_GRACE`` seconds is killed with the runner's whole process group.
        """
        run_dir = self.run_dir(workload)
        pid = live_runner_pid(run_dir)
        if pid is None:
            return
        _signal_group(pid, signal.SIGTERM, group=False)
        deadline = time.monotonic() + CANCEL_GRACE
        while runner_alive(run_dir) and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
        if runner_alive(run_dir):
            _signal_group(pid, signal.SIGKILL, group=True)
        self.reap()

    def changes(self) -> list[Change]:
        """The revisions whose runner has ended, with the outcome each left on the host.

        Each runner records its own outcome in the task; this is what the reconciler
        needs when Redis lost that write.  A run directory whose change the reconciler
        has applied (:meth:`applied`: recorded, or found recorded already) is not
        reported again, and is removed, with any cgroup its runner left, once
        ``stuck_after_seconds`` have passed since the end (time for an operator to read
        its ``runner.log``): nothing of a finished revision outlives that, and nothing
        goes before its outcome is recorded.  Costs what finished since, never what runs.
        """
        now = time.time()
        ended.expire(self.root, now)
        for run_dir in list(self._applied):
            if now - finished_at(run_dir) >= self.settings.stuck_after_seconds:
                self.forget(run_dir)
                self._applied.discard(run_dir)
        found: list[Change] = []
        for pid_file in self.root.glob("*/r*/runner.pid"):
            run_dir = pid_file.parent
            if run_dir in self._applied or not run_dir.name[1:].isdigit():
                continue
            outcome = read_outcome_file(run_dir) or self.lost(run_dir, now)
            if outcome is None or runner_alive(run_dir):
                continue
            found.append(Change(run_dir.parent.name, int(run_dir.name[1:]), outcome))
        return found

    def lost(self, run_dir: Path, now: float) -> Outcome | None:
        """A runner that died without leaving its outcome (killed, its host restarted):
        failed as lost once it has been gone as long as the reconciler waits for a lost
        worker, so its directory and cgroup are cleaned up like a finished one's."""
        try:
            started = (run_dir / "runner.pid").stat().st_mtime
        except OSError:
            return None
        grace = self.settings.stuck_after_seconds + 3 * self.settings.heartbeat_seconds
        if now - started < grace:
            return None
        return Outcome("failed", reason="lost: its runner stopped without recording how the "
                                        "task ended")

    def applied(self, change: Change) -> None:
        """The reconciler has recorded ``change`` (or found it recorded): its run directory
        goes at the next :meth:`changes`."""
        self._applied.add(self.root / change.task_id / f"r{change.revision}")

    def forget(self, run_dir: Path) -> None:
        """Remove a finished revision's directory and whatever its runner left behind,
        keeping how it ended (:mod:`ended`)."""
        revision, now = run_dir.name[1:], time.time()
        outcome = read_outcome_file(run_dir) or self.lost(run_dir, now)
        if outcome is not None:
            ended.keep(self.root, run_dir.parent.name, int(revision),
                       made_at(run_dir) or 0.0, outcome, now)
        containment.remove_leftovers(self.settings, f"taskenv-{run_dir.parent.name}-r{revision}")
        shutil.rmtree(run_dir, ignore_errors=True)
        try:
            run_dir.parent.rmdir()  # the task's directory, once its last revision is gone
        except OSError:
            pass

    def seen(self, workload: Workload) -> Outcome | None:
        """A look at the runner's pid file and /proc: as cheap as a cache, so no cache.
        A runner that died without recording shows as None, and its task as lost."""
        return self.observe(workload)

    def reap(self) -> None:
        """Collect the exit status of the runners this process started that have ended."""
        _RUNNERS[:] = [proc for proc in _RUNNERS if proc.poll() is None]

    def logs(self, workload: Workload) -> str | None:
        return None  # the runner writes the task's log as the steps run

    def run_dir(self, workload: Workload) -> Path:
        return self.root / workload.task_id / f"r{workload.revision}"

    def _start_runner(self, run_dir: Path, spec: dict[str, Any], runner: str) -> int:
        """Hand the revision to a runner (the warm spare, when this process has one),
        and start the spare the next launch will take."""
        proc = spare.run({**spec, "run_dir": str(run_dir), "runner": runner})
        self.reap()
        _RUNNERS.append(proc)
        # Collected the moment it ends, not at this process's next launch: until then an
        # ended runner stays a <defunct> entry under the launch worker.
        threading.Thread(target=proc.wait, name=f"reap-runner-{proc.pid}", daemon=True).start()
        return proc.pid


MADE_AT_FILE = "made_at"  # when the revision was made (Workload.made_at), for ended.keep


def made_at(run_dir: Path) -> float | None:
    """When the revision run in ``run_dir`` was made; None if the directory does not say."""
    try:
        return float((run_dir / MADE_AT_FILE).read_text())
    except (OSError, ValueError):
        return None


def sandbox_binary(mode: str) -> str | None:
    """bwrap's path, or None in the unsafe development mode; refuses a missing bwrap."""
    if mode not in SANDBOX_MODES:
        raise ValueError(f"TASKENV_LOCAL_SANDBOX must be one of {', '.join(SANDBOX_MODES)}, "
                         f"not {mode!r}")
    if mode == UNSAFE:
        log.warning("TASKENV_LOCAL_SANDBOX=%s: local task steps run UNSANDBOXED, as the "
                    "worker's own user, and can read its keys, tokens and Redis; never use "
                    "this where more than one person submits tasks", UNSAFE)
        return None
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(
            "the local launcher runs every step in a bubblewrap sandbox, and no bwrap is "
            "installed: install it (Debian: apt-get install bubblewrap), or choose another "
            f"launcher (TASKENV_LAUNCHER); TASKENV_LOCAL_SANDBOX={UNSAFE} runs steps "
            "unsandboxed, for development only")
    return found


def runtime_root(settings: Settings, workload: Workload) -> str | None:
    """The runtime directory the task's image names (None: the host's own), checked
    again here: the API refused an unknown one when the task was created, but the admin
    may have changed ``TASKENV_RUNTIMES`` since, or removed the directory."""
    problems = runtimes.problems(workload.image, settings)
    if problems:
        raise LaunchFailed(problems[0].message)
    name = runtimes.named(workload.image)
    if name is None:
        return None
    root = runtimes.registered(settings)[name]
    if not os.path.isdir(os.path.join(root, "usr")):
        raise LaunchFailed(f"the runtime {name} ({root}) has no usr directory: it is not a "
                           "root filesystem tree (TASKENV_RUNTIMES)")
    return root


def host_slots(settings: Any, client: Any) -> HostSlots:
    """The run slots of this host (``local_host_name``, or the machine's hostname)."""
    host = settings.local_host_name or socket.gethostname()
    lease = 3.0 * int(settings.heartbeat_seconds)  # three missed renewals: the runner is gone
    return HostSlots(client, settings.key_prefix, host, int(settings.local_max_running), lease)


def task_uids(settings: Any, client: Any) -> TaskUids:
    """The deployment's pool of task uids (``task_uid_first``, ``task_uid_count``)."""
    return TaskUids(client, settings.key_prefix, int(settings.task_uid_first),
                    int(settings.task_uid_count), uid_lease_seconds(settings))


def uid_lease_seconds(settings: Any) -> float:
    """How long a task uid stays its revision's without a renewal.  Longer than a slot's
    lease: a uid given to a second task while the first still runs would make them share
    what the kernel counts per uid, so a runner cut off from Redis stops its steps before
    its lease can end (:func:`workers.launchers.local.report.holding_uid`)."""
    return float(settings.stuck_after_seconds) + 3.0 * int(settings.heartbeat_seconds)


def reserve_seconds(settings: Any) -> float:
    """How long a slot given to a waiting revision is kept for its launch to arrive."""
    return float(settings.stuck_after_seconds) + 3.0 * int(settings.heartbeat_seconds)


def containment_abilities(settings: Settings, bwrap: str | None
                          ) -> tuple[containment.Abilities, list[str]]:
    """What this host can enforce around a sandboxed step; refuses, in ``enforce`` mode,
    a host that cannot enforce it all (see ``docs/launchers.md``)."""
    mode = settings.local_containment
    if mode not in containment.MODES:
        raise ValueError(f"TASKENV_LOCAL_CONTAINMENT must be one of "
                         f"{', '.join(containment.MODES)}, not {mode!r}")
    if bwrap is None:
        return containment.Abilities(False, False, False), ["no sandbox at all"]
    abilities, problems = containment.host_abilities(settings)
    if problems and mode == containment.ENFORCE:
        raise SandboxUnavailable(
            "the local launcher cannot contain steps on this host: " + "; ".join(problems)
            + f" (TASKENV_LOCAL_CONTAINMENT={containment.WARN} runs them anyway, saying so)")
    if problems:
        log.warning("TASKENV_LOCAL_CONTAINMENT=warn: local steps run with these limits NOT "
                    "enforced: %s", "; ".join(problems))
    return abilities, problems


def cgroup_name(workload: Workload) -> str:
    return f"taskenv-{workload.task_id}-r{workload.revision}"


def resources_doc(workload: Workload) -> dict[str, Any]:
    res = workload.resources
    return {"cpu": res.cpu, "memory": res.memory, "gpus": res.gpus}


def step_env(workload: Workload, home: str, replica: int = 0) -> dict[str, str]:
    """The resolved env, the replica's identity (a task of one: a world of one), the
    platform's per-node defaults for this host, and a minimal ``PATH`` and ``HOME`` when
    the env does not set them."""
    env = workload.replica_env(replica)
    for name, value in workload.node_env(HOST).items():
        env.setdefault(name, value)
    env.setdefault("PATH", MINIMAL_PATH)
    env.setdefault("HOME", home)
    return env


def with_replicas(spec: dict[str, Any], workload: Workload, run_dir: Path,
                  bwrap: str | None) -> dict[str, Any]:
    """The runner's spec for a task of several replicas: each one's env (its identity,
    replica 0 listening on the task network's loopback) and its own home."""
    homes = [prepare_home(run_dir, workload.workdir, k) for k in range(workload.replicas)]
    for home in homes[1:]:  # replica 0's home has them already: each replica its own copy
        write_files(home / (workload.workdir or ""), workload.files)
    return {**spec, "replica_homes": [str(h) for h in homes],
            "replica_envs": [step_env(workload, TASK_HOME if bwrap else str(homes[k]), k)
                             for k in range(workload.replicas)]}


def runner_spec(settings: Settings, workload: Workload, home: Path,
                bwrap: str | None) -> dict[str, Any]:
    return {
        "settings": {name: getattr(settings, name) for name in RUNNER_SETTINGS},
        "workload": workload_doc(workload),
        "env": step_env(workload, TASK_HOME if bwrap else str(home)),
        "home": str(home),
        "bwrap": bwrap,
        "runtime": runtime_root(settings, workload),  # the system directories' root
    }


def workload_doc(workload: Workload) -> dict[str, Any]:
    """The record fields :meth:`Workload.from_doc` reads back."""
    res = workload.resources
    return {
        "id": workload.task_id, "revision": workload.revision, "name": workload.name,
        "steps": [list(step) for step in workload.steps],
        "resolved": [{"name": v.name, "value": v.value, "source": v.source,
                      "overrode": list(v.overrode), "secret": v.secret} for v in workload.env],
        "policy_version": workload.policy_version, "image": workload.image,
        "workdir": workload.workdir,
        "resources": {"cpu": res.cpu, "memory": res.memory, "gpus": res.gpus},
        "replicas": workload.replicas, "procs_per_replica": workload.procs_per_replica,
    }


def write_pid_file(run_dir: Path, pid: int) -> None:
    started = process_start_time(pid)
    tmp = run_dir / "runner.pid.tmp"
    tmp.write_text(f"{pid} {started}\n")
    tmp.replace(run_dir / "runner.pid")  # whole or absent, never half-written


def runner_alive(run_dir: Path) -> bool:
    """True if the runner recorded in ``run_dir`` still runs (not a reused pid, not a zombie)."""
    return live_runner_pid(run_dir) is not None


def live_runner_pid(run_dir: Path) -> int | None:
    """The pid of the runner recorded in ``run_dir`` if it still runs, else None."""
    try:
        pid, started = (run_dir / "runner.pid").read_text().split()
    except (OSError, ValueError):
        return None
    return int(pid) if process_start_time(int(pid)) == started else None


def _signal_group(pid: int, sig: signal.Signals, group: bool) -> None:
    """Signal the runner (or its whole process group: it leads its own session)."""
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass  # it ended meanwhile


def process_start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None if it is dead or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)", which may hold spaces
    state, start_time = fields[0], fields[19]
    return None if state in ("Z", "X") else start_time
