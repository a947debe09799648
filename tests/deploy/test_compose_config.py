"""deploy/compose_config.py: the compose files checked without starting anything, as README
"Compose" has a reader run it (a process of its own, no podman on its PATH: it can start
nothing), on the files the repository ships and on the mistakes it names."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ("docker-compose.yml", "docker-compose.slurm.yml", "docker-compose.sentinel.yml")
SECRETS = {"redis.env": "REDIS_PASSWORD=p\nREDISCLI_AUTH=p\n",
           "taskenv.env": "TASKENV_REDIS_URL=redis://:p@redis:6379/0\n",
           "api.env": "TASKENV_ADMIN_TOKEN=t\n"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The compose files beside the secrets' files README "Compose" writes."""
    for name in COMPOSE:
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "secrets").mkdir()
    for name, text in SECRETS.items():
        (tmp_path / "secrets" / name).write_text(text)
    return tmp_path


def config(project: Path, *files: str, **env: str) -> subprocess.CompletedProcess[str]:
    args = [a for f in files for a in ("-f", f)]
    empty = project / "no-programs"
    empty.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, str(ROOT / "deploy" / "compose_config.py"), *args],
                          cwd=project, env={"PATH": str(empty), **env}, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize("files", [(), ("docker-compose.yml", "docker-compose.slurm.yml"),
                                   ("docker-compose.yml", "docker-compose.sentinel.yml")])
def test_the_shipped_files_pass_and_print_as_merged(project: Path,
                                                    files: tuple[str, ...]) -> None:
    done = config(project, *files, TASKENV_LAUNCH_REPLICAS="3")
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr, done.stderr
    merged = yaml.safe_load(done.stdout)
    assert merged["services"]["launch"]["deploy"]["replicas"] == "3"
    for name, service in merged["services"].items():
        for key, value in (service.get("environment") or {}).items():
            assert value is None or "${" not in value, (name, key, value)


def test_the_slurm_file_switches_only_the_submitters_and_passes_the_partition_through(
        project: Path) -> None:
    done = config(project, "docker-compose.yml", "docker-compose.slurm.yml")
    services = yaml.safe_load(done.stdout)["services"]
    for name in ("launch", "reconcile"):
        env = services[name]["environment"]
        assert env["TASKENV_LAUNCHER"] == "slurm" and env["TASKENV_SLURM_PARTITION"] is None
        assert "/run/munge:/run/munge:ro" in services[name]["volumes"]
    assert services["api"]["environment"]["TASKENV_LAUNCHER"] == "local"


def test_the_secrets_not_yet_written_are_named(project: Path) -> None:
    (project / "secrets" / "api.env").unlink()
    done = config(project)
    assert done.returncode == 1 and done.stdout == ""
    assert "error: services.api.env_file: ./secrets/api.env does not exist" in done.stderr


@pytest.mark.parametrize(("text", "named"), [
    ("services:\n  a: {image: x, environment: {P: '${P:-}'}}\n",
     "${P:-}: podman-compose 1.0.3 reads no empty default"),
    ("services:\n  a: {image: x, command: 'echo ${NEED:?set NEED first}'}\n",
     "NEED is not set: set NEED first"),
    ("services:\n  a: {image: x, depends_on: [redis]}\n", "redis is no service of these files"),
    ("services:\n  a: {environment: {A: '1'}}\n", "services.a: neither image nor build"),
    ("services:\n  a: {image: x, volumes: ['data:/data']}\n",
     "data is not declared under volumes"),
    ("services:\n  a: [image: x\n", "while parsing"),
    ("version: '3'\n", "no services"),
])
def test_each_mistake_is_named_and_nothing_is_printed(tmp_path: Path, text: str,
                                                      named: str) -> None:
    (tmp_path / "docker-compose.yml").write_text(text)
    done = config(tmp_path)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert named in done.stderr, done.stderr


def test_an_escaped_dollar_is_the_shells_and_an_unset_variable_a_warning(tmp_path: Path) -> None:
    (tmp_path / "docker-compose.yml").write_text(
        "services:\n  a:\n    image: x\n    command: 'sh -c \"echo $${P:-} ${UNSET}\"'\n")
    done = config(tmp_path)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["services"]["a"]["command"] == 'sh -c "echo ${P:-} "'
    assert "warning: " in done.stderr and "UNSET is not set: it becomes empty" in done.stderr


def test_the_env_file_beside_the_compose_file_is_read(project: Path) -> None:
    (project / ".env").write_text("TASKENV_API_PORT=9090\n")
    done = config(project)
    assert yaml.safe_load(done.stdout)["services"]["api"]["ports"] == ["127.0.0.1:9090:8080"]


PODMAN_COMPOSE_MERGE = """
import json, os, sys, yaml, podman_compose as p
out = {}
for name in sys.argv[1:]:
    p.rec_merge(out, p.rec_subs(p.normalize(yaml.safe_load(open(name))), dict(os.environ)))
print(json.dumps({k: v for k, v in out.items() if not k.startswith("x-")}, sort_keys=True))
"""


@pytest.mark.skipif(subprocess.run(["/usr/bin/python3", "-c", "import podman_compose"],
                                   capture_output=True, check=False).returncode != 0,
                    reason="podman-compose is not installed for /usr/bin/python3")
@pytest.mark.parametrize("files", [("docker-compose.yml", "docker-compose.slurm.yml"),
                                   ("docker-compose.yml", "docker-compose.sentinel.yml")])
def test_the_merge_is_podman_composes_own(project: Path, files: tuple[str, ...]) -> None:
    """podman-compose's own functions (normalize, rec_subs, rec_merge), run on the same
    files, give the same merged file."""
    theirs = subprocess.run(["/usr/bin/python3", "-c", PODMAN_COMPOSE_MERGE, *files],
                            cwd=project, env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                            text=True, timeout=60, check=True).stdout
    mine = config(project, *files)
    assert mine.returncode == 0, mine.stderr
    assert json.loads(theirs) == yaml.safe_load(mine.stdout)
