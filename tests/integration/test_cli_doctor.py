"""The doctor through the installed ``taskenv`` script on a running stack: a maintainer
documents a variable in the project's catalog, a member previews a task with its
scripts and is told what they read that the task lacks, then submits it and reads the
advice; a stranger can neither read nor edit the project's catalog."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import Stack
from tests.integration.test_cli import TASKENV, taskenv

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).parents[1] / "shared" / "doctor" / "corpus"
TASK_YAML = """\
name: doctor-demo
project: lab
steps:
  - [python3, -c, "print('ran')"]
env:
  - {name: BATCH_SZ, value: "64"}
  - {name: WARMUP_STEPZ, value: "100"}
"""


@pytest.fixture(scope="module")
def tokens(stack: Stack) -> dict[str, str]:
    made = stack.call("POST", "/api/v1/projects", json={
        "name": "lab", "members": ["mia"], "maintainers": ["max"]})
    assert made.status_code == 201, made.text
    return {name: stack.new_token(name) for name in ("mia", "max", "sly")}


def test_catalog_preview_and_submit_from_the_terminal(stack: Stack, tokens: dict[str, str],
                                                      tmp_path: Path) -> None:
    documented = taskenv(stack, tokens["max"], "catalog", "set", "WARMUP_STEPS",
                         "--project", "lab", "--type", "int", "--min", "0",
                         "--description", "optimizer warm-up steps")
    assert documented.returncode == 0, documented.stderr
    listed = taskenv(stack, tokens["mia"], "catalog", "list", "--project", "lab",
                     "--layer", "project")
    assert "WARMUP_STEPS" in listed.stdout and "project:lab" in listed.stdout

    task = tmp_path / "task.yaml"
    task.write_text(TASK_YAML, encoding="utf-8")
    scripts = [arg for p in sorted(CORPUS.iterdir()) for arg in ("--script", str(p))]
    shown = taskenv(stack, tokens["mia"], "preview", str(task), *scripts)
    assert shown.returncode == 0, shown.stderr
    assert "torchrun_entry.py line 7 reads BATCH_SIZE" in shown.stderr
    assert "did you mean BATCH_SZ?" in shown.stderr
    assert "WARMUP_STEPZ is not a documented variable: did you mean WARMUP_STEPS" \
        in shown.stderr
    strict = taskenv(stack, tokens["mia"], "preview", str(task), "--strict-env", *scripts)
    assert strict.returncode == 2 and "the env would be rejected" in strict.stderr

    submitted = taskenv(stack, tokens["mia"], "submit", str(task), "--follow")
    assert submitted.returncode == 0, submitted.stderr
    assert "advice:" in submitted.stderr and "did you mean WARMUP_STEPS" in submitted.stderr
    assert "ran" in submitted.stdout


def test_a_stranger_neither_reads_nor_edits_the_projects_catalog(
        stack: Stack, tokens: dict[str, str]) -> None:
    read = taskenv(stack, tokens["sly"], "catalog", "list", "--project", "lab")
    assert read.returncode != 0 and "404" in read.stderr
    edit = taskenv(stack, tokens["mia"], "catalog", "set", "X", "--project", "lab")
    assert edit.returncode != 0 and "403" in edit.stderr
    platform = taskenv(stack, tokens["max"], "catalog", "builtin", "off")
    assert platform.returncode != 0 and "403" in platform.stderr


SCRIPT = """\
import os

lr = float(os.environ["LR"])
epochs = int(os.environ.get("EPOCHS", "1"))


def push() -> str:  # never called: its read is still reported
    return os.environ["HUB_REPO"]


print("trained with", lr, epochs)
"""
FILES_TASK = """\
name: doctor-files
project: lab
steps:
  - [python3, train.py]
env:
  - {name: LR, value: "0.5"}
  - {name: EPOCHZ, value: "3"}
files:
  - {path: train.py, source: train.py}
"""


def test_a_tasks_own_files_are_read_by_the_policy_stage_on_the_real_stack(
        stack: Stack, tokens: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    task = tmp_path / "task.yaml"
    task.write_text(FILES_TASK, encoding="utf-8")
    ran = taskenv(stack, tokens["mia"], "submit", str(task), "--follow")
    assert ran.returncode == 0, ran.stderr
    assert "trained with 0.5 1" in ran.stdout
    assert "train.py line 8 reads HUB_REPO (inside push()" in ran.stderr
    assert "EPOCHZ is set by the task but no script reads it" in ran.stderr
    assert "the scripts read EPOCHS" in ran.stderr
    listed = stack.call("GET", "/api/v1/tasks?limit=100", token=tokens["mia"]).json()["items"]
    task_id = next(t["id"] for t in listed if t["name"] == "doctor-files")
    doc = stack.call("GET", f"/api/v1/tasks/{task_id}", token=tokens["mia"]).json()
    assert [m["name"] for m in doc["doctor"]["missing"]] == ["HUB_REPO"]
    assert doc["doctor"]["scripts"][0] == {"path": "train.py", "language": "python",
                                           "reads": ["EPOCHS", "HUB_REPO", "LR"]}


TYPO_SCRIPT = """\
import os

lr = float(os.environ["LEARNING_RATE"])
print("training at", lr)
"""
TYPO_TASK = """\
name: doctor-typo
project: lab
steps:
  - [python3, train.py]
env:
  - {name: LR, value: "0.01"}
files:
  - {path: train.py, source: train.py}
"""


def merged(stack: Stack, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``taskenv`` with its stderr and stdout in one stream, in the order it wrote them."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(stack.work_dir), "TASKENV_URL": stack.base,
           "TASKENV_TOKEN": token}
    return subprocess.run([str(TASKENV), *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, check=False)


def test_the_doctors_findings_come_before_the_output_and_after_an_env_change(
        stack: Stack, tokens: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TYPO_SCRIPT, encoding="utf-8")
    (tmp_path / "task.yaml").write_text(TYPO_TASK, encoding="utf-8")
    missing = "train.py line 3 reads LEARNING_RATE, which this task does not set"
    unread = "LR is set by the task but no script reads it"

    submitted = merged(stack, tokens["mia"], "submit", str(tmp_path / "task.yaml"), "--follow")
    assert submitted.returncode == 1, submitted.stdout
    seen = submitted.stdout
    assert seen.index(missing) < seen.index("Traceback") < seen.index("KeyError")
    assert seen.index(unread) < seen.index("Traceback")
    assert seen.count(unread) == 1  # not again with the outcome
    task_id = seen.split("task ", 1)[1].split()[0]

    changed = taskenv(stack, tokens["mia"], "env", "set", task_id, "LR=0.005")
    assert changed.returncode == 0, changed.stderr
    assert "doctor, revision 2 (LR):" in changed.stderr
    assert f"LR: {unread}" in changed.stderr and "(doctor.script_unread)" in changed.stderr
    assert "LEARNING_RATE" in changed.stderr  # the read it may have meant

    followed = merged(stack, tokens["mia"], "logs", task_id, "--follow")
    assert followed.returncode == 1, followed.stdout
    seen = followed.stdout
    assert f"task {task_id} revision 2: " in seen
    assert seen.index(missing) < seen.index(unread) < seen.index("Traceback")
