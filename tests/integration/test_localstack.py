"""``make run`` as a user runs it: ``python -m workers.localstack`` in a directory of its own.

Its Redis keeps its data under ``var/`` with AOF on, so a stop and a start keep every
task and policy, and requires a password kept in ``var/redis.password``.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.support.stack import Stack
from workers.localstack import free_port, wait_http

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def localstack_env(port: int) -> dict[str, str]:
    """The user's environment without any taskenv setting, so localstack picks its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKENV_")}
    return {**env, "TASKENV_PORT": str(port), "PYTHONPATH": str(ROOT)}


@contextmanager
def localstack(directory: Path, port: int) -> Iterator[Stack]:
    """One run of ``python -m workers.localstack``, stopped with Ctrl-C (SIGINT)."""
    with open(directory / "localstack.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "workers.localstack"], cwd=directory,
                                env=localstack_env(port), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
        var = directory / "var"
        yield Stack(f"http://127.0.0.1:{port}", redis.Redis(), {
            "TASKENV_ADMIN_TOKEN": (var / "admin.token").read_text().strip()},
            var / "tasks", var / "processes.log")
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("localstack")


def process_list() -> list[str]:
    """Every process's command line, as any user on the machine sees them."""
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    return ps.stdout.splitlines()


def test_a_restart_keeps_tasks_and_the_policy(run_dir: Path) -> None:
    port = free_port()
    with localstack(run_dir, port) as first:
        created = first.create({"name": "kept", "steps": [["true"]]})
        first.set_policy({"defaults": [{"name": "KEPT_DEFAULT", "value": "1"}],
                          "protected": []})
    with localstack(run_dir, port) as second:
        assert second.task(created["id"])["name"] == "kept"
        policy = second.call("GET", "/api/v1/policy").json()
        assert [d["name"] for d in policy["defaults"]] == ["KEPT_DEFAULT"]
    assert list((run_dir / "var" / "redis").glob("appendonly*"))


def test_redis_requires_the_password_kept_private(run_dir: Path) -> None:
    with localstack(run_dir, free_port()):
        password_file = run_dir / "var" / "redis.password"
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        password = password_file.read_text().strip()
        assert not [line for line in process_list() if password in line]
        log = (run_dir / "localstack.log").read_text()
        assert password not in log
        port = int(re.findall(r"started redis-server at 127\.0\.0\.1:(\d+)", log)[-1])

        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()
        assert redis.Redis(port=port, password=password).ping()
