"""The task limits in a podman container: the configuration every podman command runs
with, and the pids cap a pod gets before it starts."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from shared.config import Settings
from shared.errors import LaunchFailed
from shared.task.limits import Maxima
from tests.support.podman import podman
from tests.workers.conftest import RecordingHooks, build_workload
from workers.launchers.podman import conf
from workers.launchers.podman.launcher import (
    PIDS_ROOTS,
    PodmanLauncher,
    played_pod_id,
    private_file,
    with_node_values,
)

ROOT = Path(__file__).resolve().parents[4]
HOST = {"containers": {"default_ulimits": ["nofile=1024:1024", "nproc=1024:1024"],
                       "pids_limit": 1024},
        "engine": {"runtime": "runc", "runtimes": {"runc": ["/usr/bin/runc"]}}}


def test_the_configuration_is_the_hosts_with_the_task_limits_in_it() -> None:
    maxima = Maxima.from_settings(Settings(task_max_open_files=64, task_max_processes=48,
                                           task_max_file_size="1Mi"))
    written = tomllib.loads(conf.dumps(conf.with_limits(HOST, maxima)))
    assert written["containers"]["pids_limit"] == 48
    assert sorted(written["containers"]["default_ulimits"]) == [
        "fsize=1048576:1048576", "nofile=64:64", "nproc=1024:1024"]  # the host's nproc kept
    assert written["engine"] == HOST["engine"]  # everything else as the host has it


def test_a_value_the_configuration_cannot_hold_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="cannot write"):
        conf.dumps({"containers": {"odd": object()}})


class NoPidsController(PodmanLauncher):
    """A host that shows no pids controller where the pod's cgroup is (rootless podman
    without delegation looks so): neither where the pod's id says nor where ``pod
    inspect`` does."""

    pids_roots = ("/taskenv-no-pids-controller",)


@pytest.mark.integration
@pytest.mark.podman
def test_a_pod_whose_cgroup_has_no_pids_controller_is_refused_and_removed(
        tmp_path: Path) -> None:
    subprocess.run([str(ROOT / "deploy/image/build.sh")], check=True, timeout=300)
    launcher = NoPidsController(Settings(work_dir=str(tmp_path)))
    workload = build_workload([["true"]], name="podman-test")
    try:
        with pytest.raises(LaunchFailed, match="no pids controller.*TASKENV_TASK_MAX_PROCESSES"):
            launcher.launch(workload, RecordingHooks().hooks)
        assert podman("pod", "exists", workload.run_name).returncode != 0  # nothing left
    finally:
        podman("pod", "rm", "--force", "--time", "0", "--ignore", workload.run_name)


def test_the_id_kube_play_prints_names_the_pod() -> None:
    pod, container = "e3" * 32, "de" * 32
    assert played_pod_id(f"Pod:\n{pod}\nContainer:\n{container}\n\n") == pod
    assert played_pod_id("") is None  # then the cgroup is asked of ``pod inspect``


@pytest.mark.integration
@pytest.mark.podman
@pytest.mark.parametrize("adopted", [False, True], ids=["played", "adopted"])
def test_a_pod_starts_with_its_pids_cgroup_capped_to_the_task_limit(
        tmp_path: Path, adopted: bool) -> None:
    """Found by the id ``kube play`` printed (a first launch) or asked of ``pod inspect``
    (a launch that adopts a pod an earlier one made): the same file, the same cap."""
    subprocess.run([str(ROOT / "deploy/image/build.sh")], check=True, timeout=300)
    launcher = PodmanLauncher(Settings(work_dir=str(tmp_path), task_max_processes=40))
    workload = build_workload([["sleep", "30"]], name="podman-test", replicas=2)
    try:
        if adopted:  # made, not started, by a launch that died before it capped the pod
            made = with_node_values(launcher.with_image(workload))
            with private_file(launcher.render(made, None)) as path:
                assert launcher.play_file(path).returncode == 0
        launcher.launch(workload, RecordingHooks().hooks)
        cgroup = podman("pod", "inspect", "--format", "{{.CgroupPath}}", workload.run_name)
        limit = next(Path(f"{root}{cgroup.stdout.strip()}/pids.max") for root in PIDS_ROOTS
                     if Path(f"{root}{cgroup.stdout.strip()}/pids.max").exists())
        assert limit.read_text().strip() == str(40 * 2 + 1)  # each replica's, and the pause
    finally:
        podman("pod", "rm", "--force", "--time", "0", "--ignore", workload.run_name)
