"""The compose stack, started for real with podman-compose: Redis, the API under
waitress, one worker service per stage (launch scaled to 3) and the reconciler, from
images built out of Debian packages (no registry).  Tasks go through the API and
succeed in the local launcher's bubblewrap sandbox inside the launch containers.

podman-compose 1.0.3 ignores ``up --scale``; the launch stage is scaled with the
compose file's ``deploy.replicas`` (TASKENV_LAUNCH_REPLICAS).  Podman runs health
checks from systemd timers, which this machine has not ("unable to get systemd
connection to add healthchecks"), so the test runs each service's health check
itself with ``podman healthcheck run``: the command the compose file defines.

The secrets reach the containers through env files only: every command the test runs
has its output checked for each secret value, since podman-compose prints the
``podman run`` lines it makes (where an ``environment:`` entry would be in clear).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from shared.secrets import new_key
from shared.task import states

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "taskenv-test"
LAUNCH_REPLICAS = 3
TASKS = 10
FINAL = set(states.FINAL)
# The settings whose values must never be printed; the Redis URL holds the password.
SECRETS = frozenset({"TASKENV_REDIS_PASSWORD", "TASKENV_ADMIN_TOKEN", "TASKENV_SECRET_KEYS",
                     "TASKENV_SESSION_SECRET"})


class Compose:
    """podman-compose on this project: the secrets in env files in ``secrets_dir``,
    the other settings in its environment."""

    def __init__(self, secrets_dir: Path, settings: dict[str, str]) -> None:
        self.settings = settings
        self.up_output = ""
        self.secrets = {name: value for name, value in settings.items() if name in SECRETS}
        write_env_files(secrets_dir, self.secrets)
        # podman needs its usual environment (PATH with sbin for netavark's firewall);
        # no TASKENV_* of the caller's may reach the compose file, nor any secret.
        outer = {k: v for k, v in os.environ.items() if not k.startswith("TASKENV_")}
        public = {k: v for k, v in settings.items() if k not in SECRETS}
        self.env = {**outer, **public, "TASKENV_SECRETS_DIR": str(secrets_dir)}

    def __call__(self, *args: str, check: bool = True, timeout: float = 600) -> str:
        proc = subprocess.run(["podman-compose", "-p", PROJECT, *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)
        out = self.checked(f"podman-compose {args[0]}", proc)
        assert proc.returncode == 0 or not check, f"podman-compose {args[0]} failed:\n{out}"
        return out

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A podman command, its output checked for secrets like podman-compose's."""
        proc = subprocess.run(argv, capture_output=True, text=True)
        out = self.checked(" ".join(argv[:2]), proc)
        assert proc.returncode == 0 or not check, f"{' '.join(argv)} failed:\n{out}"
        return proc

    def checked(self, command: str, proc: subprocess.CompletedProcess[str]) -> str:
        """stdout and stderr, once asserted free of every secret value (the failure
        names the secret, never shows it)."""
        out = proc.stdout + proc.stderr
        shown = [name for name, value in self.secrets.items() if value in out]
        assert not shown, f"{command} printed the value of {shown}"
        return out

    def containers(self, service: str) -> list[str]:
        """Names of the service's running containers."""
        out = self.run("podman", "ps", "--filter", f"label=io.podman.compose.project={PROJECT}",
                       "--filter", f"label=com.docker.compose.service={service}",
                       "--format", "{{.Names}}").stdout
        return sorted(out.split())

    def logs(self, container: str) -> str:
        proc = self.run("podman", "logs", container, check=False)
        return proc.stdout + proc.stderr

    def podman(self, *args: str) -> str:
        return self.run("podman", *args).stdout


def write_env_files(directory: Path, secrets: dict[str, str]) -> None:
    """The three env files docker-compose.yml reads, readable by their owner only."""
    password = secrets["TASKENV_REDIS_PASSWORD"]
    files = {
        "redis.env": {"REDIS_PASSWORD": password, "REDISCLI_AUTH": password},
        "taskenv.env": {"TASKENV_REDIS_URL": f"redis://:{password}@redis:6379/0",
                        "TASKENV_SECRET_KEYS": secrets["TASKENV_SECRET_KEYS"]},
        "api.env": {name: secrets[name]
                    for name in ("TASKENV_ADMIN_TOKEN", "TASKENV_SESSION_SECRET")},
    }
    for name, values in files.items():
        path = directory / name
        path.touch(mode=0o600)
        path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stack_settings() -> dict[str, str]:
    return {
        "TASKENV_REDIS_PASSWORD": secrets.token_hex(24),
        "TASKENV_ADMIN_TOKEN": "taskenv_" + secrets.token_urlsafe(32),  # at least 32 chars
        "TASKENV_SECRET_KEYS": new_key(),
        "TASKENV_SESSION_SECRET": secrets.token_urlsafe(32),
        "TASKENV_API_PORT": str(free_port()),
        "TASKENV_LAUNCH_REPLICAS": str(LAUNCH_REPLICAS),
        "TASKENV_LAUNCHER": "local",
    }


