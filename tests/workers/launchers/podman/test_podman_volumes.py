"""What the podman launcher plays is the pod's own: its volumes and its host uid.

Podman 4.3 plays a pod's ``emptyDir`` as a named volume called by the volume's name and
reuses it for every pod that names it: were the played volumes ``work`` and ``tmp`` (the
Kubernetes manifest's names, right on Kubernetes where an emptyDir is per pod), every
task on the host would share one home and one ``/tmp``.  No podman is needed here: the
manifest is read as the launcher renders it, and a fake ``podman`` (a shell script on
PATH) records the calls a removal makes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.config import Settings
from shared.errors import TransientError
from shared.task import manifest
from shared.task.files import TaskFile
from shared.task.workload import Workload
from tests.workers.conftest import build_workload
from tests.workers.launchers.podman.test_podman_listing import FakePodman, install_fake, listed
from workers.launchers.base import Change, Outcome
from workers.launchers.podman.launcher import POD_REMOVED, PodmanLauncher
from workers.launchers.podman.uids import UidPool

FILES = (TaskFile("train.py", "print('hi')\n", 0o644),)


@pytest.fixture
def launcher(tmp_path: Path) -> PodmanLauncher:
    return PodmanLauncher(Settings(launcher="podman", work_dir=str(tmp_path / "work")))


def played(launcher: PodmanLauncher, workload: Workload) -> tuple[dict[str, Any],
                                                                   dict[str, Any] | None]:
    """The Pod and the ConfigMap (None: no files) the launcher hands to ``kube play``."""
    docs = list(yaml.safe_load_all(launcher.render(workload, None)))
    pods = [d for d in docs if d["kind"] == "Pod"]
    maps = [d for d in docs if d["kind"] == "ConfigMap"]
    assert len(pods) == 1 and len(maps) <= 1
    return pods[0], maps[0] if maps else None


def podman_volumes(launcher: PodmanLauncher, workload: Workload) -> set[str]:
    """The volumes podman makes of the played pod: an emptyDir by its volume's name, a
    ConfigMap volume by the ConfigMap's name."""
    pod, config_map = played(launcher, workload)
    names = set()
    for volume in pod["spec"]["volumes"]:
        if "emptyDir" in volume:
            names.add(volume["name"])
        elif "configMap" in volume:
            assert config_map is not None
            assert volume["configMap"]["name"] == config_map["metadata"]["name"]
            names.add(volume["configMap"]["name"])
        else:
            raise AssertionError(f"a volume podman would play otherwise: {volume}")
    return names


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


@pytest.mark.parametrize("replicas", [1, 2])
def test_the_played_pod_names_its_volumes_by_task_and_revision(launcher: PodmanLauncher,
                                                               replicas: int) -> None:
    workload = build_workload([["true"]], files=FILES, replicas=replicas)
    pod, _ = played(launcher, workload)
    own = f"{workload.run_name}-"

    assert podman_volumes(launcher, workload) == {
        own + "work", own + "tmp", own + "files"}
    declared = {v["name"] for v in pod["spec"]["volumes"]}
    assert all(name.startswith(own) for name in declared)
    mounts = {(c["name"], m["mountPath"]): m["name"]
              for c in containers(pod) for m in c.get("volumeMounts", [])}
    assert set(mounts.values()) <= declared  # every mount names one of the pod's volumes
    task = manifest.CONTAINER_NAME if replicas == 1 else f"{manifest.CONTAINER_NAME}-1"
    assert mounts[(task, "/home/task")] == own + "work"
    assert mounts[(task, "/tmp")] == own + "tmp"
    assert mounts[(manifest.FILES_CONTAINER, "/home/task")] == own + "work"
    assert mounts[(manifest.FILES_CONTAINER, manifest.FILES_DIR)] == own + "files"


def test_two_tasks_and_two_revisions_share_no_volume_name(launcher: PodmanLauncher) -> None:
    first = build_workload([["true"]], files=FILES)
    again = build_workload([["true"]], files=FILES, task_id=first.task_id, revision=2)
    other = build_workload([["true"]], files=FILES)
    names = [podman_volumes(launcher, w) for w in (first, again, other)]

    assert all(len(n) == 3 for n in names)
    assert not names[0] & names[1] and not names[0] & names[2] and not names[1] & names[2]
    for legacy in ("work", "tmp", "files"):  # an older version's shared volumes
        assert not any(legacy in n for n in names)


def test_a_task_without_files_still_has_a_home_and_tmp_of_its_own(
        launcher: PodmanLauncher) -> None:
    workload = build_workload([["true"]])
    assert podman_volumes(launcher, workload) == {f"{workload.run_name}-work",
                                                  f"{workload.run_name}-tmp"}


