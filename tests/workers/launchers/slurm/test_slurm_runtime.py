"""A task's image as a runtime directory on the Slurm test cluster: the node's sandbox
binds the tree's system directories in place of the node's own."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.config import Settings
from tests.support.runtimes import MARKER, busybox_runtime, public_dir
from tests.support.slurm import SlurmCluster
from tests.workers.conftest import RecordingHooks, build_workload
from tests.workers.launchers.slurm.test_slurm_launcher import _no_leftover_jobs, finish, output
from workers.launchers.base import Outcome
from workers.launchers.slurm.launcher import SlurmLauncher

pytestmark = pytest.mark.slurm
__all__ = ["_no_leftover_jobs"]

NAME = "busybox-1"
LOOK = ["sh", "-c", f"cat /{MARKER} 2>/dev/null || echo no-marker; "
        "test -e /usr/bin/python3 && echo python3-found || echo no-python3"]


@pytest.fixture(scope="module")
def runtime_dir() -> Iterator[Path]:
    with public_dir("taskenv-rt-") as base:  # the nodes are this machine: the same path
        yield busybox_runtime(base / "busybox", NAME)


@pytest.fixture
def launcher(slurm_cluster: SlurmCluster, tmp_path: Path, runtime_dir: Path,
             monkeypatch: pytest.MonkeyPatch) -> SlurmLauncher:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    return SlurmLauncher(Settings(slurm_dir=str(tmp_path / "slurm"), step_timeout_seconds=120,
                                  runtimes=f"{NAME}={runtime_dir}"))


def test_the_replicas_run_in_the_runtime_the_image_names(launcher: SlurmLauncher) -> None:
    workload = dataclasses.replace(build_workload([LOOK]), image=NAME, replicas=2)
    launcher.launch(workload, RecordingHooks().hooks)
    outcome = finish(launcher, workload)
    text = output(launcher, workload)
    assert (outcome.state, outcome.exit_code) == ("succeeded", 0), text
    for k in range(2):  # each replica's own lines, in order (the replicas' interleave)
        own = [line for line in text.splitlines() if line.startswith(f"[replica {k}] ")]
        assert own == [f"[replica {k}] {NAME}", f"[replica {k}] no-python3"], text


def test_a_task_naming_no_image_runs_the_node_s_own(launcher: SlurmLauncher) -> None:
    workload = build_workload([LOOK])
    launcher.launch(workload, RecordingHooks().hooks)
    assert finish(launcher, workload) == Outcome("succeeded", exit_code=0)
    assert "no-marker\npython3-found" in output(launcher, workload)
