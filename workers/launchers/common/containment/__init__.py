"""What holds a local step in: an unprivileged host user, the task's cgroup, rlimits, a
network namespace the runner makes, a seccomp filter and a size-capped home and /tmp.

The launcher decides once, at start, what this host can enforce (:func:`problems`):
running as root, a writable cgroup with the memory and pids controllers, libseccomp.
With ``local_containment=enforce`` (the default) a missing piece refuses to start the
launcher; with ``warn`` it says at start and in every task's log what is not enforced
and runs with the rest.  The runner then applies a :class:`Plan` to every step: the
exec helper (``enter.py``) joins the cgroup, sets the rlimits, enters the network
namespace and drops to the task's user before it executes bwrap, which loads the
seccomp filter last, right before the step.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from shared.task.limits import Limits, show_bytes
from workers.launchers.common.containment import seccomp
from workers.launchers.common.containment.cgroups import Cgroups, CgroupUnavailable, TaskCgroup
from workers.launchers.common.containment.home import mount_home, private_mounts, unmount_home
from workers.launchers.common.sandbox import NOBODY

ENTER = str(Path(__file__).with_name("enter.py"))
ENFORCE, WARN = "enforce", "warn"
MODES = (ENFORCE, WARN)


@dataclass(frozen=True)
class Abilities:
    """What this host lets the runner enforce."""

    root: bool  # drop to the task's user, own mounts (home tmpfs), own network namespace
    cgroups: bool
    seccomp: bool


def host_abilities(settings: Any) -> tuple[Abilities, list[str]]:
    """What can be enforced here, and why each missing piece is missing."""
    problems: list[str] = []
    root = os.geteuid() == 0
    if not root:
        problems.append("the workers do not run as root: steps run as the workers' own "
                        "user, their home is not size-capped and is left on disk")
    cgroups = False
    try:
        why = Cgroups(parent=settings.local_cgroup_parent).problem()
        if why:
            problems.append(why)
        cgroups = why is None
    except (CgroupUnavailable, OSError) as exc:
        problems.append(str(exc))
    if not cgroups:
        problems.append("no memory, process or cpu limit is enforced")
    try:
        seccomp.compiled_filter()
        has_seccomp = True
    except seccomp.SeccompUnavailable as exc:
        problems.append(f"no seccomp filter: {exc}")
        has_seccomp = False
    return Abilities(root, cgroups, has_seccomp), problems


@dataclass(frozen=True)
class Plan:
    """How the runner holds in one revision's steps (travels to the runner as JSON)."""

    limits: Limits
    uid: int | None
    gid: int | None
    cgroup_parent: str | None  # None: no cgroup (warn mode)
    seccomp: bool
    own_netns: bool
    private_home: bool

    def to_doc(self) -> dict[str, Any]:
        return {**asdict(self), "limits": asdict(self.limits)}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Plan:
        return cls(**{**doc, "limits": Limits(**doc["limits"])})


def plan_for(limits: Limits, settings: Any, abilities: Abilities,
             uid: int | None = None) -> Plan:
    """``uid``: the revision's own host uid (:mod:`shared.store.uids`), which is its group
    too; without one, the unprivileged ``nobody``.  Where the workers cannot change user
    (not root) the steps run as the workers' own."""
    own = (NOBODY if uid is None else uid) if abilities.root else None
    return Plan(limits=limits, uid=own, gid=own,
                cgroup_parent=settings.local_cgroup_parent if abilities.cgroups else None,
                seccomp=abilities.seccomp, own_netns=abilities.root,
                private_home=abilities.root)


