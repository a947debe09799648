"""A task's image as a runtime directory on the local launcher, with real bwrap sandboxes:
the steps see the runtime's system directories in place of the host's, and a task that
names none sees the host's, as before."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.config import Settings
from shared.errors import LaunchFailed
from tests.support.runtimes import MARKER, busybox_runtime, public_dir
from tests.workers.launchers.local.test_local_launcher import run, workload
from workers.launchers.base import Hooks
from workers.launchers.local.launcher import LocalLauncher

pytestmark = pytest.mark.sandbox  # real bwrap sandboxes

NAME = "busybox-1"
# What the step reports: the runtime's marker, and whether the host's python3 is there.
LOOK = ["sh", "-c", f"cat /{MARKER} 2>/dev/null || echo no-marker; "
        "test -e /usr/bin/python3 && echo python3-found || echo no-python3"]


@pytest.fixture(scope="module")
def runtime_dir() -> Iterator[Path]:
    with public_dir("taskenv-rt-") as base:
        yield busybox_runtime(base / "busybox", NAME)


@pytest.fixture
def launcher(tmp_path: Path, runtime_dir: Path) -> LocalLauncher:
    return LocalLauncher(Settings(work_dir=str(tmp_path / "work"),
                                  runtimes=f"{NAME}={runtime_dir},gone=/nonexistent/rt"))


def test_a_step_runs_in_the_runtime_its_image_names(launcher: LocalLauncher) -> None:
    outcome, log = run(launcher, dataclasses.replace(workload([LOOK]), image=NAME))
    assert outcome.state == "succeeded", log
    assert f"{NAME}\nno-python3\n" in log, log  # busybox's tree, not the host's /usr


def test_a_task_that_names_no_image_runs_the_host_s_own(launcher: LocalLauncher) -> None:
    outcome, log = run(launcher, workload([LOOK]))
    assert outcome.state == "succeeded", log
    assert "no-marker\npython3-found\n" in log, log


@pytest.mark.parametrize(("image", "said"), [
    ("jax", "'jax' is no runtime this launcher has; the runtimes: busybox-1, gone"),
    ("gone", "the runtime gone (/nonexistent/rt) has no usr directory")])
def test_a_runtime_the_host_no_longer_has_fails_the_launch_naming_it(
        launcher: LocalLauncher, image: str, said: str) -> None:
    with pytest.raises(LaunchFailed) as caught:
        launcher.launch(dataclasses.replace(workload([LOOK]), image=image),
                        Hooks(started=lambda: None, log=lambda _: None))
    assert said in str(caught.value)


def test_a_setting_that_cannot_be_read_stops_the_launcher_at_start(tmp_path: Path) -> None:
    settings = Settings(work_dir=str(tmp_path), runtimes="pytorch=relative/path")
    assert any("TASKENV_RUNTIMES" in p for p in LocalLauncher.setup_problems(settings))
    with pytest.raises(ValueError, match="not absolute"):
        LocalLauncher(settings)
