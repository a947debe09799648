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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import requests

from tests.support.stack import Stack, stop_group
from workers.localstack import free_port, wait_http

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def localstack_env(port: int) -> dict[str, str]:
    """The user's environment without any taskenv setting, so localstack picks its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKENV_")}
    return {**env, "TASKENV_PORT": str(port), "PYTHONPATH": str(ROOT)}


@dataclass
class Run:
    """One run of ``python -m workers.localstack``: its process and what it printed."""

    proc: subprocess.Popen[bytes]
    log: Path
    start: int  # where this run's output begins in the log

    def output(self) -> str:
        return self.log.read_text(errors="replace")[self.start:]


@contextmanager
def localstack_run(directory: Path, port: int) -> Iterator[tuple[Stack, Run]]:
    """``make run`` in a terminal: its own process group, as a shell's foreground job, and
    stopped with Ctrl-C, which the terminal sends to that whole group."""
    log_path = directory / "localstack.log"
    start = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "workers.localstack"], cwd=directory,
                                env=localstack_env(port), stdout=log, stderr=subprocess.STDOUT,
                                process_group=0)
    run = Run(proc, log_path, start)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
        var = directory / "var"
        yield Stack(f"http://127.0.0.1:{port}", redis.Redis(), {
            "TASKENV_ADMIN_TOKEN": (var / "admin.token").read_text().strip()},
            var / "tasks", var / "processes.log"), run
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 0, run.output()[-3000:]


@contextmanager
def localstack(directory: Path, port: int) -> Iterator[Stack]:
    """One run of ``python -m workers.localstack``, stopped with Ctrl-C (SIGINT)."""
    with localstack_run(directory, port) as (stack, _):
        yield stack


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


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` (``Z``: ended, not reaped), or None once it is gone."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat_line[stat_line.rindex(")") + 2:].split()[0]


def test_up_is_said_once_the_api_is_ready_and_a_clean_stop_reaches_redis_last(
        tmp_path: Path) -> None:
    port = free_port()
    with localstack_run(tmp_path, port) as (stack, run):
        deadline = time.monotonic() + 90
        while "taskenv is up" not in run.output():
            assert time.monotonic() < deadline, run.output()[-3000:]
            time.sleep(0.1)
        # Said once every queue has a worker and a reconciler passed: /readyz answers.
        ready = requests.get(stack.base + "/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        said = run.output()
        assert said.index("serving on http://") < said.index("taskenv is up")
        done = stack.create({"name": "quick", "steps": [["true"]]})
        assert stack.wait(done["id"])["status"] == "succeeded"
    # Ctrl-C reached the whole foreground group: the stack stopped its processes, then
    # its Redis, so none of them lost it on the way down.
    out = run.output()
    assert "stopping" in out
    assert "Cannot connect to redis" not in out and "Connection refused" not in out, out[-3000:]


def test_no_runner_is_left_unreaped_after_its_task_ends(tmp_path: Path) -> None:
    """The runner of a local task is the launch worker's child: once it ends, the worker
    collects it, rather than leave a ``<defunct>`` entry until its next launch."""
    with localstack(tmp_path, free_port()) as stack:
        task = stack.create({"name": "ends", "steps": [["sleep", "1"]]})
        pid_file = stack.work_dir / task["id"] / "r1" / "runner.pid"
        deadline = time.monotonic() + 60
        while not pid_file.is_file() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline, stack.task(task["id"])
            time.sleep(0.05)
        runner = int(pid_file.read_text().split()[0])
        assert stack.wait(task["id"])["status"] == "succeeded"
        deadline = time.monotonic() + 30
        while (state := process_state(runner)) is not None:
            assert time.monotonic() < deadline, f"runner {runner} left in state {state}"
            time.sleep(0.1)


def test_make_worker_in_make_run_s_directory_joins_its_stack(tmp_path: Path) -> None:
    """README "Scaling": ``make worker QUEUE=validate`` beside ``make run``, with no setting
    of its own, finds the stack's Redis and keys in ``var/`` and consumes its queue."""
    venv = Path(sys.executable).parent.parent
    with localstack(tmp_path, free_port()) as stack:
        url = (tmp_path / "var" / "redis.url").read_text().strip()
        consumers = redis.Redis.from_url(url).zcard
        deadline = time.monotonic() + 60
        while consumers("taskenv:consumers:validate") < 1:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        extra = subprocess.Popen(["make", "-s", "-f", str(ROOT / "Makefile"), f"VENV={venv}",
                                  "-o", f"{venv}/.installed", "worker", "QUEUE=validate"],
                                 cwd=tmp_path, env=localstack_env(0),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
        try:
            while consumers("taskenv:consumers:validate") < 2:
                assert extra.poll() is None, "make worker exited"
                assert time.monotonic() < deadline + 60, "make worker never joined"
                time.sleep(0.2)
            done = stack.create({"name": "two-validators", "steps": [["true"]]})
            assert stack.wait(done["id"])["status"] == "succeeded"
        finally:
            stop_group(extra)  # before the stack and its Redis stop


# --- the operator commands against what ``make run`` keeps in var/ ---------------------------

def readme_rotation_blocks() -> list[str]:
    """The README's key-rotation recipe for ``make run``, its three shell blocks in order:
    the test runs what the README says, so the two cannot drift apart."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("**Rotating the key.**"):]
    return re.findall(r"```sh\n(.*?)```", section, re.S)[:3]


def as_operator(run_dir: Path, script: str) -> subprocess.CompletedProcess[str]:
    """A shell in the stack's directory, the virtualenv's python first on the PATH (and at
    ``.venv``, as in a checkout, for the blocks that activate it)."""
    venv = run_dir / ".venv"
    if not venv.exists():
        venv.symlink_to(Path(sys.executable).parent.parent)
    env = localstack_env(0)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=run_dir, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_operator_commands_find_the_local_stack_and_the_readme_rotation_runs(
        tmp_path: Path) -> None:
    blocks = readme_rotation_blocks()
    assert len(blocks) == 3
    port = free_port()
    secret = "hf_secret_value_0123"
    check = ["sh", "-c", f'test "$HF_TOKEN" = {secret} && echo token-seen']
    with localstack(tmp_path, port) as first:
        made = as_operator(tmp_path, "python -m api.cli create-token --owner bob --role user")
        assert made.returncode == 0, made.stderr
        assert "Traceback" not in made.stderr
        bob = made.stdout.strip()
        created = first.call("POST", "/api/v1/tasks", bob, json={
            "name": "sealed", "steps": [check],
            "env": [{"name": "HF_TOKEN", "value": secret, "secret": True}]}).json()
        assert first.wait(created["id"])["status"] == "succeeded"
    old_key = (tmp_path / "var" / "secret.key").read_text().strip()

    step1 = as_operator(tmp_path, blocks[0])
    assert step1.returncode == 0, step1.stderr
    keys = (tmp_path / "var" / "secret.key").read_text().strip().split(",")
    assert len(keys) == 2 and keys[1] == old_key and keys[0] != old_key
    assert stat.S_IMODE((tmp_path / "var" / "secret.key").stat().st_mode) == 0o600
    with localstack(tmp_path, port):
        step2 = as_operator(tmp_path, blocks[1])
        assert step2.returncode == 0, step2.stderr
        assert "re-sealed 1 tasks (1 revisions)" in step2.stderr
    assert not (tmp_path / "var" / "redis.url").exists()  # removed when the stack stops
    step3 = as_operator(tmp_path, blocks[2])
    assert step3.returncode == 0, step3.stderr
    assert (tmp_path / "var" / "secret.key").read_text().strip() == keys[0]

    with localstack(tmp_path, port) as last:  # the new key alone opens the secret
        rerun = last.call("POST", f"/api/v1/tasks/{created['id']}/rerun", bob).json()
        assert last.wait(created["id"], rerun["revision"])["status"] == "succeeded"
        logs = last.call("GET", f"/api/v1/tasks/{created['id']}/logs", bob).text
        assert "token-seen" in logs and secret not in logs


def test_operator_commands_say_what_to_set_without_a_stack(tmp_path: Path) -> None:
    env = {"TASKENV_REDIS_URL": f"redis://:pw@127.0.0.1:{free_port()}/0"}
    script = " ".join(f"{k}={v}" for k, v in env.items())
    for command in ("create-token --owner bob", "rotate-secrets"):
        done = as_operator(tmp_path, f"{script} python -m api.cli {command}")
        assert done.returncode == 2
        assert "Traceback" not in done.stderr and ":pw@" not in done.stderr
        assert "set TASKENV_REDIS_URL" in done.stderr and "var/redis.url" in done.stderr