class Jail:
    """One revision's containment, as the runner applies it around each step."""

    # Whose cpu quota this runner is charged to: one jail's of its replicas, chosen and
    # given back under the lock (a task's replicas start and end on threads of their own).
    charged: ClassVar[Jail | None] = None
    charging: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, plan: Plan, name: str, home: Path) -> None:
        self.plan = plan
        self.name = name
        self.home = home  # the run directory's home, as the launcher prepared it
        self.cgroup: TaskCgroup | None = None
        self.mounted: Path | None = None
        # A replica of a task of several: the network namespace its sandboxes join (that of
        # a holder process, /proc/PID/ns/net), shared with the task's other replicas.
        self.netns: str | None = None

    def enter_mounts(self) -> Path:
        """First thing in the runner, before any thread: the private home tmpfs.  Returns
        the directory the sandboxes bind as the task's home."""
        if not self.plan.private_home:
            return self.home
        private_mounts()
        keep = [Path(p).resolve() for p in (sys.prefix, sys.base_prefix, *sys.path) if p]
        self.mounted = mount_home(self.home, self.plan.limits.home_bytes, self.plan.uid or 0,
                                  self.plan.gid or 0, keep)
        return self.mounted

    def start(self) -> None:
        """The task's cgroup, made; this process (the runner) charged to its cpu quota, so
        what the runner spends on the task's output is the task's own CPU."""
        if self.plan.cgroup_parent is not None:
            self.cgroup = Cgroups(parent=self.plan.cgroup_parent).create(self.name,
                                                                         self.plan.limits)
            with Jail.charging:
                if Jail.charged is None:  # a task of several replicas: the first one's
                    self.cgroup.charge_runner(os.getpid())
                    Jail.charged = self

    def wrap(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], tuple[int, ...]]:
        """The helper's argv around bwrap's (``argv``), and the descriptors to pass on.
        ``env``: the step's, which the helper hands on exactly."""
        lim = self.plan.limits
        helper = [sys.executable, "-I", ENTER,
                  *(["--unset", "LC_CTYPE"] if "LC_CTYPE" not in env else []),
                  "--rlimit", f"nofile={lim.open_files}:{lim.open_files}",
                  "--rlimit", f"fsize={lim.file_bytes}:{lim.file_bytes}",
                  "--rlimit", "core=0:0"]
        for procs in self.cgroup.procs_files if self.cgroup else []:
            helper += ["--cgroup", procs]
        if self.netns is not None:
            helper += ["--netns", self.netns]
        elif self.plan.own_netns:
            helper += ["--netns", "new"]
        if self.plan.uid is not None:
            helper += ["--uid", str(self.plan.uid), "--gid", str(self.plan.gid)]
            if self.plan.uid != NOBODY:  # a task's own uid: the step sees it in its uid_map
                helper += ["--map-userns", str(NOBODY)]
        fds: tuple[int, ...] = ()
        if self.plan.seccomp:
            fd = seccomp.filter_fd()
            argv = [argv[0], "--seccomp", str(fd), *argv[1:]]
            fds = (fd,)
        return [*helper, "--", *argv], fds

    def why_killed(self) -> str | None:
        """What limit the kernel enforced since the jail started, in a user's words."""
        if self.cgroup is None:
            return None
        lim = self.plan.limits
        if self.cgroup.oom_kills() > self.cgroup.base.get("oom", 0):
            return (f"was killed for going over its memory limit of {show_bytes(lim.memory_bytes)} "
                    "(resources.memory; /tmp and the home count too)")
        if self.cgroup.pids_refused() > self.cgroup.base.get("pids", 0):
            return f"reached its limit of {lim.pids} processes and threads"
        return None

    def end(self) -> None:
        """Kill what is left, remove the cgroup and the home's contents."""
        if self.cgroup is not None:
            with Jail.charging:
                if Jail.charged is self:
                    self.cgroup.release_runner(os.getpid())
                    Jail.charged = None
            self.cgroup.remove()
        if self.mounted is not None:
            unmount_home(self.mounted, self.home)


def remove_leftovers(settings: Any, name: str) -> None:
    """A dead runner's cgroup (its sandboxes died with it: bwrap dies with its parent)."""
    try:
        group = Cgroups(parent=settings.local_cgroup_parent).existing(name)
    except (CgroupUnavailable, OSError):
        return
    if group is not None:
        group.remove()

