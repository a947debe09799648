"""A task's control group: memory, processes and cpu limits the kernel enforces.

One cgroup per task revision, made under the runner's own cgroup (or
``local_cgroup_parent``), so the whole stack's limits still cover it; the runner
stays outside its memory and process limits, so an out-of-memory kill takes a step,
never the process that must report it.  The runner's **CPU** is the task's, though:
what it spends reading, redacting and storing the task's output is charged to the
task's own cpu quota (:meth:`TaskCgroup.charge_runner`), so a task that prints fast
slows itself, never a neighbour.  Both kernel interfaces are supported:

* **cgroup v1** (one hierarchy per controller, ``/sys/fs/cgroup/memory/...``):
  ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is
  accounted, so swap is no way around it), ``pids.max``, ``cpu.cfs_quota_us``;
  The runner joins the task's cpu cgroup only: v1's controllers are separate trees.
* **cgroup v2** (one unified tree): the task's cgroup holds ``cpu.max`` and two
  leaves, ``steps`` (``memory.max``, ``memory.swap.max=0``, ``pids.max``: every step)
  and ``runner`` (no limit of its own: the runner, under the task's cpu quota), after
  enabling the controllers in the parent's ``cgroup.subtree_control`` (and memory and
  pids in the task's).  The parent must be delegated to the platform and hold no
  process itself (v2's rule): on a systemd host, ``Delegate=yes`` on the workers'
  unit with the workers in a leaf of it.

What the kernel did is read back from its counters: ``oom_kill`` in
``memory.oom_control`` (v1) or ``memory.events`` (v2), ``max`` in ``pids.events``.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from shared.task.limits import Limits

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu")
REQUIRED = ("memory", "pids")  # cpu is enforced where the kernel offers it
CFS_PERIOD_US = 100_000


class CgroupUnavailable(RuntimeError):
    """No writable memory and pids controllers: limits cannot be enforced."""


def own_cgroups(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as controller → path (``""`` for the v2 tree)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            found[name] = path
    return found


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:200]


@dataclass
class TaskCgroup:
    """The directories of one task's cgroup (one per v1 controller, one on v2)."""

    version: int
    dirs: dict[str, Path]  # controller → directory the steps join ("" on v2: ``steps``)
    base: dict[str, int] = field(default_factory=dict)  # counters when it was made
    runner: Path | None = None  # where the runner's CPU is charged to the task's quota
    top: Path | None = None  # v2: the task's own directory, parent of the two leaves
    came_from: Path | None = None  # the runner's own cgroup, to go back to before removal

    def charge_runner(self, pid: int) -> None:
        """Move the runner (``pid``, all its threads) to where its CPU is the task's."""
        if self.runner is not None and self.came_from is not None:
            _write(self.runner / "cgroup.procs", pid)

    def release_runner(self, pid: int) -> None:
        """The runner back where it came from, before the cgroup is removed."""
        if self.runner is not None and self.came_from is not None:
            _write(self.came_from / "cgroup.procs", pid)

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]

    def _dir(self, controller: str) -> Path | None:
        return self.dirs.get("" if self.version == 2 else controller)

    def counter(self, controller: str, filename: str, key: str) -> int:
        """A counter of the kernel's, e.g. ``oom_kill`` in ``memory.events``; 0 if absent."""
        where = self._dir(controller)
        try:
            text = (where / filename).read_text() if where else ""
        except OSError:
            return 0
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
        return 0

    def oom_kills(self) -> int:
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return self.counter("memory", name, "oom_kill")

    def pids_refused(self) -> int:
        return self.counter("pids", "pids.events", "max")

    def processes(self) -> list[int]:
        """The task's processes (the steps: never the runner, wherever it is charged)."""
        pids: set[int] = set()
        for procs in self.procs_files:
            if self.runner is not None and procs == str(self.runner / "cgroup.procs"):
                continue
            try:
                pids |= {int(p) for p in Path(procs).read_text().split()}
            except OSError:
                continue
        return sorted(pids)

    def remove(self, patience: float = 5.0) -> None:
        """Kill whatever still runs in it, then remove it."""
        kill = self.dirs[""] / "cgroup.kill" if self.version == 2 else None
        deadline = time.monotonic() + patience
        while self.processes() and time.monotonic() < deadline:
            if kill is not None and kill.exists():
                kill.write_text("1")
            else:
                for pid in self.processes():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.02)
        leaves = [*dict.fromkeys(self.dirs.values())]
        if self.version == 2 and self.top is not None:
            leaves = [self.top / "steps", self.top / "runner", self.top]
        for directory in leaves:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:  # still busy: said, never the run's outcome lost over it
                log.warning("cgroup %s not removed yet: %s", directory, exc)