def test_the_volume_names_are_podman_names() -> None:
    long_id = "f" * 64
    workload = build_workload([["true"]], task_id=long_id, revision=123456)
    for name in PodmanLauncher.volume_names(workload.run_name):
        assert len(name) <= 255  # one path component of podman's volume directory
        assert name[0].isalnum() and set(name) <= set(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def test_each_pod_runs_as_a_host_uid_of_its_own(launcher: PodmanLauncher) -> None:
    first = build_workload([["true"]], files=FILES, replicas=2)
    second = build_workload([["true"]])
    uids = []
    for workload in (first, second):
        pod, _ = played(launcher, workload)
        seen = {(c["securityContext"]["runAsUser"], c["securityContext"]["runAsGroup"])
                for c in containers(pod)}
        assert len(seen) == 1  # the init container too: it writes the home the steps use
        [(uid, gid)] = seen
        assert uid == gid and uid != manifest.TASK_UID
        settings = Settings()
        assert settings.task_uid_first <= uid < settings.task_uid_first + settings.task_uid_count
        assert all(c["securityContext"]["runAsNonRoot"] for c in containers(pod))
        uids.append(uid)
    assert uids[0] != uids[1]
    assert played(launcher, first)[0]["spec"]["containers"][0]["securityContext"][
        "runAsUser"] == uids[0]  # a second render (a redelivered launch): the same uid


# --- the uid pool ----------------------------------------------------------------------

def test_a_uid_is_held_by_one_pod_until_it_is_released(tmp_path: Path) -> None:
    pool = UidPool(tmp_path / "uids", first=5000, count=3)
    a, b, c = pool.claim("pod-a"), pool.claim("pod-b"), pool.claim("pod-c")

    assert sorted((a, b, c)) == [5000, 5001, 5002]
    assert pool.claim("pod-b") == b
    with pytest.raises(TransientError, match=r"all 3 task uids \(5000-5002\)"):
        pool.claim("pod-d")
    pool.release("pod-b")
    assert pool.claim("pod-d") == b
    assert pool.held() == {"pod-a": a, "pod-c": c, "pod-d": b}
    pool.release("pod-b")  # released twice: nothing


def test_two_pools_on_one_directory_never_hand_out_one_uid(tmp_path: Path) -> None:
    first, second = (UidPool(tmp_path / "uids", 1_900_000_000, 65536) for _ in range(2))
    uids = [pool.claim(f"pod-{k}") for k in range(50) for pool in (first, second)][::2]
    assert len(set(uids)) == 50


def test_stale_claims_are_released_after_their_grace(tmp_path: Path) -> None:
    pool = UidPool(tmp_path / "uids", 1_900_000_000, 65536)
    for pod in ("live", "died-early", "just-claimed"):
        pool.claim(pod)
    now = time.time()
    old = now - 600
    for pod in ("live", "died-early"):
        os.utime(tmp_path / "uids" / pod, (old, old))

    assert pool.release_stale({"live"}, older_than=120, now=now) == ["died-early"]
    assert set(pool.held()) == {"live", "just-claimed"}


def test_a_pod_name_is_never_a_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        UidPool(tmp_path / "uids", 1_900_000_000, 65536).claim("../etc")


# --- removal once the end is recorded ----------------------------------------------------

FAKE_PODMAN = """#!/bin/sh
echo "$*" >> "$FAKE_PODMAN_DIR/calls"
case "$1 $2" in
  "ps "*) cat "$FAKE_PODMAN_DIR/listing.json" ;;
  "pod stop"|"pod rm") exit 0 ;;
  "volume rm") for v in "$@"; do case "$v" in
      *-files) echo "Error: no volume with name $v found: no such volume" >&2; st=1 ;;
    esac; done; exit ${st:-0} ;;
  "volume ls") echo '[]' ;;
  *) echo "unexpected: $*" >&2; exit 125 ;;
esac
"""


@pytest.fixture
def podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePodman:
    return install_fake(tmp_path / "fake", monkeypatch, FAKE_PODMAN)


@pytest.fixture
def watcher(podman: FakePodman, tmp_path: Path) -> PodmanLauncher:
    """A launcher whose podman is the fake (made after PATH names it)."""
    return PodmanLauncher(Settings(launcher="podman", work_dir=str(tmp_path / "work")))


def test_a_recorded_end_removes_the_pod_its_volumes_and_its_uid(
        watcher: PodmanLauncher, podman: FakePodman) -> None:
    workload = build_workload([["true"]])
    uid = watcher.uids.claim(workload.run_name)
    podman.lists([listed(workload)])
    assert watcher.changes() == [Change(workload.task_id, 1, Outcome("running"))]
    podman.lists([listed(workload, "exited", 0)])
    [ended] = watcher.changes()
    assert ended.outcome == Outcome("succeeded", exit_code=0)
    before = len(podman.calls())

    watcher.applied(ended)  # the reconciler recorded it

    pod = workload.run_name
    assert podman.calls()[before:] == [
        f"pod stop --ignore --time 0 {pod}",  # stopped first: its removal then waits for nothing
        f"pod rm --force --ignore {pod}",
        f"volume rm {pod}-work {pod}-tmp {pod}-files"]  # what pod rm left, if any
    assert pod not in watcher.uids.held() and uid not in watcher.uids.held().values()
    podman.lists([])
    assert watcher.changes() == []  # gone because it was removed: no news


def test_an_end_not_yet_recorded_is_reported_until_it_is(watcher: PodmanLauncher,
                                                          podman: FakePodman) -> None:
    workload = build_workload([["true"]])
    podman.lists([listed(workload, "exited", 0)])
    done = Change(workload.task_id, 1, Outcome("succeeded", exit_code=0))

    assert watcher.changes() == [done]
    assert watcher.changes() == [done]  # the reconciler could not record it: again
    assert not [c for c in podman.calls() if c.startswith("pod ")]  # and kept meanwhile
    watcher.applied(done)
    assert watcher.changes() == []


def test_a_pod_removed_by_someone_else_is_reported_and_its_volumes_go(
        watcher: PodmanLauncher, podman: FakePodman) -> None:
    workload = build_workload([["sleep", "60"]])
    podman.lists([listed(workload)])
    watcher.changes()
    podman.lists([])

    [gone] = watcher.changes()
    assert gone == Change(workload.task_id, 1, None, POD_REMOVED)
    watcher.applied(gone)

    pod = workload.run_name
    assert podman.calls()[-1] == f"volume rm {pod}-work {pod}-tmp {pod}-files"
    assert watcher.changes() == []
