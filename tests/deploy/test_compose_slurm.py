"""docker-compose.slurm.yml: the compose stack's launch workers and reconciler on Slurm.

podman-compose 1.0.3 has no ``config`` command, so the override is read as compose
merges it (a service's ``environment`` mapping merged, ``volumes`` appended, ``user``
replaced) and checked against the base file and the settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from shared.config import PREFIX, Settings
from tests.deploy.test_k8s_manifests import setting_names

ROOT = Path(__file__).resolve().parents[2]


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / name).read_text())
    assert isinstance(data, dict)
    return data


def test_only_the_launch_workers_and_the_reconciler_change() -> None:
    base, override = load("docker-compose.yml"), load("docker-compose.slurm.yml")
    assert set(override["services"]) == {"launch", "reconcile"}
    assert set(override["services"]) <= set(base["services"])
    for name, service in override["services"].items():
        assert set(service) == {"user", "environment", "volumes"}, name
        assert "command" in base["services"][name]  # the role stays the base's


def test_the_settings_pick_slurm_and_are_real_settings() -> None:
    env = load("docker-compose.slurm.yml")["services"]["launch"]["environment"]
    taskenv = {k: v for k, v in env.items() if k.startswith(PREFIX)}
    assert set(taskenv) - setting_names() == set()
    assert set(env) - set(taskenv) == {"SLURM_CONF"}
    # The partition and the account have no value: passed from the environment where set.
    assert {k for k, v in taskenv.items() if v is None} == {"TASKENV_SLURM_PARTITION",
                                                            "TASKENV_SLURM_ACCOUNT"}
    resolved = {k: v.replace("${TASKENV_SLURM_DIR:-/shared/taskenv}", "/shared/taskenv")
                for k, v in taskenv.items() if v is not None}
    assert "${" not in "".join(resolved.values())
    assert Settings.from_env(resolved).launcher == "slurm"


def test_munge_and_slurm_conf_are_read_only_and_the_shared_directory_keeps_its_path() -> None:
    volumes = load("docker-compose.slurm.yml")["services"]["reconcile"]["volumes"]
    assert "/run/munge:/run/munge:ro" in volumes and "/etc/slurm:/etc/slurm:ro" in volumes
    [shared] = [v for v in volumes if "SLURM_DIR" in v]
    host, inside = shared.split("}:", 1)
    assert host + "}" == inside  # the nodes see the same path
