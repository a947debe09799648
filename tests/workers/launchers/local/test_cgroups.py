"""Tasks' cgroups against fake trees: what is written where, on cgroup v1 and v2.

The real v1 controllers of this host are exercised in ``test_containment.py``; these
trees stand in for a cgroup v2 host (and a v1 one) the tests cannot boot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.task.limits import Limits
from workers.launchers.common.containment.cgroups import Cgroups, CgroupUnavailable, own_cgroups

LIMITS = Limits(millicpu=1500, memory_bytes=64 << 20, gpus=0, pids=128, open_files=256,
                file_bytes=1 << 30, tmp_bytes=16 << 20, home_bytes=32 << 20)


def v2_tree(root: Path) -> Path:
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    parent = root / "system.slice" / "taskenv.service"
    parent.mkdir(parents=True)
    (parent / "cgroup.controllers").write_text("cpu io memory pids\n")
    (parent / "cgroup.subtree_control").write_text("")
    return parent


def test_v2_enables_the_controllers_and_writes_the_limits(tmp_path: Path) -> None:
    """The task's cgroup holds the cpu quota; its ``steps`` leaf the memory and process
    limits (every step), its ``runner`` leaf none: the runner's CPU is the task's."""
    parent = v2_tree(tmp_path / "cg")
    tree = Cgroups(tmp_path / "cg", self_cgroup="0::/system.slice/taskenv.service\n")
    assert tree.version == 2
    group = tree.create("taskenv-t1-r1", LIMITS)
    made = parent / "taskenv-t1-r1"
    assert (parent / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (made / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (made / "cpu.max").read_text() == "150000 100000"
    assert (made / "steps" / "memory.max").read_text() == str(64 << 20)
    assert (made / "steps" / "pids.max").read_text() == "128"
    assert not (made / "runner" / "memory.max").exists()
    assert group.procs_files == [str(made / "steps" / "cgroup.procs")]


@pytest.mark.parametrize("version", [1, 2])
def test_the_runner_is_charged_to_the_task_s_cpu_and_goes_back_before_removal(
        tmp_path: Path, version: int) -> None:
    own = "/system.slice/taskenv.service"
    if version == 2:
        v2_tree(tmp_path / "cg")
        tree = Cgroups(tmp_path / "cg", self_cgroup=f"0::{own}\n")
        runner, home = tmp_path / "cg" / own.lstrip("/") / "t" / "runner", \
            tmp_path / "cg" / own.lstrip("/")
    else:
        v1_tree(tmp_path / "cg", own)
        tree = Cgroups(tmp_path / "cg", self_cgroup=f"4:cpu,cpuacct:{own}\n3:pids:{own}\n"
                                                   f"2:memory:{own}\n")
        runner, home = tmp_path / "cg" / "cpu" / own.lstrip("/") / "t", \
            tmp_path / "cg" / "cpu" / own.lstrip("/")
    group = tree.create("t", LIMITS)
    group.charge_runner(4242)
    assert (runner / "cgroup.procs").read_text() == "4242"
    assert 4242 not in group.processes()  # never killed as one of the task's
    group.release_runner(4242)
    assert (home / "cgroup.procs").read_text() == "4242"


def test_v2_reads_what_the_kernel_did_from_its_counters(tmp_path: Path) -> None:
    parent = v2_tree(tmp_path / "cg")
    tree = Cgroups(tmp_path / "cg", parent="/system.slice/taskenv.service", self_cgroup="0::/\n")
    group = tree.create("t", LIMITS)
    assert (group.oom_kills(), group.pids_refused()) == (0, 0)
    (parent / "t" / "steps" / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\n"
                                                          "oom_kill 1\n")
    (parent / "t" / "steps" / "pids.events").write_text("max 7\n")
    assert (group.oom_kills(), group.pids_refused()) == (1, 7)
    left = tree.existing("t")  # what a dead runner left, found again to be removed
    assert left is not None and left.dirs == {"": parent / "t" / "steps"}
    assert left.top == parent / "t"


def v1_tree(root: Path, own: str) -> None:
    for controller in ("memory", "pids", "cpu"):
        where = root / controller / own.lstrip("/")
        where.mkdir(parents=True)
        (root / controller / "cgroup.procs").write_text("")


def test_v1_makes_one_group_per_controller_under_the_runner_s_own(tmp_path: Path) -> None:
    v1_tree(tmp_path, "/workers")
    own = "4:memory:/workers\n8:pids:/workers\n1:cpu,cpuacct:/workers\n"
    group = Cgroups(tmp_path, self_cgroup=own).create("taskenv-t1-r1", LIMITS)
    assert group.version == 1
    assert (tmp_path / "memory/workers/taskenv-t1-r1/memory.limit_in_bytes").read_text() \
        == str(64 << 20)
    assert (tmp_path / "pids/workers/taskenv-t1-r1/pids.max").read_text() == "128"
    assert (tmp_path / "cpu/workers/taskenv-t1-r1/cpu.cfs_quota_us").read_text() == "150000"
    assert len(group.procs_files) == 3


def test_no_usable_controllers_is_said_plainly(tmp_path: Path) -> None:
    (tmp_path / "unified").mkdir()
    with pytest.raises(CgroupUnavailable, match="memory and pids"):
        Cgroups(tmp_path, self_cgroup="0::/\n")


def test_own_cgroups_reads_both_kinds_of_line() -> None:
    assert own_cgroups("4:memory:/a\n1:cpu,cpuacct:/b\n0::/c\n") == {
        "memory": "/a", "cpu": "/b", "cpuacct": "/b", "": "/c"}
