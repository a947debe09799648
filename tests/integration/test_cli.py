"""The installed ``taskenv`` console script against a running stack: real processes only."""

from __future__ import annotations

import io
import json
import queue
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from dotenv import dotenv_values

from tests.integration.conftest import Stack, running_stack
from workers.localstack import RedisServer

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


def taskenv(stack: Stack, token: str, *args: str, stdin: str | None = None,
            **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(stack.work_dir),
           "TASKENV_URL": stack.base, "TASKENV_TOKEN": token, **extra_env}
    result = subprocess.run([str(TASKENV), *args], env=env, capture_output=True, text=True,
                            timeout=120, check=False, input=stdin)
    assert "Warning" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    return result


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
    assert "revision 2 pending" in result.stderr
    assert "container" not in result.stderr  # nothing ran to be stopped
    assert stack.wait(succeeded_task, revision=2)["status"] == "succeeded"
    exported = taskenv(stack, user, "env", "export", succeeded_task, "--resolved")
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


# --- the whole CLI, as a user walks it ------------------------------------------------------

def as_user(home: Path, *args: str, stdin: str | None = None,
            **env: str) -> subprocess.CompletedProcess[str]:
    """``taskenv`` with no token in its environment: only what ``login`` wrote."""
    result = subprocess.run([str(TASKENV), *args], capture_output=True, text=True,
                            timeout=120, check=False, input=stdin,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(home), **env})
    assert "Warning" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    return result


def task_id_in(stderr: str) -> str:
    return stderr.split("task ", 1)[1].split()[0]


def test_login_checks_the_token_and_writes_a_private_config_that_commands_use(
        stack: Stack, user: str, tmp_path: Path):
    config_file = tmp_path / ".config" / "taskenv" / "config.toml"

    refused = as_user(tmp_path, "login", "--url", stack.base, stdin="tke_wrong\n")
    assert refused.returncode == 5 and "401" in refused.stderr
    assert not config_file.exists()

    logged_in = as_user(tmp_path, "login", "--url", stack.base, stdin=user + "\n")
    assert logged_in.returncode == 0, logged_in.stderr
    assert config_file.stat().st_mode & 0o777 == 0o600
    assert config_file.parent.stat().st_mode & 0o777 == 0o700
    assert user not in logged_in.stdout + logged_in.stderr
    assert as_user(tmp_path, "tasks").returncode == 0

    config_file.chmod(0o644)
    open_file = as_user(tmp_path, "tasks")
    assert open_file.returncode == 4
    assert "chmod 600" in open_file.stderr and user not in open_file.stderr


