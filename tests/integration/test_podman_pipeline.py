"""From POST to a final state with TASKENV_LAUNCHER=podman: real pods, real containers.

The launch worker only starts the pod (``running``); the reconciler process
(``python -m workers.reconcile``, as ``make run`` starts it) asks podman every
second and brings the outcome and the container's output back.  Needs podman and the
local image, as tests/workers/launchers/podman/test_podman_launcher.py does
(make test installs both).
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.env.identity import Group, replica_env
from shared.task import manifest
from tests.integration.conftest import HOSTILE as COMMON_HOSTILE
from tests.integration.conftest import Stack, running_stack
from tests.support.podman import env_dumps, podman
from workers.localstack import (
    RedisServer,
)

pytestmark = [pytest.mark.integration, pytest.mark.podman]

ROOT = Path(__file__).resolve().parents[2]
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DUMP = ["env", "-0"]
HOSTILE = {
    **COMMON_HOSTILE,
    "REFERENCE": "$(NCCL_DEBUG)",  # Kubernetes-style references and escapes stay literal too
    "DOLLARS": "a$$b $$(X) $",
}
POLICY = {
    "defaults": [{"name": "NCCL_DEBUG", "value": "INFO"},
                 {"name": "OMP_NUM_THREADS", "value": "4"}],
    "protected": [{"name": "DATA_ROOT", "value": "/mnt/datasets",
                   "reason": "datasets live on shared storage"}],
    "on_conflict": "reject",
}
SECRET = "hf_podman-secret-7c1e04d2b9"


def runtime_added(task_id: str, revision: int = 1) -> dict[str, str]:
    """What podman, the image and the step shell add.

    (See tests/workers/launchers/podman/test_podman_launcher.)
    """
    run_name = f"taskenv-{task_id[:20]}-r{revision}"  # shared.task.workload.Workload.run_name
    return {"HOSTNAME": run_name, "HOME": "/work", "PATH": IMAGE_PATH, "PWD": "/work",
            "SHLVL": "1", **dict(replica_env(Group(), 0))}




class PodmanStack(Stack):
    """The stack, remembering each task it created so its pods can be removed."""

    created: list[str]

    def create(self, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        task = super().create(body, **kwargs)
        self.created.append(task["id"])
        return task

    def containers(self, task_id: str) -> list[str]:
        label = f"label={manifest.LABEL_TASK_ID}={task_id}"
        return podman("ps", "-a", "--filter", label, "--format", "{{.Names}}").stdout.split()

    def remove_pods(self) -> None:
        """Whatever a test left of its tasks: pods and their volumes."""
        for task_id in self.created:
            label = f"label={manifest.LABEL_TASK_ID}={task_id}"
            for pod in podman("pod", "ps", "--filter", label,
                              "--format", "{{.Name}}").stdout.split():
                podman("pod", "rm", "--force", "--time", "0", pod)
            names = podman("volume", "ls", "--format", "{{.Name}}").stdout.split()
            left = [n for n in names if n.startswith(f"taskenv-{task_id[:20]}-r")]
            if left:
                podman("volume", "rm", *left)


@pytest.fixture(scope="module")
def podman_stack(redis_server: RedisServer,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanStack]:
    subprocess.run([str(ROOT / "deploy/image/build.sh")], check=True, timeout=300)
    with running_stack(redis_server, tmp_path_factory.mktemp("podman-stack"), PodmanStack,
                       TASKENV_LAUNCHER="podman",
                       TASKENV_RECONCILE_INTERVAL_SECONDS="1") as stack:
        assert isinstance(stack, PodmanStack)
        stack.created = []
        try:
            yield stack
        finally:
            stack.remove_pods()


def test_both_steps_run_in_a_container_with_exactly_the_resolved_env(
        podman_stack: PodmanStack):
    stack = podman_stack
    stack.set_policy(POLICY)
    user_env = [{"name": k, "value": v} for k, v in HOSTILE.items()]
    user_env.append({"name": "OMP_NUM_THREADS", "value": "8"})
    created = stack.create({"name": "in-podman", "steps": [DUMP, DUMP], "env": user_env})

    doc = stack.wait(created["id"])

    assert doc["status"] == "succeeded", doc
    assert doc["exit_code"] == 0
    resolved = {v["name"]: v["value"] for v in doc["resolved_env"]}
    assert resolved["DATA_ROOT"] == "/mnt/datasets" and resolved["OMP_NUM_THREADS"] == "8"
    assert resolved["TASK_ID"] == created["id"]
    logs = stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    for seen in env_dumps(logs, 2):  # one dump per step
        assert seen == {**runtime_added(created["id"]), **resolved}
    # Its output and outcome recorded, the pod has served: it is removed.
    deadline = time.monotonic() + 30
    while stack.containers(created["id"]):
        assert time.monotonic() < deadline, stack.containers(created["id"])
        time.sleep(0.2)


def test_failing_step_fails_the_task_with_its_exit_code_and_output(podman_stack: PodmanStack):
    created = podman_stack.create({"name": "fails-in-podman", "steps": [
        ["sh", "-c", "echo preparing; exit 3"], ["echo", "never"]]})

    doc = podman_stack.wait(created["id"])

    assert doc["status"] == "failed" and doc["exit_code"] == 3, doc
    logs = podman_stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    assert logs == "preparing\n"


def test_a_running_steps_output_is_in_the_log_before_the_step_ends(podman_stack: PodmanStack):
    """The reconciler reads the container's log while it runs: the step's first line is in
    ``GET /tasks/{id}/logs`` while the step still waits for a file only the test makes."""
    created = podman_stack.create({"name": "streams-in-podman", "steps": [
        ["sh", "-c", "echo first line; while [ ! -e /tmp/release ]; do sleep 0.1; done; "
                     "echo last line"]]})
    task_id = created["id"]

    deadline = time.monotonic() + 60
    while "first line" not in (log := podman_stack.call(
            "GET", f"/api/v1/tasks/{task_id}/logs").text):
        assert time.monotonic() < deadline, log
        time.sleep(0.2)
    running = podman_stack.task(task_id)
    released = podman("exec", f"taskenv-{task_id[:20]}-r1-task", "touch", "/tmp/release")
    doc = podman_stack.wait(task_id)

    assert log == "first line\n" and running["status"] == "running", (log, running)
    assert released.returncode == 0, released.stderr
    assert doc["status"] == "succeeded", doc
    final = podman_stack.call("GET", f"/api/v1/tasks/{task_id}/logs").text
    assert final == "first line\nlast line\n"  # nothing stored twice


def test_secret_reaches_the_container_and_its_output_is_redacted(podman_stack: PodmanStack):
    stack = podman_stack
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    created = stack.create({"name": "secret-in-podman", "steps": [
        ["sh", "-c", 'printf %s "$HF_TOKEN" | sha256sum; echo "printed: $HF_TOKEN"']],
        "env": [{"name": "HF_TOKEN", "value": SECRET, "secret": True}]})

    doc = stack.wait(created["id"])

    assert doc["status"] == "succeeded", doc
    logs = stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    assert logs == f"{digest}  -\nprinted: [secret]\n"  # arrived exactly; redacted when stored
    pod = f"taskenv-{created['id'][:20]}-r1"
    assert SECRET not in podman("pod", "inspect", pod).stdout
    assert SECRET.encode() not in stack.logs.read_bytes()


PREPARE_SH = """set -e
echo "prepare sees LEARNING_RATE=$LEARNING_RATE in $(pwd)"
mkdir -p "$DATA_DIR"
echo "rows lr=$LEARNING_RATE \\$(HOME) stays" > "$DATA_DIR/train.csv"
"""
TRAIN_SH = """echo "train sees LEARNING_RATE=$LEARNING_RATE and read: $(cat "$DATA_DIR/train.csv")"
echo done > model.txt && echo "model: $(cat model.txt)"
"""


def test_a_task_s_files_are_copied_into_a_writable_workdir_in_the_container(
        podman_stack: PodmanStack):
    """The busybox runtime image has no python: two sh scripts, each reading the same env,
    the second reading what the first wrote, placed by the init container's copy."""
    stack = podman_stack
    created = stack.create({
        "name": "files-in-podman", "workdir": "job",
        "steps": [["sh", "prepare.sh"], ["./bin/train.sh"]],
        "env": [{"name": "LEARNING_RATE", "value": "0.01"}, {"name": "DATA_DIR", "value": "data"}],
        "files": [{"path": "prepare.sh", "content": PREPARE_SH},
                  {"path": "bin/train.sh", "content": TRAIN_SH, "mode": 0o755}]})
    try:
        doc = stack.wait(created["id"], timeout=120)
        logs = stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
        assert doc["status"] == "succeeded", (doc, logs)
        assert "prepare sees LEARNING_RATE=0.01 in /home/task/job" in logs
        assert "train sees LEARNING_RATE=0.01 and read: rows lr=0.01 $(HOME) stays" in logs
        assert "model: done" in logs
    finally:
        stack.remove_pods()