class Cgroups:
    """Where tasks' cgroups are made, and how: v1 or v2, found on the host (or a fake tree)."""

    def __init__(self, root: Path = ROOT, parent: str = "",
                 self_cgroup: str | None = None) -> None:
        self.root = root
        mine = own_cgroups(self_cgroup if self_cgroup is not None
                           else Path("/proc/self/cgroup").read_text())
        self.version = self._version()
        if self.version == 2:
            self.parents = {"": root / (parent or mine.get("", "/")).lstrip("/")}
            self.own_cpu = root / mine.get("", "/").lstrip("/")  # this process's cgroup
        else:
            self.parents = {c: root / c / (parent or mine.get(c, "/")).lstrip("/")
                            for c in V1_CONTROLLERS if (root / c).is_dir()}
            self.own_cpu = root / "cpu" / mine.get("cpu", "/").lstrip("/")

    def _version(self) -> int:
        controllers = self.root / "cgroup.controllers"
        if controllers.exists() and set(REQUIRED) <= set(controllers.read_text().split()):
            return 2
        if all((self.root / c / "cgroup.procs").exists() for c in REQUIRED):
            return 1
        raise CgroupUnavailable(
            f"no cgroup with the {' and '.join(REQUIRED)} controllers under {self.root} "
            "(cgroup v2 with them enabled, or cgroup v1 with one hierarchy each)")

    def problem(self) -> str | None:
        """Why tasks' cgroups cannot be made here; None if they can."""
        for parent in self.parents.values():
            if not os.access(parent, os.W_OK):
                return f"cannot write to the cgroup {parent} (run the workers as root, or " \
                       "delegate a cgroup to them and set TASKENV_LOCAL_CGROUP_PARENT)"
        return None

    def create(self, name: str, limits: Limits) -> TaskCgroup:
        name = safe_name(name)
        if self.version == 2:
            group = self._create_v2(name, limits)
        else:
            group = self._create_v1(name, limits)
        group.base = {"oom": group.oom_kills(), "pids": group.pids_refused()}
        return group

    def _create_v1(self, name: str, limits: Limits) -> TaskCgroup:
        dirs = {c: p / name for c, p in self.parents.items()}
        for directory in dirs.values():
            directory.mkdir(exist_ok=True)
        memory = dirs["memory"]
        _write(memory / "memory.limit_in_bytes", limits.memory_bytes)
        _write_if_there(memory / "memory.memsw.limit_in_bytes", limits.memory_bytes)
        _write(dirs["pids"] / "pids.max", limits.pids)
        if "cpu" in dirs:
            _write(dirs["cpu"] / "cpu.cfs_period_us", CFS_PERIOD_US)
            _write(dirs["cpu"] / "cpu.cfs_quota_us", limits.millicpu * CFS_PERIOD_US // 1000)
        return TaskCgroup(1, dirs, runner=dirs.get("cpu"), came_from=self.own_cpu)

    def _create_v2(self, name: str, limits: Limits) -> TaskCgroup:
        parent = self.parents[""]
        available = set((parent / "cgroup.controllers").read_text().split())
        wanted = [c for c in ("memory", "pids", "cpu") if c in available]
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        top = parent / name
        top.mkdir(exist_ok=True)
        if "cpu" in wanted:
            _write(top / "cpu.max", f"{limits.millicpu * CFS_PERIOD_US // 1000} "
                                    f"{CFS_PERIOD_US}")
        _write(top / "cgroup.subtree_control",
               " ".join(f"+{c}" for c in wanted if c != "cpu"))
        steps, runner = top / "steps", top / "runner"
        steps.mkdir(exist_ok=True)
        runner.mkdir(exist_ok=True)
        _write(steps / "memory.max", limits.memory_bytes)
        _write_if_there(steps / "memory.swap.max", 0)
        _write(steps / "pids.max", limits.pids)
        return TaskCgroup(2, {"": steps}, runner=runner if "cpu" in wanted else None,
                          top=top, came_from=self.own_cpu)

    def existing(self, name: str) -> TaskCgroup | None:
        """A task's cgroup left behind (its runner died), to remove it."""
        name = safe_name(name)
        if self.version == 2:
            top = self.parents[""] / name
            return TaskCgroup(2, {"": top / "steps"}, runner=top / "runner",
                              top=top) if top.is_dir() else None
        dirs = {c: p / name for c, p in self.parents.items() if (p / name).is_dir()}
        # The cpu directory may hold the runner too: the steps are found in the others.
        return TaskCgroup(self.version, dirs, runner=dirs.get("cpu")) if dirs else None


def _write(path: Path, value: object) -> None:
    path.write_text(str(value))


def _write_if_there(path: Path, value: object) -> None:
    if path.exists():
        _write(path, value)
