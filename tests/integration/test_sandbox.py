"""A plain user attacks the platform through the default (local) launcher, and fails.

Each attack is a task step run by the real stack: it tries to read the workers'
environment, the key files, another task's home, to reach Redis, to leave a
process behind or to escape its workdir.  What the step printed (the task's
log) and how the task ended show that each attempt failed, while the step still
got exactly its resolved env.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from shared.env.identity import Group, replica_env
from tests.integration.conftest import FINAL, Stack

pytestmark = pytest.mark.integration

PRINT_ENVIRONS = """
import json, os
def read(path):
    try:
        raw = open(path, 'rb').read().split(b'\\0')
    except PermissionError:
        return 'sealed'
    return dict(item.decode().split('=', 1) for item in raw if item)
print('ENVIRONS=' + json.dumps({'self': read('/proc/self/environ'), 'pid1': read('/proc/1/environ'),
                                'parent': read(f'/proc/{os.getppid()}/environ')}))
"""
CONNECT = ("import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), "
           "timeout=3); print('CONNECTED')")


class User:
    """One user of the stack, acting with their own token only."""

    def __init__(self, stack: Stack, name: str) -> None:
        self.stack, self.token = stack, stack.new_token(f"{name}-{uuid.uuid4().hex[:6]}")

    def submit(self, steps: list[list[str]], workdir: str | None = None,
               env: list[dict[str, Any]] | None = None) -> str:
        body: dict[str, Any] = {"name": "attack", "steps": steps, "env": env or []}
        if workdir is not None:
            body["workdir"] = workdir
        return str(self.stack.create(body, token=self.token)["id"])

    def task(self, task_id: str) -> dict[str, Any]:
        resp = self.stack.call("GET", f"/api/v1/tasks/{task_id}", token=self.token)
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def wait(self, task_id: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (doc := self.task(task_id))["status"] not in FINAL:
            assert time.monotonic() < deadline, f"task {task_id} stuck: {doc['status']}"
            time.sleep(0.1)
        return doc

    def logs(self, task_id: str) -> str:
        return self.stack.call("GET", f"/api/v1/tasks/{task_id}/logs", token=self.token).text

    def run(self, steps: list[list[str]], **kwargs: Any) -> tuple[dict[str, Any], str]:
        task_id = self.submit(steps, **kwargs)
        return self.wait(task_id), self.logs(task_id)


@pytest.fixture(scope="module")
def alice(stack: Stack) -> User:
    return User(stack, "alice")


@pytest.fixture(scope="module")
def key_files(stack: Stack) -> list[Path]:
    """The stack's keys as ``make run`` keeps them, in files next to the task directories."""
    var = stack.work_dir.parent / "var"
    var.mkdir(exist_ok=True)
    files = []
    for name, setting in (("secret.key", "TASKENV_SECRET_KEYS"),
                          ("admin.token", "TASKENV_ADMIN_TOKEN")):
        path = var / name
        path.write_text(stack.env[setting])
        path.chmod(0o600)
        files.append(path)
    return files


def secrets_of(stack: Stack) -> list[str]:
    return [stack.env["TASKENV_SECRET_KEYS"], stack.env["TASKENV_ADMIN_TOKEN"]]


def printed(logs: str, tag: str) -> Any:
    [line] = [line for line in logs.splitlines() if line.startswith(tag + "=")]
    return json.loads(line[len(tag) + 1:])


def test_the_step_gets_exactly_its_env_and_nothing_of_the_workers(stack: Stack,
                                                                  alice: User) -> None:
    doc, logs = alice.run([["python3", "-c", PRINT_ENVIRONS]],
                          env=[{"name": "LR", "value": "0.1"},
                               {"name": "NOTE", "value": "$(HOME) `id` a;b"}])
    assert doc["status"] == "succeeded", logs
    environs = printed(logs, "ENVIRONS")
    expected = {v["name"]: v["value"] for v in doc["resolved_env"]}
    expected.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME="/home/task")
    expected.update(replica_env(Group(), 0))  # a task of one: a world of one
    assert environs["self"] == expected
    # PID 1 (bwrap, the step's parent) is the platform's: its /proc entries are sealed.
    assert environs["pid1"] == "sealed" and environs["parent"] == "sealed"
    assert not any(secret in logs for secret in secrets_of(stack))


