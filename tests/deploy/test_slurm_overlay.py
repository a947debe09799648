"""deploy/slurm/k8s: taskenv on Kubernetes submitting to an existing Slurm cluster.

Rendered by ``kubectl kustomize`` (these machines ship kubectl with kustomize), since
the overlay patches the base's Deployments; every object passes the strict schema.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from shared.config import PREFIX, Settings
from tests.deploy.test_k8s_manifests import KUBERNETES_VERSIONS, named, setting_names

OVERLAY = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "k8s"
SUBMITTERS = ("taskenv-launch", "taskenv-reconciler")

pytestmark = pytest.mark.kubectl


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl (with its built-in kustomize) renders this overlay")
    out = subprocess.run([kubectl, "kustomize", str(OVERLAY)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_passes_the_strict_schema(objects: list[dict[str, Any]],
                                               version: str) -> None:
    for doc in objects:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_settings_pick_slurm_and_are_real_settings(objects: list[dict[str, Any]]) -> None:
    config = named(objects, "ConfigMap", "taskenv-config")["data"]
    taskenv = {k: v for k, v in config.items() if k.startswith(PREFIX)}
    assert set(taskenv) - setting_names() == set()
    assert set(config) - set(taskenv) == {"SLURM_CONF"}
    settings = Settings.from_env(taskenv)
    assert settings.launcher == "slurm" and settings.slurm_dir == "/shared/taskenv"


def test_only_the_submitters_get_munge_slurm_conf_and_the_shared_directory(
        objects: list[dict[str, Any]]) -> None:
    for deployment in (d for d in objects if d["kind"] == "Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        volumes = {v["name"] for v in spec["volumes"]}
        if deployment["metadata"]["name"] not in SUBMITTERS:
            assert not volumes & {"munge-key", "slurm-conf", "shared"}
            continue
        [munged] = spec["initContainers"]
        assert munged["restartPolicy"] == "Always" and munged["command"][0] == "munged"
        assert {m["mountPath"] for m in munged["volumeMounts"]} == {"/etc/munge", "/run/munge"}
        mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert {"/run/munge", "/etc/slurm", "/shared/taskenv"} <= set(mounts)
        assert "/etc/munge" not in mounts  # the key stays in the sidecar
        assert spec["securityContext"]["runAsNonRoot"] is True
        key = next(v for v in spec["volumes"] if v["name"] == "munge-key")
        assert key["secret"]["secretName"] == "taskenv-munge"
        assert key["secret"]["defaultMode"] == 0o440


def test_the_placeholders_are_marked(objects: list[dict[str, Any]]) -> None:
    key = named(objects, "Secret", "taskenv-munge")["stringData"]["munge.key"]
    conf = named(objects, "ConfigMap", "taskenv-slurm")["data"]["slurm.conf"]
    assert key.startswith("REPLACE-ME") and "REPLACE-ME" in conf
