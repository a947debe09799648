"""The task limits in a podman container: the configuration every podman command runs
with, and the pids cap a pod gets before it starts."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from shared.config import Settings
from shared.errors import LaunchFailed
from shared.task.limits import Maxima
from tests.support.podman import podman
from tests.workers.conftest import RecordingHooks, build_workload
from workers.launchers.podman import conf
from workers.launchers.podman.launcher import PodmanLauncher

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
    """A pod whose cgroup the host does not show with a pids controller (rootless podman
    without delegation looks so)."""

    def podman(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if args[:2] == ("pod", "inspect"):
            return subprocess.CompletedProcess(args, 0, "/taskenv-no-such-cgroup\n", "")
        return super().podman(*args, **kwargs)


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
        podman("pod", "rm", "--force", "--ignore", workload.run_name)
