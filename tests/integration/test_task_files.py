"""A task's own scripts, run by the local launcher on a real stack (real Redis, real
Celery workers, the bubblewrap sandbox): prepare.sh and train.py each read the same env,
and train.py reads what prepare.sh wrote into the working directory."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

PREPARE = """#!/bin/sh
set -e
echo "prepare sees LEARNING_RATE=$LEARNING_RATE"
mkdir -p "$DATA_DIR"
echo "rows from prepare, lr=$LEARNING_RATE" > "$DATA_DIR/train.csv"
"""
TRAIN = """import os
lr = os.environ["LEARNING_RATE"]
with open(os.path.join(os.environ["DATA_DIR"], "train.csv")) as f:
    print("train sees LEARNING_RATE=" + lr, "and read:", f.read().strip())
with open("model.txt", "w") as out:  # the working directory stays writable
    out.write(lr)
print("conf:", open("conf/train.yaml").read().strip())
"""


def task_with_files() -> dict[str, object]:
    return {
        "name": "scripts", "workdir": "job",
        "steps": [["sh", "prepare.sh"], ["./prepare.sh"], ["python3", "train.py"]],
        "env": [{"name": "LEARNING_RATE", "value": "0.01"},
                {"name": "DATA_DIR", "value": "data"}],
        "files": [{"path": "prepare.sh", "content": PREPARE, "mode": 0o755},
                  {"path": "train.py", "content": TRAIN},
                  {"path": "conf/train.yaml", "content": "epochs: 3\n"}]}


def test_a_task_s_files_are_in_its_workdir_before_the_first_step(stack: Stack) -> None:
    created = stack.create(task_with_files())
    doc = stack.wait(created["id"])
    logs = stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    assert doc["status"] == "succeeded", (doc, logs)
    assert logs.count("prepare sees LEARNING_RATE=0.01") == 2  # executable: mode 0755
    assert "train sees LEARNING_RATE=0.01 and read: rows from prepare, lr=0.01" in logs
    assert "conf: epochs: 3" in logs
    # What the steps wrote lived in the revision's home, which goes when the revision
    # ends: nothing of it, nor the files, is left on the host.
    workdir = stack.work_dir / created["id"] / "r1" / "home" / "job"
    assert not (workdir / "model.txt").exists() and not (workdir / "prepare.sh").exists()


def test_a_rerun_runs_the_files_as_they_were(stack: Stack) -> None:
    created = stack.create(task_with_files())
    assert stack.wait(created["id"])["status"] == "succeeded"
    changed = task_with_files()["files"]
    changed[1] = {"path": "train.py", "content": "print('version two')\n"}  # type: ignore[index]
    patched = stack.call("PATCH", f"/api/v1/tasks/{created['id']}/env",
                         json={"files": changed}).json()
    assert stack.wait(created["id"], patched["revision"])["status"] == "succeeded"
    rerun = stack.call("POST", f"/api/v1/tasks/{created['id']}/rerun",
                       json={"revision": 1}).json()
    assert stack.wait(created["id"], rerun["revision"])["status"] == "succeeded"
    logs = {n: stack.call("GET", f"/api/v1/tasks/{created['id']}/logs?revision={n}").text
            for n in (2, 3)}
    assert "version two" in logs[2] and "version two" not in logs[3]
    assert "train sees LEARNING_RATE=0.01" in logs[3]