def test_the_key_files_cannot_be_read(stack: Stack, alice: User, key_files: list[Path]) -> None:
    repo_var = Path.cwd() / "var"
    paths = [*key_files, repo_var / "secret.key", repo_var / "admin.token"]
    ids = [alice.submit([["cat", str(path)]]) for path in paths]
    for path, task_id in zip(paths, ids, strict=True):
        doc, logs = alice.wait(task_id), alice.logs(task_id)
        assert doc["status"] == "failed", (path, logs)
        assert "No such file" in logs
        assert not any(secret in logs for secret in secrets_of(stack))


def test_another_task_s_home_cannot_be_read(stack: Stack, alice: User) -> None:
    bob = User(stack, "bob")
    # Bob's home is a tmpfs only his runner and his sandboxes see: not even the host's
    # path to it shows his files while he runs, and it is gone once he has ended.
    bob_id = bob.submit([["sh", "-c",
                          "echo bob-private-data > notes.txt; echo written; sleep 30"]])
    deadline = time.monotonic() + 60
    while "written" not in bob.logs(bob_id):  # his step has written its file
        assert time.monotonic() < deadline, bob.task(bob_id)
        time.sleep(0.1)
    bob_home = stack.work_dir / bob_id / "r1" / "home"
    assert not (bob_home / "notes.txt").exists()
    for step in (["cat", str(bob_home / "notes.txt")], ["ls", str(stack.work_dir)],
                 ["sh", "-c", "ls -A /home; cat /home/*/notes.txt"]):
        doc, logs = alice.run([step])
        assert doc["status"] == "failed", (step, logs)
        assert "bob-private-data" not in logs and "No such file" in logs
    stack.call("POST", f"/api/v1/tasks/{bob_id}/cancel", token=bob.token)
    bob.wait(bob_id)
    assert not (bob_home / "notes.txt").exists()


def test_redis_cannot_be_reached(stack: Stack, alice: User) -> None:
    port = urlsplit(stack.env["TASKENV_REDIS_URL"]).port
    doc, logs = alice.run([["python3", "-c", CONNECT, str(port)]])
    assert doc["status"] == "failed", logs
    assert "CONNECTED" not in logs and "Error" in logs


def test_nothing_a_step_starts_outlives_its_task(alice: User) -> None:
    seconds = f"300.{uuid.uuid4().int % 10**9:09d}"  # a command line no other process has
    doc, logs = alice.run([["sh", "-c", f"setsid sleep {seconds} >/dev/null 2>&1 & echo left"]])
    assert doc["status"] == "succeeded" and "left" in logs
    time.sleep(0.5)
    found = subprocess.run(["pgrep", "-f", f"sleep {seconds}"], capture_output=True, text=True)
    assert found.returncode == 1, found.stdout  # 1: no process matched


@pytest.mark.parametrize("workdir", ["/", "/etc", "../../etc", "..", "var/../../.."])
def test_a_workdir_outside_the_home_is_refused(stack: Stack, alice: User, workdir: str) -> None:
    resp = stack.call("POST", "/api/v1/tasks", token=alice.token,
                      json={"name": "escape", "steps": [["true"]], "workdir": workdir})
    assert resp.status_code == 422, resp.text
    assert [p["field"] for p in resp.json()["errors"]] == ["workdir"]


def test_a_relative_workdir_stays_inside_the_home(alice: User) -> None:
    doc, logs = alice.run([["sh", "-c", "pwd; ls /var"]], workdir="var")
    assert doc["status"] == "failed"  # the host's /var is not there at all
    assert "==> step 1/1: sh\n/home/task/var\n" in logs


def test_a_long_task_does_not_delay_another_user_s_task(stack: Stack, alice: User) -> None:
    bob = User(stack, "bob")
    long_id = alice.submit([["sleep", "20"]])
    short_id = bob.submit([["echo", "quick"]])

    short = bob.wait(short_id, timeout=60)

    assert short["status"] == "succeeded"
    assert alice.task(long_id)["status"] in ("launching", "running")
    assert alice.wait(long_id, timeout=90)["status"] == "succeeded"
