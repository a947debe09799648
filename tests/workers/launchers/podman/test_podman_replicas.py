"""A task of several replicas under podman: containers of one pod, each with its own
identity, sharing the pod's network; one failure stops the others at once."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shared.task import manifest
from shared.task.workload import Workload
from tests.support.podman import podman
from tests.workers.conftest import RecordingHooks
from tests.workers.launchers.podman.test_podman_launcher import image, launcher, make_workload
from workers.launchers.base import Outcome
from workers.launchers.podman.launcher import PodmanLauncher
from workers.sync import received_env

pytestmark = [pytest.mark.integration, pytest.mark.podman]
__all__ = ["image", "launcher", "make_workload"]

ROOT = Path(__file__).resolve().parents[4]
RENDEZVOUS = (ROOT / "examples/distributed/rendezvous.sh").read_text()


def until_final(launcher: PodmanLauncher, timeout: float = 60) -> list[Outcome]:
    """Listings until the one task listed is final: every outcome reported on the way."""
    seen: list[Outcome] = []
    deadline = time.monotonic() + timeout
    while True:
        seen += [c.outcome for c in launcher.changes() if c.outcome is not None]
        if seen and seen[-1].state != "running":
            return seen
        assert time.monotonic() < deadline, f"still running: {seen}"
        time.sleep(0.2)


def containers(workload: Workload, *state: str) -> list[str]:
    label = f"label={manifest.LABEL_TASK_ID}={workload.task_id}"
    flags = [x for s in state for x in ("--filter", f"status={s}")]
    return sorted(podman("ps", "-a", "--filter", label, *flags,
                         "--format", "{{.Names}}").stdout.split())


def test_two_replicas_rendezvous_through_the_injected_variables(
        launcher: PodmanLauncher, make_workload: Callable[..., Workload]) -> None:
    workload = make_workload([["sh", "-c", RENDEZVOUS]], {"LR": "0.1"}, replicas=2)
    assert launcher.launch(workload, RecordingHooks().hooks) == Outcome("running")

    outcomes = until_final(launcher)

    assert outcomes[-1] == Outcome("succeeded", 0, None, (0, 0))
    assert containers(workload) == [f"{workload.run_name}-task-0",
                                    f"{workload.run_name}-task-1"]
    logs = launcher.logs(workload) or ""
    assert "[replica 0] rank 0: all 2 replicas met at 127.0.0.1:29500" in logs
    assert "[replica 1] rank 1 of 2: sent to 127.0.0.1:29500" in logs


def test_one_failed_replica_fails_the_task_and_stops_the_others_at_once(
        launcher: PodmanLauncher, make_workload: Callable[..., Workload]) -> None:
    step = ["sh", "-c", 'if [ "$RANK" = 1 ]; then sleep 1; exit 3; fi; exec sleep 120']
    workload = make_workload([step], replicas=3)
    launcher.launch(workload, RecordingHooks().hooks)
    started = time.monotonic()

    final = until_final(launcher)[-1]

    assert time.monotonic() - started < 15
    assert (final.state, final.exit_code) == ("failed", 3)
    assert final.reason is not None and final.reason.startswith("replica 1 of 3 failed")
    assert final.replica_exit_codes is not None and final.replica_exit_codes[1] == 3
    assert all(code is not None for code in final.replica_exit_codes)  # all stopped
    assert containers(workload, "running") == []
    launcher.cancel(workload)
    assert containers(workload) == []


def test_cancel_removes_every_replica(launcher: PodmanLauncher,
                                      make_workload: Callable[..., Workload]) -> None:
    workload = make_workload([["sleep", "120"]], replicas=3)
    launcher.launch(workload, RecordingHooks().hooks)
    deadline = time.monotonic() + 30
    while len(containers(workload, "running")) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert launcher.observe(workload) == Outcome("running", replica_exit_codes=(None,) * 3)

    launcher.cancel(workload)

    assert containers(workload) == [] and launcher.observe(workload) is None


ENV_IMAGE = "localhost/taskenv-runtime-env-added:test"


@pytest.fixture(scope="module")
def env_adding_image(image: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The runtime image with an ``ENV`` of its own: a name the task does not set, and one
    it does (the pod spec's env wins for that one)."""
    context = tmp_path_factory.mktemp("env-image")
    (context / "Containerfile").write_text(
        "FROM localhost/taskenv-runtime:latest\n"
        "ENV IMAGE_ADDED=from-the-image LR=9\n")
    podman("build", "--quiet", "--pull=never", "-t", ENV_IMAGE, str(context))
    yield ENV_IMAGE
    podman("rmi", "--force", ENV_IMAGE)


def test_each_replicas_env_is_looked_at_from_outside_and_what_the_image_adds_is_named(
        launcher: PodmanLauncher, make_workload: Callable[..., Workload],
        env_adding_image: str) -> None:
    workload = make_workload([["sh", "-c", 'test "$LR" = 0.1 && test -n "$IMAGE_ADDED"']],
                             {"LR": "0.1"}, {"HF_TOKEN": "hf_podman-look-secret-7"},
                             replicas=2, image=env_adding_image)
    launcher.launch(workload, RecordingHooks().hooks)
    assert until_final(launcher)[-1].state == "succeeded"

    received = received_env(launcher, workload)

    assert received is not None and received["same"] is True, received
    assert received["added"] == ["IMAGE_ADDED"], received  # LR: the task's value won
    assert [(w["replica"], w["names"]) for w in received["warnings"]] == [
        (None, ["IMAGE_ADDED"])], received
    assert "hf_podman-look-secret-7" not in json.dumps(received)


def test_a_replica_whose_value_differs_is_named_with_the_variable(
        launcher: PodmanLauncher, make_workload: Callable[..., Workload]) -> None:
    workload = make_workload([["true"]], {"LR": "0.1"}, replicas=2)
    launcher.launch(workload, RecordingHooks().hooks)
    assert until_final(launcher)[-1].state == "succeeded"
    # The record says LR=0.1; had the containers been made from another (LR=0.2), a look
    # at them says so, naming the replicas and the variable.
    other = dataclasses.replace(workload, env=tuple(
        dataclasses.replace(v, value="0.2") for v in workload.env))

    received = received_env(launcher, other)

    assert received is not None and received["same"] is True, received
    assert [(w["replica"], w["names"]) for w in received["warnings"]] == [
        (0, ["LR"]), (1, ["LR"])], received
