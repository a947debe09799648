"""deploy/slurm/k8s: taskenv on Kubernetes submitting to an existing Slurm cluster.

A kustomize component the operator's own overlay lists.  Rendered as deploy/k8s/README.md
has the reader do it (tests/deploy/doc_blocks.py replays it: the example overlay copied,
the Secrets created, the component added, ``kubectl kustomize`` as ``kubectl apply -k``
would); every object passes the strict schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from shared.config import PREFIX, Settings
from tests.deploy import doc_blocks
from tests.deploy.test_k8s_manifests import KUBERNETES_VERSIONS, named, setting_names

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "deploy" / "slurm" / "k8s"
README = "deploy/k8s/README.md"
SUBMITTERS = ("taskenv-launch", "taskenv-reconciler")

pytestmark = pytest.mark.kubectl


def launcher(render: doc_blocks.Render) -> str | None:
    configs = [d for d in render.objects if d["kind"] == "ConfigMap"
               and d["metadata"]["name"] == "taskenv-config"]
    return configs[0]["data"].get("TASKENV_LAUNCHER") if configs else None


def applied(walk: doc_blocks.Walk) -> list[doc_blocks.Render]:
    """What the README's own commands apply, in order."""
    return [r for r in walk.renders if r.applied and r.command.doc == README]


@pytest.fixture(scope="module")
def objects(doc_walk: doc_blocks.Walk) -> list[dict[str, Any]]:
    """What the README's Slurm steps apply."""
    (slurm,) = [r for r in applied(doc_walk) if launcher(r) == "slurm"]
    return slurm.objects


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


def test_the_component_keeps_the_overlays_secrets_and_image(
        objects: list[dict[str, Any]], doc_walk: doc_blocks.Walk) -> None:
    assert not [d for d in objects if d["kind"] == "Secret"], "the real Secrets stay"
    assert doc_blocks.PLACEHOLDER not in yaml.safe_dump_all(objects)
    [(_, built)] = doc_walk.built
    assert set(doc_blocks.images(objects)) == {built, "redis:7.4"}
    assert not [i for i in doc_blocks.images(objects) if i.startswith("taskenv")]


def test_the_component_changes_only_the_submitters_and_the_settings(
        objects: list[dict[str, Any]], doc_walk: doc_blocks.Walk) -> None:
    """The Slurm variant is the reader's own overlay (step 4's apply), plus what Slurm needs."""
    kubernetes = next(r for r in applied(doc_walk) if launcher(r) == "kubernetes").objects
    changed = {("Deployment", "taskenv", name) for name in SUBMITTERS} \
        | {("ConfigMap", "taskenv", "taskenv-config")}
    before = {doc_blocks.object_key(d): d for d in kubernetes}
    after = {doc_blocks.object_key(d): d for d in objects}
    shared = ("PersistentVolumeClaim", "taskenv", "taskenv-slurm-shared")
    assert set(after) - set(before) == {shared}
    assert set(before) <= set(after)
    assert [k for k in before if k not in changed and before[k] != after[k]] == []
    config = after[("ConfigMap", "taskenv", "taskenv-config")]["data"]
    assert {k: v for k, v in config.items() if "SLURM" not in k and k != "TASKENV_LAUNCHER"} == \
        {k: v for k, v in before[("ConfigMap", "taskenv", "taskenv-config")]["data"].items()
         if k != "TASKENV_LAUNCHER"}


def test_the_secret_and_configmap_the_submitters_read_are_created_with_their_keys(
        doc_walk: doc_blocks.Walk) -> None:
    created = {(c.kind, c.name): c.keys for c in doc_walk.created if c.command.doc == README}
    assert created[("Secret", "taskenv-munge")] == {"munge.key"}
    assert created[("ConfigMap", "taskenv-slurm")] == {"slurm.conf"}


def test_the_component_alone_is_refused() -> None:
    """``kubectl apply -k deploy/slurm/k8s`` can never apply anything on its own."""
    with pytest.raises(doc_blocks.RenderError):
        doc_blocks.kustomize(OVERLAY)
