"""deploy/slurm/k8s: taskenv on Kubernetes submitting to an existing Slurm cluster.

A kustomize component an operator's overlay lists.  Rendered by ``kubectl kustomize``
(these machines ship kubectl with kustomize) as deploy/k8s/README.md has it: a copy of
the example overlay with the component added; every object passes the strict schema.
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

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "deploy" / "slurm" / "k8s"
SUBMITTERS = ("taskenv-launch", "taskenv-reconciler")

pytestmark = pytest.mark.kubectl


def kustomize(directory: Path) -> subprocess.CompletedProcess[str]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl (with its built-in kustomize) renders this overlay")
    return subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                          text=True, check=False, timeout=60)


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    checkout = tmp_path_factory.mktemp("checkout")
    shutil.copytree(REPO / "deploy", checkout / "deploy")
    prod = checkout / "deploy" / "k8s" / "overlays" / "prod"
    shutil.copytree(checkout / "deploy" / "k8s" / "overlays" / "example", prod)
    with (prod / "kustomization.yaml").open("a") as kustomization:
        kustomization.write("components:\n  - ../../../slurm/k8s\n")
    done = kustomize(prod)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


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


def test_the_component_keeps_the_overlays_secrets_and_image(objects: list[dict[str, Any]]) -> None:
    assert not [d for d in objects if d["kind"] == "Secret"]
    assert "REPLACE-ME" not in yaml.safe_dump_all(objects)
    images = {c["image"] for d in objects if d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"].get("initContainers", [])
              + d["spec"]["template"]["spec"]["containers"]}
    assert images == {"registry.example.com/platform/taskenv:1.0.0"}


def test_the_component_alone_is_refused() -> None:
    assert kustomize(OVERLAY).returncode != 0