@pytest.fixture(scope="module")
def images() -> None:
    """The base image from Debian packages (kept once built) and the service image."""
    proc = subprocess.run([str(ROOT / "deploy/image/build-taskenv.sh")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"image build failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def compose(images: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compose]:
    compose = Compose(tmp_path_factory.mktemp("secrets"), stack_settings())
    take_down(compose)  # what an interrupted earlier run left
    try:
        compose.up_output = compose("up", "-d")
        yield compose
    finally:
        take_down(compose)


def take_down(compose: Compose) -> None:
    compose("down", "-v", check=False)
    # podman-compose 1.0.3 leaves the project's network behind.
    compose.run("podman", "network", "rm", "-f", f"{PROJECT}_default", check=False)


def healthy(compose: Compose, container: str) -> bool:
    return compose.run("podman", "healthcheck", "run", container, check=False).returncode == 0


def wait_healthy(compose: Compose, container: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not healthy(compose, container):
        assert time.monotonic() < deadline, (
            f"{container} not healthy after {timeout:.0f}s:\n{compose.logs(container)[-4000:]}")
        time.sleep(2)


class Api:
    def __init__(self, port: str, token: str) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1"
        self.headers = {"Authorization": f"Bearer {token}"}

    def post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        answer = requests.post(self.base + path, json=body, headers=self.headers, timeout=10)
        assert answer.status_code in (200, 201, 202), answer.text
        return dict(answer.json())

    def get(self, path: str) -> requests.Response:
        answer = requests.get(self.base + path, headers=self.headers, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer


def wait_final(api: Api, task_id: str, timeout: float = 180) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        doc = dict(api.get(f"/tasks/{task_id}").json())
        if doc["status"] in FINAL or time.monotonic() > deadline:
            return doc
        time.sleep(0.5)


def test_stack_runs_tasks_with_three_launch_workers(compose: Compose) -> None:
    launchers = compose.containers("launch")
    assert len(launchers) == LAUNCH_REPLICAS, (launchers, compose.up_output)
    wait_healthy(compose, f"{PROJECT}_redis_1")
    wait_healthy(compose, f"{PROJECT}_api_1")  # /readyz: a consumer per queue, reconciler ran
    for name in launchers:  # every replica consumes the launch queue
        assert "ready." in compose.logs(name), compose.logs(name)[-4000:]

    port = compose.settings["TASKENV_API_PORT"]
    admin = Api(port, compose.settings["TASKENV_ADMIN_TOKEN"])
    alice = Api(port, str(admin.post("/tokens", {"owner": "alice", "role": "user"})["token"]))
    ids = [str(alice.post("/tasks", {
        "name": f"compose-{n}",
        "steps": [["sh", "-c", "echo step sees N=$N"]],
        "env": [{"name": "N", "value": str(n)}],
    })["id"]) for n in range(TASKS)]

    docs = {task_id: wait_final(alice, task_id) for task_id in ids}
    summary = {task_id: (doc["status"], doc.get("reason")) for task_id, doc in docs.items()}
    assert all(doc["status"] == states.SUCCEEDED for doc in docs.values()), summary
    for n, task_id in enumerate(ids):
        log = alice.get(f"/tasks/{task_id}/logs").text
        assert "in a bwrap sandbox" in log and f"step sees N={n}" in log, log


def test_redis_is_durable_and_never_evicts(compose: Compose) -> None:
    redis = f"{PROJECT}_redis_1"
    wait_healthy(compose, redis)

    def config(name: str) -> str:
        return compose.podman("exec", redis, "redis-cli", "config", "get", name).split()[1]

    assert config("appendonly") == "yes"
    assert config("maxmemory-policy") == "noeviction"
    anonymous = compose.run("podman", "exec", redis, "env", "-u", "REDISCLI_AUTH",
                            "redis-cli", "get", "x", check=False)
    assert "NOAUTH" in anonymous.stdout + anonymous.stderr


def test_secrets_reach_their_services_through_env_files_only(compose: Compose) -> None:
    runs = [line for line in compose.up_output.splitlines() if line.startswith("podman run")]
    assert runs and all("--env-file" in line for line in runs), compose.up_output
    wait_healthy(compose, f"{PROJECT}_api_1")
    for name in compose.containers("launch"):  # users' steps run there: no API secret
        for variable in ("TASKENV_ADMIN_TOKEN", "TASKENV_SESSION_SECRET"):
            assert compose.run("podman", "exec", name, "printenv", variable,
                               check=False).returncode == 1, (name, variable)

    # The Fernet keys reached the API (which encrypts) and the launch workers (which decrypt).
    value = secrets.token_hex(16)
    admin = Api(compose.settings["TASKENV_API_PORT"], compose.settings["TASKENV_ADMIN_TOKEN"])
    task_id = str(admin.post("/tasks", {
        "name": "compose-secret",
        "steps": [["sh", "-c", 'printf %s "$HF_TOKEN" | sha256sum']],
        "env": [{"name": "HF_TOKEN", "value": value, "secret": True}],
    })["id"])
    doc = wait_final(admin, task_id)
    assert doc["status"] == states.SUCCEEDED, doc
    log = admin.get(f"/tasks/{task_id}/logs").text
    assert hashlib.sha256(value.encode()).hexdigest() in log, log
