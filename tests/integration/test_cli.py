"""The installed ``taskenv`` console script against a running stack: real processes only."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from dotenv import dotenv_values

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

TASKENV = Path(sys.executable).with_name("taskenv")
POLICY = {
    "defaults": [{"name": "NCCL_DEBUG", "value": "WARN"}],
    "protected": [{"name": "DATA_ROOT", "value": "/mnt/datasets",
                   "reason": "datasets live on shared storage"}],
    "on_conflict": "reject",
}
PRINT_ENV = ("import os; print('step sees', *(f'{k}={os.environ[k]}' for k in "
             "('LR', 'NOTE', 'NCCL_DEBUG')), sep='|')")
TASK_YAML = f"""\
name: cli-demo
steps:
  - [python3, -c, "{PRINT_ENV}"]
env:
  - {{name: LR, value: "0.01"}}
"""
DOTENV = "# from the .env file\nNOTE='$(HOME) stays ${HOME}'\n"


def taskenv(stack: Stack, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(stack.work_dir),
           "TASKENV_URL": stack.base, "TASKENV_TOKEN": token}
    return subprocess.run([str(TASKENV), *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture(scope="module")
def user(stack: Stack) -> str:
    stack.set_policy(POLICY)
    return stack.new_token("cli-user")


@pytest.fixture(scope="module")
def succeeded_task(stack: Stack, user: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    files = tmp_path_factory.mktemp("cli")
    (files / "task.yaml").write_text(TASK_YAML, encoding="utf-8")
    (files / ".env").write_text(DOTENV, encoding="utf-8")

    result = taskenv(stack, user, "submit", str(files / "task.yaml"),
                     "--env-file", str(files / ".env"), "--follow")

    assert result.returncode == 0, result.stderr
    assert "step sees|LR=0.01|NOTE=$(HOME) stays ${HOME}|NCCL_DEBUG=WARN" in result.stdout
    assert "succeeded" in result.stderr
    return result.stderr.split("task ", 1)[1].split()[0]


def test_submit_follow_succeeds_with_the_env_file_values_as_typed(stack: Stack,
                                                                  succeeded_task: str):
    assert stack.task(succeeded_task)["status"] == "succeeded"


def test_a_protected_variable_exits_2_naming_it(stack: Stack, user: str, tmp_path: Path):
    (tmp_path / "task.yaml").write_text(
        "name: sets-locked\nsteps: [[\"true\"]]\nenv: [{name: DATA_ROOT, value: /home/me}]\n",
        encoding="utf-8")

    result = taskenv(stack, user, "submit", str(tmp_path / "task.yaml"), "--follow")

    assert result.returncode == 2, result.stderr
    assert "DATA_ROOT: DATA_ROOT is protected by the platform" in result.stderr
    assert "(policy.protected)" in result.stderr


def test_tasks_and_env_get_show_the_task_and_each_source(stack: Stack, user: str,
                                                         succeeded_task: str):
    listed = taskenv(stack, user, "tasks", "--status", "succeeded")
    got = taskenv(stack, user, "env", "get", succeeded_task)

    assert listed.returncode == got.returncode == 0
    assert succeeded_task in listed.stdout and "cli-demo" in listed.stdout
    rows = got.stdout.splitlines()
    assert any("NCCL_DEBUG" in r and "WARN" in r and "default" in r for r in rows)
    assert any("LR" in r and "0.01" in r and "user" in r for r in rows)
    assert any("TASK_ID" in r and "platform" in r for r in rows)


def test_env_set_makes_revision_2_and_export_reads_back(stack: Stack, user: str,
                                                        succeeded_task: str):
    result = taskenv(stack, user, "env", "set", succeeded_task, "LR=0.5")

    assert result.returncode == 0, result.stderr
    assert stack.wait(succeeded_task, revision=2)["status"] == "succeeded"
    exported = taskenv(stack, user, "env", "export", succeeded_task)
    values = dotenv_values(stream=io.StringIO(exported.stdout), interpolate=False)
    assert values["LR"] == "0.5"
    assert values["NOTE"] == "$(HOME) stays ${HOME}"
    assert values["TASK_ENV_REVISION"] == "2"


def test_admin_creates_lists_and_revokes_a_token(stack: Stack):
    created = taskenv(stack, stack.admin_token, "tokens", "create", "cli-bob", "--role", "user")
    new_token = created.stdout.strip()
    token_id = created.stderr.split("token ", 1)[1].split()[0]
    listed = taskenv(stack, stack.admin_token, "tokens", "list")
    works = taskenv(stack, new_token, "tasks")
    revoked = taskenv(stack, stack.admin_token, "tokens", "revoke", token_id)
    refused = taskenv(stack, new_token, "tasks")

    assert created.returncode == listed.returncode == revoked.returncode == 0
    assert works.returncode == 0, works.stderr
    assert "cli-bob" in listed.stdout and token_id in listed.stdout
    assert new_token not in listed.stdout + listed.stderr + revoked.stdout + revoked.stderr
    assert refused.returncode == 5
    assert "401" in refused.stderr


def test_env_diff_shows_what_revision_2_changed(stack: Stack, user: str, succeeded_task: str):
    stack.wait(succeeded_task, revision=2)  # made by the env set test
    result = taskenv(stack, user, "env", "diff", succeeded_task, "1", "2")

    assert result.returncode == 0, result.stderr
    assert "~ LR: 0.01 -> 0.5  [user]" in result.stdout
    assert "~ TASK_ENV_REVISION: 1 -> 2  [platform]" in result.stdout
    assert "NCCL_DEBUG" not in result.stdout  # unchanged variables are not listed


def test_submit_sends_the_task_file_s_files_read_from_their_sources(stack: Stack, user: str,
                                                                     tmp_path: Path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "prepare.sh").write_text(
        'echo "prepared lr=$LR" > prepared.txt\n', encoding="utf-8")
    (tmp_path / "task.yaml").write_text("""\
name: cli-files
steps: [[./prepare.sh], [python3, train.py]]
env: [{name: LR, value: "0.02"}]
files:
  - {path: prepare.sh, source: scripts/prepare.sh, mode: 0755}
  - path: train.py
    content: |
      import os
      print("train read:", open("prepared.txt").read().strip(), "env:", os.environ["LR"])
""", encoding="utf-8")
    preview = taskenv(stack, user, "preview", str(tmp_path / "task.yaml"))
    assert preview.returncode == 0, preview.stdout + preview.stderr
    result = taskenv(stack, user, "submit", str(tmp_path / "task.yaml"), "--follow")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "train read: prepared lr=0.02 env: 0.02" in result.stdout