def test_submit_follow_prints_output_while_the_task_runs(stack: Stack, user: str,
                                                         tmp_path: Path):
    (tmp_path / "task.yaml").write_text(
        "name: streams\nsteps:\n  - [sh, -c, 'echo first line; sleep 4; echo last line']\n",
        encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TASKENV_URL": stack.base,
           "TASKENV_TOKEN": user}
    began = time.monotonic()
    with subprocess.Popen([str(TASKENV), "submit", str(tmp_path / "task.yaml"), "--follow"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as follower:
        assert follower.stdout is not None and follower.stderr is not None
        before = []  # the launcher's own notes come first
        while not before or before[-1] not in ("first line\n", ""):
            before.append(follower.stdout.readline())
        first_at = time.monotonic() - began
        rest = follower.stdout.read()
        ended_at = time.monotonic() - began
        err = follower.stderr.read()
    assert before[-1] == "first line\n", before
    assert follower.returncode == 0, err
    assert rest.endswith("last line\n") and "first line" not in rest
    assert ended_at - first_at > 2.5, (first_at, ended_at)  # shown while the step slept
    assert "running" in err and "succeeded" in err


class Watched:
    """A ``taskenv`` command left running, its stdout and stderr read as one stream, line by
    line as they come (a thread reads them)."""

    def __init__(self, stack: Stack, token: str, *args: str) -> None:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(stack.work_dir),
               "TASKENV_URL": stack.base, "TASKENV_TOKEN": token}
        self.proc = subprocess.Popen([str(TASKENV), *args], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # the end

    def until(self, text: str, timeout: float = 60) -> str:
        """Every line up to the first holding ``text``."""
        deadline = time.monotonic() + timeout
        while not self.seen or text not in self.seen[-1]:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never came: {''.join(self.seen)}"
            line = self.lines.get(timeout=left)
            assert line, f"ended before {text!r}: {''.join(self.seen)}"
            self.seen.append(line)
        return "".join(self.seen)

    def stop(self) -> None:
        """Killed if it still runs; its pipe closed."""
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.reader.join(timeout=30)  # it reads to the end of the pipe, then stops
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def end(self, timeout: float = 90) -> str:
        """Everything it printed, once it has exited."""
        self.proc.wait(timeout=timeout)
        while (line := self.lines.get(timeout=10)) != "":
            self.seen.append(line)
        return "".join(self.seen)


SUPERSEDED_YAML = """\
name: superseded
steps:
  - [python3, -c, "import os, time; print('lr is', os.environ['LR'], flush=True); \\
      time.sleep(300 if os.environ['LR'] == '0.01' else 0)"]
env:
  - {name: LR, value: "0.01"}
"""


def test_logs_follow_goes_on_into_the_revision_an_env_change_makes(stack: Stack, user: str,
                                                                   tmp_path: Path):
    (tmp_path / "task.yaml").write_text(SUPERSEDED_YAML, encoding="utf-8")
    task_id = taskenv(stack, user, "submit", str(tmp_path / "task.yaml")).stdout.strip()
    follower = Watched(stack, user, "logs", task_id, "--follow")
    try:
        follower.until("lr is 0.01")  # revision 1 runs, and would for minutes
        changed = taskenv(stack, user, "env", "set", task_id, "LR=0.005")
        seen = follower.end()
    finally:
        follower.stop()

    assert changed.returncode == 0, changed.stderr
    assert follower.proc.returncode == 0, seen
    said = [seen.index(s) for s in (
        "lr is 0.01", f"task {task_id}: revision 1 was superseded by revision 2",
        f"task {task_id} revision 2: ", "lr is 0.005", f"task {task_id} succeeded")]
    assert said == sorted(said), seen
    assert stack.task(task_id)["revision"] == 2


def test_show_then_cancel_a_running_task(stack: Stack, user: str, tmp_path: Path):
    (tmp_path / "task.yaml").write_text(
        "name: lifecycle\nsteps: [[sleep, '300']]\n"
        "env: [{name: LR, value: '0.1'}, {name: API_KEY, value: hunter2-secret}]\n",
        encoding="utf-8")
    submitted = taskenv(stack, user, "submit", str(tmp_path / "task.yaml"),
                        "--secret", "API_KEY")
    task_id = submitted.stdout.strip()
    deadline = time.monotonic() + 60
    while stack.task(task_id)["status"] != "running":
        assert time.monotonic() < deadline, stack.task(task_id)
        time.sleep(0.2)

    shown = taskenv(stack, user, "show", task_id)
    assert shown.returncode == 0, shown.stderr
    rows = shown.stdout.splitlines()
    assert any(r.startswith("status") and "running" in r for r in rows)
    assert any(r.startswith("revision") and "1" in r for r in rows)
    assert any("LR" in r and "0.1" in r and "user" in r for r in rows)
    assert any("NCCL_DEBUG" in r and "WARN" in r and "default" in r for r in rows)
    assert any("API_KEY" in r and "********" in r for r in rows)
    assert "hunter2-secret" not in shown.stdout

    changed = taskenv(stack, user, "env", "set", task_id, "LR=0.2")
    assert changed.returncode == 0, changed.stderr
    assert ("revision 2 pending (a running container's env cannot change: the run was "
            "stopped" in " ".join(changed.stderr.split()))
    cancelled = taskenv(stack, user, "cancel", task_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert stack.wait(task_id, revision=2)["status"] == "cancelled"

    assert "cancelled" in taskenv(stack, user, "show", task_id).stdout


def test_rerun_follow_and_the_revision_history(stack: Stack, user: str, succeeded_task: str):
    stack.wait(succeeded_task, revision=2)  # made by the env set test
    rerun = taskenv(stack, user, "rerun", succeeded_task, "--revision", "1", "--pin",
                    "--follow")
    listed = taskenv(stack, user, "revisions", succeeded_task)
    diff = taskenv(stack, user, "diff", succeeded_task, "1", "3")

    assert rerun.returncode == 0, rerun.stderr
    assert "step sees|LR=0.01|" in rerun.stdout  # revision 1's values, pinned
    assert "container" not in rerun.stderr  # a rerun of an ended task stops nothing
    assert listed.returncode == 0 and diff.returncode == 0
    assert "rerun of 1 (pinned)" in listed.stdout and "patch" in listed.stdout, listed.stdout
    assert "~ TASK_ENV_REVISION: 1 -> 3  [platform]" in diff.stdout
    assert "LR" not in diff.stdout  # pinned to revision 1's value


def test_a_bad_env_exits_2_whichever_check_catches_it(stack: Stack, user: str,
                                                      tmp_path: Path):
    def submit(env_yaml: str, *extra: str) -> subprocess.CompletedProcess[str]:
        (tmp_path / "t.yaml").write_text(f"name: bad\nsteps: [[\"true\"]]\nenv: {env_yaml}\n",
                                         encoding="utf-8")
        return taskenv(stack, user, "submit", str(tmp_path / "t.yaml"), "--follow", *extra)

    (tmp_path / "dup.env").write_text("LR=1\n", encoding="utf-8")
    by_cli = submit("[{name: LR, value: '2'}]", "--env-file", str(tmp_path / "dup.env"))
    by_api = submit(f"[{{name: BIG, value: '{'x' * 200_000}'}}]")
    by_validation = submit("[{name: 1BAD, value: x}]")
    by_policy = submit("[{name: DATA_ROOT, value: /mine}]")

    for result, named in ((by_cli, "LR"), (by_api, "BIG"), (by_validation, "1BAD"),
                          (by_policy, "DATA_ROOT")):
        assert result.returncode == 2, (named, result.stderr)
        assert named in result.stderr


def test_policy_get_json_goes_back_through_impact_and_set(stack: Stack, tmp_path: Path):
    stack.set_policy({**POLICY, "rules": [{"name": "BATCH", "max": 512,
                                           "description": "fits in memory"}]})
    got = taskenv(stack, stack.admin_token, "policy", "get", "--json")
    (tmp_path / "p.json").write_text(got.stdout, encoding="utf-8")
    shown = taskenv(stack, stack.admin_token, "policy", "get")
    impact = taskenv(stack, stack.admin_token, "policy", "impact", str(tmp_path / "p.json"))
    saved = taskenv(stack, stack.admin_token, "policy", "set", str(tmp_path / "p.json"))

    assert got.returncode == shown.returncode == 0
    assert '"scope": "platform"' in got.stdout  # the server's field, ignored on the way back
    assert impact.returncode == 0, impact.stderr
    assert "would newly be rejected: 0" in impact.stdout
    assert saved.returncode == 0, saved.stderr
    rows = shown.stdout.splitlines()
    assert any("BATCH" in r and "value <= 512" in r and "fits in memory" in r for r in rows)
    assert stack.call("GET", "/api/v1/policy").json()["rules"][0]["name"] == "BATCH"


def test_impact_counts_apart_what_a_draft_newly_rejects(stack: Stack, user: str,
                                                        tmp_path: Path):
    stack.set_policy({**POLICY, "rules": [{"name": "EPOCHS", "max": 30}]})
    made = [stack.create({"name": "epochs", "steps": [["true"]],
                          "env": [{"name": "EPOCHS", "value": v}]}, token=user)["id"]
            for v in ("40", "50", "60", "20", "25")]
    for task_id in made:
        stack.wait(task_id)
    draft = {**POLICY, "rules": [{"name": "EPOCHS", "max": 10}]}
    (tmp_path / "draft.json").write_text(json.dumps(draft), encoding="utf-8")
    try:
        impact = taskenv(stack, stack.admin_token, "policy", "impact",
                         str(tmp_path / "draft.json"))
        as_json = taskenv(stack, stack.admin_token, "policy", "impact",
                          str(tmp_path / "draft.json"), "--json")
    finally:
        stack.set_policy(POLICY)

    assert impact.returncode == as_json.returncode == 0, impact.stderr
    # the tasks other tests had rejected count among those rejected today already
    assert "would newly be rejected: 2 (rejected today already: " in impact.stdout
    [epochs] = [r for r in json.loads(as_json.stdout)["rejections"] if r["variable"] == "EPOCHS"]
    assert (epochs["tasks"], epochs["newly_rejected"], epochs["already_rejected"]) == (5, 2, 3)
    assert any("EPOCHS" in r and "rule.max" in r for r in impact.stdout.splitlines())


def test_env_export_by_default_is_what_env_file_takes_back(stack: Stack, user: str,
                                                            tmp_path: Path):
    (tmp_path / "t.yaml").write_text(TASK_YAML, encoding="utf-8")
    (tmp_path / ".env").write_text(DOTENV, encoding="utf-8")
    first = taskenv(stack, user, "submit", str(tmp_path / "t.yaml"), "--env-file",
                    str(tmp_path / ".env"), "--follow")
    exported = taskenv(stack, user, "env", "export", task_id_in(first.stderr))
    (tmp_path / "again.env").write_text(exported.stdout, encoding="utf-8")
    (tmp_path / "bare.yaml").write_text(TASK_YAML.split("env:")[0], encoding="utf-8")

    again = taskenv(stack, user, "submit", str(tmp_path / "bare.yaml"), "--env-file",
                    str(tmp_path / "again.env"), "--follow")

    assert first.returncode == exported.returncode == 0
    values = dotenv_values(stream=io.StringIO(exported.stdout), interpolate=False)
    assert values == {"LR": "0.01", "NOTE": "$(HOME) stays ${HOME}"}  # no default, no TASK_ID
    assert again.returncode == 0, again.stderr
    assert "step sees|LR=0.01|NOTE=$(HOME) stays ${HOME}|NCCL_DEBUG=WARN" in again.stdout


# --- every variable the container gets, identity included -----------------------------------

# The env the step was started with, as exec'd (Python's own locale coercion, PEP 538, adds
# LC_CTYPE to os.environ only after).
DUMP_ENV = ("import json; raw = open('/proc/self/environ', 'rb').read().decode(); "
            "print('ENV=' + json.dumps(dict(e.split('=', 1) for e in raw.split(chr(0)) if e)))")


def printed_env(stack: Stack, token: str, task_id: str, replica: int) -> dict[str, str]:
    logs = stack.call("GET", f"/api/v1/tasks/{task_id}/logs?replica={replica}",
                      token=token).text
    [line] = [line for line in logs.splitlines() if line.startswith("ENV=")]
    seen: dict[str, str] = json.loads(line[4:])
    return seen


def test_show_and_env_get_list_every_variable_replica_0_holds_with_its_source(
        stack: Stack, user: str, tmp_path: Path):
    (tmp_path / "t.yaml").write_text(
        f"name: identity\nreplicas: 2\nsteps: [[python3, -c, \"{DUMP_ENV}\"]]\n"
        "env: [{name: LR, value: '0.3'}, {name: API_KEY, value: hunter2-secret}]\n",
        encoding="utf-8")
    submitted = taskenv(stack, user, "submit", str(tmp_path / "t.yaml"), "--secret", "API_KEY",
                        "--follow")
    assert submitted.returncode == 0, submitted.stderr
    task_id = task_id_in(submitted.stderr)

    got = taskenv(stack, user, "env", "get", task_id, "--json")
    shown = taskenv(stack, user, "show", task_id)
    as_table = taskenv(stack, user, "env", "get", task_id)

    assert got.returncode == shown.returncode == as_table.returncode == 0, got.stderr
    listed = {v["name"]: v for v in json.loads(got.stdout)}
    container = printed_env(stack, user, task_id, 0)
    for own in ("PATH", "HOME"):  # the launcher's, not the task's env
        container.pop(own)
    assert set(listed) == set(container)  # nothing missing, nothing more
    assert {n: v["value"] for n, v in listed.items() if not v.get("secret")} == {
        n: v for n, v in container.items() if n != "API_KEY"}
    assert listed["API_KEY"]["value"] == "********"
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"),
                        ("PET_NNODES", "2"), ("TASK_REPLICAS", "2")):
        assert (listed[name]["value"], listed[name]["source"]) == (value, "platform")
        for out in (shown.stdout, as_table.stdout):
            assert any(f" {name} " in f" {r} " and f" {value} " in f" {r} " and "platform" in r
                       for r in out.splitlines()), (name, out)
    assert printed_env(stack, user, task_id, 1)["RANK"] == "1"
    revision = stack.call("GET", f"/api/v1/tasks/{task_id}/revisions/1", token=user).json()
    assert {v["name"] for v in revision["resolved_env"]} == set(listed)  # show --revision's
    for out in (shown.stdout, as_table.stdout):
        assert "replica 0 of 2 shown: in replica k, TASK_REPLICA, RANK, PET_NODE_RANK are k" in out
        assert "hunter2-secret" not in out


# --- times name their zone -------------------------------------------------------------------

def test_the_times_the_server_gives_are_printed_in_the_readers_zone_with_its_offset(
        stack: Stack, user: str, succeeded_task: str):
    in_kolkata = {"TZ": "IST-5:30"}  # a POSIX zone: no tz database needed
    doc = stack.task(succeeded_task)
    made_at = stack.call("GET", f"/api/v1/tasks/{succeeded_task}/revisions",
                         token=user).json()["items"][0]["made_at"]
    for command, at in ((("show", succeeded_task), doc["created_at"]),
                        (("revisions", succeeded_task), made_at),
                        (("tasks", "--status", doc["status"]), doc["updated_at"])):
        result = taskenv(stack, user, *command, **in_kolkata)
        assert result.returncode == 0, result.stderr
        assert render_in_kolkata(at) in result.stdout, (command, at, result.stdout)
        assert not re.search(r"\d\d:\d\d:\d\d(?![+\d])", result.stdout), result.stdout


def render_in_kolkata(rfc3339: str) -> str:
    """The server's UTC time as the CLI should print it five and a half hours east."""
    moment = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    return moment.astimezone(timezone(timedelta(hours=5, minutes=30))).isoformat(
        timespec="seconds")


# --- reasons as real text ------------------------------------------------------------------

def test_an_admins_reason_of_several_lines_is_printed_as_lines_not_as_backslash_n(
        stack: Stack, user: str, tmp_path: Path):
    reason = "datasets live on shared storage\nask #infra for a bucket of your own"
    stack.set_policy({**POLICY, "protected": [{**POLICY["protected"][0], "reason": reason}]})
    (tmp_path / "t.yaml").write_text(
        "name: sets-locked\nsteps: [[\"true\"]]\nenv: [{name: DATA_ROOT, value: /home/me}]\n",
        encoding="utf-8")
    try:
        refused = taskenv(stack, user, "submit", str(tmp_path / "t.yaml"), "--follow")
        policy = taskenv(stack, stack.admin_token, "policy", "get")
    finally:
        stack.set_policy(POLICY)

    assert refused.returncode == 2, refused.stderr
    assert "\\n" not in refused.stderr + policy.stdout
    rows = refused.stderr.splitlines()
    at = next(i for i, r in enumerate(rows) if "DATA_ROOT: DATA_ROOT is protected" in r)
    assert rows[at].endswith("datasets live on shared storage (policy.protected)"), rows[at]
    assert rows[at + 1] == "    ask #infra for a bucket of your own"
    assert any("ask #infra for a bucket of your own" in r and "DATA_ROOT" not in r
               for r in policy.stdout.splitlines())


# --- the server's states -------------------------------------------------------------------

@pytest.fixture
def one_slot_stack(redis_server: RedisServer,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A host that runs one task at a time: a second one waits, ``queued``."""
    with running_stack(redis_server, tmp_path_factory.mktemp("one-slot"),
                       TASKENV_LOCAL_MAX_RUNNING="1",
                       TASKENV_LOCAL_HOST_NAME=f"host-{uuid.uuid4().hex[:6]}") as running:
        yield running


def wait_status(stack: Stack, task_id: str, status: str) -> None:
    deadline = time.monotonic() + 60
    while stack.task(task_id)["status"] != status:
        assert time.monotonic() < deadline, stack.task(task_id)
        time.sleep(0.2)


def test_tasks_takes_every_state_the_api_knows_and_shows_its_refusal_of_others(
        one_slot_stack: Stack):
    stack = one_slot_stack
    token = stack.new_token("cli-queue")
    first = stack.create({"name": "holds-the-slot", "steps": [["sleep", "300"]]}, token=token)
    wait_status(stack, first["id"], "running")
    second = stack.create({"name": "waits-its-turn", "steps": [["true"]]}, token=token)
    try:
        wait_status(stack, second["id"], "queued")
        queued = taskenv(stack, token, "tasks", "--status", "queued")
        bogus = taskenv(stack, token, "tasks", "--status", "bogus")
    finally:
        for made in (second, first):
            stack.call("POST", f"/api/v1/tasks/{made['id']}/cancel", token=token)

    assert queued.returncode == 0, queued.stderr
    assert second["id"] in queued.stdout and "waits-its-turn" in queued.stdout
    assert first["id"] not in queued.stdout
    assert bogus.returncode == 4
    assert "422" in bogus.stderr and "status: Must be one of:" in bogus.stderr
    assert "queued" in bogus.stderr  # the API's list of states, the one list


# --- env set --env-file ----------------------------------------------------------------------

def test_env_set_env_file_makes_a_revision_with_the_files_values_as_typed(
        stack: Stack, user: str, tmp_path: Path):
    (tmp_path / "t.yaml").write_text(TASK_YAML, encoding="utf-8")
    (tmp_path / ".env").write_text(DOTENV, encoding="utf-8")
    first = taskenv(stack, user, "submit", str(tmp_path / "t.yaml"), "--env-file",
                    str(tmp_path / ".env"), "--follow")
    assert first.returncode == 0, first.stderr
    task_id = task_id_in(first.stderr)
    (tmp_path / "more.env").write_text("NOTE='`id` and $(HOME) stay text'\nLR=0.9\n",
                                       encoding="utf-8")

    both = taskenv(stack, user, "env", "set", task_id, "LR=0.7",
                   "--env-file", str(tmp_path / "more.env"))
    assert both.returncode == 2 and "LR" in both.stderr  # named both ways: refused
    (tmp_path / "more.env").write_text("NOTE='`id` and $(HOME) stay text'\n", encoding="utf-8")
    changed = taskenv(stack, user, "env", "set", task_id, "LR=0.7",
                      "--env-file", str(tmp_path / "more.env"))

    assert changed.returncode == 0, changed.stderr
    assert stack.wait(task_id, revision=2)["status"] == "succeeded"
    logs = stack.call("GET", f"/api/v1/tasks/{task_id}/logs?revision=2", token=user).text
    assert "step sees|LR=0.7|NOTE=`id` and $(HOME) stay text|NCCL_DEBUG=WARN" in logs
    assert stack.task(task_id)["revision"] == 2  # the refused change made none


# --- the catalog's fields --------------------------------------------------------------------

def test_catalog_list_shows_the_range_values_and_case_the_server_documents(stack: Stack):
    admin = stack.admin_token
    made = taskenv(stack, admin, "catalog", "set", "CLI_RATE", "--type", "float", "--min", "0",
                   "--max", "0.5", "--description", "a rate")
    made_enum = taskenv(stack, admin, "catalog", "set", "CLI_MODE", "--type", "enum",
                        "--value", "Fast", "--value", "Slow", "--case-insensitive")
    try:
        listed = taskenv(stack, admin, "catalog", "list", "--layer", "platform")
    finally:
        for name in ("CLI_RATE", "CLI_MODE"):
            taskenv(stack, admin, "catalog", "delete", name)

    assert made.returncode == made_enum.returncode == listed.returncode == 0, made.stderr
    rows = {r.split("│")[1].strip(): r for r in listed.stdout.splitlines() if r.count("│") > 2}
    assert "float" in rows["CLI_RATE"] and "0 <= value <= 0.5" in rows["CLI_RATE"]
    assert "Fast, Slow" in rows["CLI_MODE"] and " any " in rows["CLI_MODE"]


# --- projects --------------------------------------------------------------------------------

def test_an_admin_manages_a_project_and_its_member_sees_it(stack: Stack):
    admin = stack.admin_token
    member = stack.new_token("cli-pat")
    name = f"cli-{uuid.uuid4().hex[:8]}"

    created = taskenv(stack, admin, "projects", "create", name, "--member", "cli-pat",
                      "--maintainer", "cli-mo")
    changed = taskenv(stack, admin, "projects", "members", name, "--add", "cli-quin",
                      "--remove-maintainer", "cli-mo", "--add-maintainer", "cli-ray")
    typo = taskenv(stack, admin, "projects", "members", name, "--remove", "cli-nobody")
    listed = taskenv(stack, admin, "projects", "list")
    as_member = taskenv(stack, member, "projects", "show", name)
    refused = taskenv(stack, member, "projects", "create", f"{name}-2")
    stored = stack.call("GET", f"/api/v1/projects/{name}").json()
    deleted = taskenv(stack, admin, "projects", "delete", name)

    assert created.returncode == changed.returncode == listed.returncode == 0, created.stderr
    assert (stored["members"], stored["maintainers"]) == (["cli-pat", "cli-quin"], ["cli-ray"])
    assert typo.returncode == 4 and "cli-nobody" in typo.stderr
    row = next(r for r in listed.stdout.splitlines() if f" {name} " in r)
    assert "cli-pat, cli-quin" in row and "cli-ray" in row
    assert as_member.returncode == 0, as_member.stderr  # from the member's own list
    assert any(r.startswith("members") and "cli-pat, cli-quin" in r
               for r in as_member.stdout.splitlines())
    assert refused.returncode == 5 and "403" in refused.stderr
    assert deleted.returncode == 0
    assert stack.call("GET", f"/api/v1/projects/{name}").status_code == 404
