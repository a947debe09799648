"""What a worker that died leaves under podman, and the reconciler's sweep that removes it.

A pod's volumes outlive it unless removed with it (``pod rm -f`` takes the emptyDir
volumes only that pod used, never the files' one), and a launch that died between its
uid claim and its play leaves the claim.  The sweep (in the reconciler's listing, about
once a minute) removes the volumes of pods that are not there and the claims of pods not
listed, once older than its grace; a pod's volumes while it lives, and a volume some
container uses, stay.  Real podman.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shared.config import Settings
from shared.task.files import TaskFile
from shared.task.workload import Workload
from tests.support.podman import podman
from tests.workers.conftest import RecordingHooks, build_workload
from tests.workers.launchers.podman.test_podman_launcher import image
from workers.launchers.base import Change, Outcome
from workers.launchers.podman.launcher import PodmanLauncher

pytestmark = [pytest.mark.integration, pytest.mark.podman]
__all__ = ["image"]


@pytest.fixture
def launcher(tmp_path: Path) -> PodmanLauncher:
    return PodmanLauncher(Settings(work_dir=str(tmp_path / "work")))


@pytest.fixture
def make_workload(launcher: PodmanLauncher) -> Iterator[Callable[..., Workload]]:
    made: list[Workload] = []

    def make(steps: list[list[str]], **fields: object) -> Workload:
        workload = build_workload(steps, name="podman-sweep", **fields)
        made.append(workload)
        return workload

    yield make
    for workload in made:
        launcher.remove(workload)


def volumes() -> set[str]:
    return set(podman("volume", "ls", "--format", "{{.Name}}").stdout.split())


def until(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_the_sweep_removes_what_a_dead_worker_left_and_nothing_of_a_live_pod(
        launcher: PodmanLauncher, make_workload: Callable[..., Workload]) -> None:
    # A revision whose worker died: its pod gone, its volumes and uid claim left.
    dead = f"taskenv-{uuid.uuid4().hex[:20]}-r3"
    for name in PodmanLauncher.volume_names(dead):
        assert podman("volume", "create", name).returncode == 0
    launcher.uids.claim(dead)
    # A live pod, with files (all three volumes).
    live = make_workload([["sleep", "60"]],
                         files=(TaskFile("a.txt", "a\n"),))
    assert launcher.launch(live, RecordingHooks().hooks) == Outcome("running")
    assert set(PodmanLauncher.volume_names(live.run_name)) <= volumes()
    launcher.changes()  # the listing the sweep compares with

    removed = launcher.sweep(older_than=0)

    assert sorted(removed) == sorted(PodmanLauncher.volume_names(dead))
    assert not set(PodmanLauncher.volume_names(dead)) & volumes()
    assert set(PodmanLauncher.volume_names(live.run_name)) <= volumes()
    assert set(launcher.uids.held()) == {live.run_name}


def test_a_young_leftover_waits_for_its_grace(launcher: PodmanLauncher) -> None:
    """A volume kube play has just made for a pod not listed yet is not a leftover."""
    young = f"taskenv-{uuid.uuid4().hex[:20]}-r1"
    names = PodmanLauncher.volume_names(young)
    for name in names:
        assert podman("volume", "create", name).returncode == 0
    try:
        launcher.changes()
        assert launcher.sweep(older_than=120) == []
        assert set(names) <= volumes()
    finally:
        podman("volume", "rm", *names)


def test_a_finished_pod_goes_with_its_volumes_once_its_end_is_recorded(
        launcher: PodmanLauncher, make_workload: Callable[..., Workload]) -> None:
    workload = make_workload([["sh", "-c", "echo x > /home/task/x && echo y > /tmp/y"]],
                             files=(TaskFile("a.txt", "a\n"),))
    launcher.launch(workload, RecordingHooks().hooks)
    key = (workload.task_id, workload.revision)
    ended: list[Change] = []

    def end_reported() -> bool:
        ended.extend(c for c in launcher.changes() if (c.task_id, c.revision) == key
                     and c.outcome is not None and c.outcome.state != "running")
        return bool(ended)

    until(end_reported, 60, "the end was never reported")
    assert set(PodmanLauncher.volume_names(workload.run_name)) <= volumes()  # kept till now
    started = time.monotonic()

    launcher.applied(ended[-1])

    took = time.monotonic() - started
    assert podman("pod", "exists", workload.run_name).returncode == 1
    assert not set(PodmanLauncher.volume_names(workload.run_name)) & volumes()
    assert workload.run_name not in launcher.uids.held()
    assert took < 5, took
    assert [c for c in launcher.changes() if (c.task_id, c.revision) == key] == []
