"""PyTorch's own rendezvous in a real podman pod: examples/distributed/ddp-image.yaml (DDP
over gloo, env://) at 2 replicas in the image `make pytorch-image` builds, its replicas
containers of one pod meeting on the pod's loopback through taskenv's variables alone.

The image is built here when it is missing (deploy/image/build-pytorch.sh: minutes the
first time, a label check after).  ddp.py checks the gradients itself and exits 3 on a
mismatch; the test reads what each replica printed."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from cli import taskfile
from shared.task.files import TaskFile
from shared.task.workload import Workload
from tests.integration.test_torch import JOINED, PASSED
from tests.workers.conftest import RecordingHooks
from tests.workers.launchers.podman.test_podman_launcher import image, launcher, make_workload
from tests.workers.launchers.podman.test_podman_replicas import until_final
from workers.launchers.base import Outcome
from workers.launchers.podman.launcher import PodmanLauncher

pytestmark = [pytest.mark.integration, pytest.mark.podman, pytest.mark.torch]
__all__ = ["image", "launcher", "make_workload"]

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples/distributed/ddp-image.yaml"
PYTORCH_IMAGE = "localhost/taskenv-pytorch:2.13"
TIMEOUT = 300  # two torch imports on two shared cores
WHERE = ("import sys, torch; print('IN', sys.executable, torch.__version__, "
         "torch.__file__, open('/etc/debian_version').read().strip())")


@pytest.fixture(scope="module", autouse=True)
def pytorch_image() -> None:
    subprocess.run([str(ROOT / "deploy/image/build-pytorch.sh")], check=True, timeout=1800)


def test_the_ddp_example_at_two_replicas_in_one_pod_averages_the_gradients(
        launcher: PodmanLauncher, make_workload: Callable[..., Workload]) -> None:
    body = taskfile.body(EXAMPLE, None)
    assert (body["image"], body["replicas"]) == (PYTORCH_IMAGE, 2)
    workload = make_workload(
        [["python3", "-c", WHERE], *body["steps"]],
        {e["name"]: e["value"] for e in body["env"]}, image=body["image"],
        replicas=body["replicas"], files=tuple(TaskFile.from_dict(f) for f in body["files"]))
    assert launcher.launch(workload, RecordingHooks().hooks) == Outcome("running")

    final = until_final(launcher, TIMEOUT)[-1]

    logs = launcher.logs(workload) or ""
    assert final == Outcome("succeeded", 0, None, (0, 0)), logs
    for k in range(2):
        assert (f"[replica {k}] IN /usr/bin/python3 2.13.0+cpu "
                "/usr/local/lib/python3.11/dist-packages/torch/__init__.py 12.") in logs, logs
        assert f"[replica {k}] rank {k} of 2: OK 5 steps" in logs, logs
    joined = sorted(m.groups() for m in JOINED.finditer(logs))
    assert joined == [(str(k), "2", str(k), "2", "unset", "0.1", "/data/regression")
                      for k in range(2)], logs
    assert len({m.group(4) for m in PASSED.finditer(logs)}) == 1, logs  # equal weights
