"""The Kubernetes manifests: schema-valid, env in order, values literal, secrets out of the Job."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from shared.config import Settings
from shared.env.identity import IDENTITY_NAMES, Group, replica_env
from shared.policy.model import Resolved
from shared.task import manifest
from shared.task.limits import Maxima
from shared.task.manifest import (
    ANNOTATION_TASK_ID,
    GPU_RESOURCE,
    LABEL_POLICY_VERSION,
    LABEL_REVISION,
    LABEL_TASK_ID,
    Manifests,
    ManifestSettings,
    build,
    escape,
    job_name,
    label_value,
    pod_spec,
    secret_name,
    to_dict,
)
from shared.task.workload import Resources, Workload

# The oldest Kubernetes minor we support and the newest the validator ships.
KUBERNETES_VERSIONS = ("1.32.0", "1.37.0")
TASK_ID = "3f2b8c1e9d4a4b7fa0c1d2e3f4a5b6c7"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
HOSTILE_VALUES = ["$(HOME)", "$$(X)", "a$b", "a$$b", "$(TASK_ID)", "$", "x$", "$$", "$(",
                  "$(UNCLOSED", "`id`; rm -rf / && echo $((1+1))\n'\"", "naïve – 学习率 🚀", ""]

# A task of one replica's identity: a world of one, listening on loopback.
ONE = dict(replica_env(Group(), 0))


def assert_valid(obj: Any) -> dict[str, Any]:
    """``obj`` (a client model or its dict) passes the strict schema of every pinned version."""
    data = obj if isinstance(obj, dict) else to_dict(obj)
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(data, version, strict=True)
    return data


def kube_expand(value: str, defined: Mapping[str, str]) -> str:
    return manifest.kube_expand(value, defined.get)


# Cases from Kubernetes' third_party/forked/golang/expansion tests.
@pytest.mark.parametrize(("text", "expected"), [
    ("$(VAR_A)", "A"), ("___$(VAR_B)___", "___B___"), ("$(VAR_A)-$(VAR_A)", "A-A"),
    ("$$(VAR_A)", "$(VAR_A)"), ("$$$$(VAR_A)", "$$(VAR_A)"), ("$$$(VAR_A)", "$A"),
    ("$(UNKNOWN)", "$(UNKNOWN)"), ("$(VAR_A", "$(VAR_A"), ("foo$", "foo$"), ("$x", "$x"),
    ("$()", "$()"),
])
def test_kube_expand_does_what_the_kubelet_does(text: str, expected: str) -> None:
    assert kube_expand(text, {"VAR_A": "A", "VAR_B": "B"}) == expected


def container_env(manifests: Manifests) -> dict[str, str]:
    """The env a kubelet gives the container: values expanded in order, secrets read."""
    container = manifests.job.spec.template.spec.containers[0]
    secret = {k: base64.b64decode(v).decode()
              for k, v in (manifests.secret.data if manifests.secret else {}).items()}
    env: dict[str, str] = {}
    for var in container.env or []:
        if var.value_from is not None:
            env[var.name] = secret[var.value_from.secret_key_ref.key]
        else:
            env[var.name] = kube_expand(var.value or "", env)
    return env


def workload(env: list[Resolved] | None = None, **changes: Any) -> Workload:
    fields: dict[str, Any] = dict(
        task_id=TASK_ID, revision=1, name="resnet50 sweep", policy_version=7,
        steps=(("python", "prepare.py"), ("python", "train.py", "--epochs", "3")),
        env=tuple(env if env is not None else [
            Resolved("TASK_ID", TASK_ID, "platform"),
            Resolved("NCCL_DEBUG", "INFO", "default"),
            Resolved("LR", "0.01", "user", ("default",)),
            Resolved("HF_TOKEN", "hf_s3cr3t_value", "protected", ("user",), True),
            Resolved("DATA", "/data/$(TASK_ID)", "user"),
        ]),
        image="registry.local/train:1.0", workdir="/workspace",
        resources=Resources(cpu="4", memory="16Gi", gpus=2),
    )
    fields.update(changes)
    return Workload(**fields)


SETTINGS = ManifestSettings(namespace="training", backoff_limit=0)
LIMITED = ManifestSettings(namespace="training", maxima=Maxima.from_settings(Settings(
    task_max_memory="8Gi", task_tmp_size="64Mi", task_home_size="256Mi")))


def test_the_step_runs_unprivileged_whatever_the_image_says():
    spec = to_dict(build(workload(), SETTINGS).job)["spec"]["template"]["spec"]
    context = spec["containers"][0]["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] == 65534
    assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in spec and "hostPID" not in spec


def test_limits_from_resources_with_defaults_and_size_capped_scratch():
    job = to_dict(build(workload(resources=Resources(cpu="500m", memory="64Gi")),
                        LIMITED).job)
    spec = job["spec"]["template"]["spec"]
    container = spec["containers"][0]
    bounded = {"cpu": "500m", "memory": str(8 << 30)}  # memory clamped to the maximum
    assert container["resources"] == {"requests": bounded, "limits": bounded}
    assert {v["name"]: v["emptyDir"] for v in spec["volumes"]} == {
        "work": {"medium": "Memory", "sizeLimit": str(256 << 20)},
        "tmp": {"medium": "Memory", "sizeLimit": str(64 << 20)}}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/home/task", "/tmp"}
    assert_valid(job)
    plain = to_dict(build(workload(resources=Resources()), LIMITED).job)
    assert plain["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "1", "memory": str(2 << 30)}


def test_settings_come_from_the_service_settings():
    settings = Settings(kube_namespace="ml", kube_backoff_limit=2, kube_image="r.example/t:1")
    assert ManifestSettings.from_settings(settings) == ManifestSettings(
        "ml", 2, "r.example/t:1", Maxima.from_settings(settings))


def test_the_job_is_valid_batch_v1_that_never_restarts():
    manifests = build(workload(), SETTINGS)
    job = assert_valid(manifests.job)
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["metadata"]["namespace"] == "training"
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["enableServiceLinks"] is False  # no FOO_SERVICE_HOST noise in the env
    assert pod["automountServiceAccountToken"] is False
    assert len(pod["containers"]) == 1
    assert assert_valid(manifests.secret)["kind"] == "Secret"


def test_the_validator_is_strict():
    job = to_dict(build(workload(), SETTINGS).job)
    job["spec"]["template"]["spec"]["containers"][0]["envv"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        assert_valid(job)


def test_env_holds_the_resolved_variables_in_order():
    w = workload()
    container = assert_valid(build(w, SETTINGS).job)["spec"]["template"]["spec"]["containers"][0]
    # The resolved env, then the replica's identity (a task of one: a world of one).
    assert [e["name"] for e in container["env"]] == [v.name for v in w.env] + list(
        IDENTITY_NAMES)
    assert container["env"][1] == {"name": "NCCL_DEBUG", "value": "INFO"}


def test_every_value_arrives_as_typed_after_kubernetes_expansion():
    env = [Resolved("TASK_ID", TASK_ID, "platform"), Resolved("X", "defined", "user")]
    env += [Resolved(f"V{i}", value, "user") for i, value in enumerate(HOSTILE_VALUES)]
    w = workload(env)
    manifests = build(w, SETTINGS)
    assert_valid(manifests.job)
    assert container_env(manifests) == {**w.env_dict(), **ONE}


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_escape_round_trips_through_kubernetes_expansion(value):
    defined = {"HOME": "/root", "X": "x", "TASK_ID": "t", "UNCLOSED": "u"}
    assert kube_expand(escape(value), defined) == value


def test_escaping_only_dollar_paren_would_not_be_enough():
    # Why every '$' is doubled: Kubernetes collapses '$$' wherever it appears.
    def naive(value: str) -> str:
        return value.replace("$(", "$$(")
    defined = {"X": "x"}
    assert kube_expand(naive("a$$b"), defined) != "a$$b"
    assert kube_expand(naive("$$(X)"), defined) != "$$(X)"


def test_secrets_reach_the_container_only_through_a_secret_key_ref():
    w = workload()
    manifests = build(w, SETTINGS)
    job, secret = assert_valid(manifests.job), assert_valid(manifests.secret)
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": secret_name(w), "key": "HF_TOKEN", "optional": False}}}
    text = json.dumps(job)
    assert "hf_s3cr3t_value" not in text
    assert base64.b64encode(b"hf_s3cr3t_value").decode() not in text
    assert secret["metadata"]["name"] == secret_name(w)
    assert secret["metadata"]["namespace"] == "training"
    assert secret["immutable"] is True
    assert base64.b64decode(secret["data"]["HF_TOKEN"]) == b"hf_s3cr3t_value"
    assert list(secret["data"]) == ["HF_TOKEN"]  # only secret variables go there
    assert container_env(manifests)["HF_TOKEN"] == "hf_s3cr3t_value"


def test_secret_names_that_are_not_valid_keys_get_stable_keys():
    env = [Resolved("my token", "a", "user", (), True), Resolved("var-1", "b", "user", (), True),
           Resolved("TOKEN", "c", "user", (), True)]
    manifests = build(workload(env), SETTINGS)
    assert_valid(manifests.secret)
    assert len(manifests.secret.data) == 3
    assert container_env(manifests) == {"my token": "a", "var-1": "b", "TOKEN": "c", **ONE}


def test_no_secret_without_secret_variables():
    env = [Resolved("A", "1", "user")]
    assert build(workload(env), SETTINGS).secret is None


def test_pod_spec_refuses_secret_variables_without_a_secret():
    with pytest.raises(ValueError, match="secret"):
        pod_spec(workload(), None)


def test_pod_spec_makes_a_valid_bare_pod():
    w = workload()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": job_name(w)},
           "spec": to_dict(pod_spec(w, secret_name(w)))}
    assert_valid(pod)


def test_names_are_stable_per_revision_and_valid():
    first, again, second = workload(), workload(), workload(revision=2)
    assert job_name(first) == job_name(again) == first.run_name
    assert job_name(second) != job_name(first)
    assert secret_name(second) != secret_name(first)
    for w in (first, second):
        assert len(job_name(w)) <= 63 and DNS_LABEL.fullmatch(job_name(w))
        assert len(secret_name(w)) <= 253


@pytest.mark.parametrize("task_id", ["Task_ID.With Spaces/and:colons", "-x-", "é" * 40,
                                     "A" * 300, "UPPER"])
def test_awkward_task_ids_still_make_valid_distinct_names(task_id):
    # Task ids are uuid4 hex today (run_name's 20 characters are then unique enough);
    # anything else is sanitised and the full id hashed into the name.
    w = workload(task_id=task_id, revision=123456)
    manifests = build(w, SETTINGS)
    job = assert_valid(manifests.job)
    assert len(job_name(w)) <= 63 and DNS_LABEL.fullmatch(job_name(w))
    assert job_name(w) != job_name(workload(task_id=task_id + "x", revision=123456))
    assert job_name(w) != job_name(workload(task_id=task_id, revision=123457))
    assert LABEL_VALUE.fullmatch(job["metadata"]["labels"][LABEL_TASK_ID])
    assert job["metadata"]["annotations"][ANNOTATION_TASK_ID] == task_id


def test_labels_and_annotations():
    w = workload()
    manifests = build(w, SETTINGS)
    job, secret = assert_valid(manifests.job), assert_valid(manifests.secret)
    expected = {LABEL_TASK_ID: TASK_ID, LABEL_REVISION: "1", LABEL_POLICY_VERSION: "7",
                "app.kubernetes.io/managed-by": "taskenv"}
    assert job["metadata"]["labels"] == expected
    assert job["spec"]["template"]["metadata"]["labels"] == expected
    assert secret["metadata"]["labels"] == expected
    assert job["metadata"]["annotations"][ANNOTATION_TASK_ID] == TASK_ID
    assert job["metadata"]["annotations"]["taskenv.io/task-name"] == "resnet50 sweep"


def test_label_value_truncates_and_sanitises():
    assert label_value("a" * 80) == "a" * 63
    assert label_value("__x y.z__") == "x-y.z"
    assert label_value("ok-id_1.2") == "ok-id_1.2"


def test_image_workdir_and_resources():
    container = assert_valid(build(workload(), SETTINGS).job)[
        "spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.local/train:1.0"
    assert container["workingDir"] == "/workspace"
    assert container["resources"] == {"requests": {"cpu": "4", "memory": "16Gi"},
                                      "limits": {GPU_RESOURCE: "2"}}


def test_no_gpu_limit_without_gpus_and_no_resources_without_any():
    cpu_only = assert_valid(build(workload(resources=Resources(cpu="1")), SETTINGS).job)
    assert cpu_only["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1"}}
    bare = assert_valid(build(workload(resources=Resources(), workdir=None), SETTINGS).job)
    container = bare["spec"]["template"]["spec"]["containers"][0]
    assert "resources" not in container and "workingDir" not in container


HOSTILE_ARGV = ("it's", 'say "hi"', "a b", "x;y", "$(HOME)", "$$", "`id`", "&&", "|", "\n", "")


def test_steps_run_in_order_with_each_argv_quoted():
    steps = (("python", "-c", "pass", *HOSTILE_ARGV), ("echo", "done"))
    w = workload(steps=steps)
    command = assert_valid(build(w, SETTINGS).job)["spec"]["template"]["spec"][
        "containers"][0]["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    script = kube_expand(command[2], {"HOME": "/root"})
    assert script == " && ".join(shlex.join(s) for s in steps)
    for step in steps:
        assert shlex.split(shlex.join(step)) == list(step)


def test_no_env_value_appears_in_the_command():
    w = workload()
    command = build(w, SETTINGS).job.spec.template.spec.containers[0].command
    for var in w.env:
        if len(var.value) > 3:
            assert var.value not in " ".join(command)


def test_a_real_shell_gets_the_argv_and_env_exactly_as_typed(tmp_path):
    """Play the kubelet: expand as Kubernetes would, then exec the command with that env."""
    echo = "import json, os, sys; print(json.dumps([sys.argv[1:], dict(os.environ)]))"
    steps = ((sys.executable, "-c", echo, *HOSTILE_ARGV), ("true",))
    env = [Resolved("TASK_ID", TASK_ID, "platform")]
    env += [Resolved(f"V{i}", value, "user") for i, value in enumerate(HOSTILE_VALUES)]
    env += [Resolved("PATH", os.environ["PATH"], "default"),
            Resolved("S", "$(TASK_ID) secret", "protected", (), True)]
    manifests = build(workload(env, steps=steps), SETTINGS)
    container_spec = manifests.job.spec.template.spec.containers[0]
    env_now = container_env(manifests)
    command = [kube_expand(part, env_now) for part in container_spec.command]
    done = subprocess.run(command, env=env_now, cwd=tmp_path, capture_output=True, text=True,
                          check=True)
    argv, seen = json.loads(done.stdout)
    assert argv == list(HOSTILE_ARGV)
    for var in env:
        assert seen[var.name] == var.value


def test_files_become_a_configmap_and_an_init_container_copying_them_into_a_writable_dir():
    from shared.task.files import TaskFile
    from shared.task.manifest import WORK_DIR, files_name, for_display
    files = (TaskFile("prepare.sh", "echo $(HOME) `id`\n", 0o755),
             TaskFile("conf/$(X) a.yaml", "lr: 1\n"))
    w = replace(workload(), workdir="runs/exp1", files=files)
    built = build(w, ManifestSettings())
    job, cm = assert_valid(built.job), assert_valid(built.config_map)
    assert cm["metadata"]["name"] == files_name(w) and cm["immutable"] is True
    assert cm["data"] == {"file-0": "echo $(HOME) `id`\n", "file-1": "lr: 1\n"}
    spec = job["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    task = spec["containers"][0]
    assert task["workingDir"] == f"{WORK_DIR}/runs/exp1"
    assert task["volumeMounts"] == [{"name": "work", "mountPath": WORK_DIR}]
    assert {v["name"] for v in spec["volumes"]} == {"files", "work"}
    assert "emptyDir" in [v for v in spec["volumes"] if v["name"] == "work"][0]
    # The paths are arguments of a fixed script, escaped for Kubernetes' $(VAR) expansion.
    args = [kube_expand(a, {}) for a in init["command"][4:]]
    assert args == ["/taskenv/files/file-0", f"{WORK_DIR}/runs/exp1/prepare.sh", "755",
                    "/taskenv/files/file-1", f"{WORK_DIR}/runs/exp1/conf/$(X) a.yaml", "644"]
    assert "env" not in init  # no variable, no secret reaches the copy
    shown = for_display(built)
    assert shown["config_map"]["data"]["file-0"].startswith("echo")


def test_a_task_without_files_has_no_configmap_and_keeps_its_workdir():
    built = build(workload(), ManifestSettings())
    assert built.config_map is None
    spec = to_dict(built.job)["spec"]["template"]["spec"]
    assert "initContainers" not in spec and "volumes" not in spec


def test_a_task_s_files_go_into_its_size_capped_home_copied_by_a_held_in_container():
    from shared.task.files import TaskFile

    w = replace(workload(), files=(TaskFile("prepare.sh", "echo hi\n", 0o755),))
    spec = to_dict(build(w, LIMITED).job)["spec"]["template"]["spec"]
    assert [v["name"] for v in spec["volumes"]].count("work") == 1
    work = next(v for v in spec["volumes"] if v["name"] == "work")
    assert work["emptyDir"]["sizeLimit"] == str(256 << 20)
    (copier,) = spec["initContainers"]
    assert copier["securityContext"]["runAsNonRoot"] is True
    assert copier["resources"] == spec["containers"][0]["resources"]
    assert [m["name"] for m in spec["containers"][0]["volumeMounts"]].count("work") == 1


# --- a task of several replicas ----------------------------------------------------------

def test_replicas_make_an_indexed_job_that_fails_fast_with_a_headless_service():
    w = replace(workload(), replicas=3)
    manifests = build(w, SETTINGS)
    job = assert_valid(manifests.job)
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == (
        "Indexed", 3, 3)
    assert spec["backoffLimit"] == 0
    assert spec["podFailurePolicy"]["rules"] == [{"action": "FailJob", "onExitCodes": {
        "containerName": "task", "operator": "NotIn", "values": [0]}}]
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == job_name(w) and pod["restartPolicy"] == "Never"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    for name in ("TASK_REPLICA", "RANK", "PET_NODE_RANK"):
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["MASTER_ADDR"]["value"] == f"{job_name(w)}-0.{job_name(w)}"
    assert env["PET_MASTER_ADDR"]["value"] == env["MASTER_ADDR"]["value"]
    assert (env["WORLD_SIZE"]["value"], env["PET_NNODES"]["value"]) == ("3", "3")
    service = assert_valid(manifests.service)
    assert service["metadata"]["name"] == job_name(w)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    labels = spec["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in service["spec"]["selector"].items())


def test_replicas_get_a_network_policy_of_their_own_pods_and_dns_only():
    w = replace(workload(), replicas=2)
    policy = assert_valid(build(w, SETTINGS).network_policy)
    own = {"podSelector": {"matchLabels": {LABEL_TASK_ID: label_value(w.task_id),
                                           LABEL_REVISION: "1"}}}
    assert policy["spec"]["podSelector"] == own["podSelector"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [{"from": [own]}]
    assert policy["spec"]["egress"] == [{"to": [own]}, {"ports": [
        {"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]


def test_one_replica_stays_a_plain_job():
    manifests = build(workload(), SETTINGS)
    assert manifests.service is None and manifests.network_policy is None
    assert "completionMode" not in to_dict(manifests.job)["spec"]


def test_replicas_with_files_each_work_in_the_files_directory():
    from shared.task.files import TaskFile
    from shared.task.manifest import WORK_DIR, replicas_pod_spec, work_dir
    w = replace(workload(), replicas=2, files=(TaskFile("run.sh", "echo hi\n", 0o755),))
    job = assert_valid(build(w, SETTINGS).job)["spec"]["template"]["spec"]
    assert job["initContainers"] and job["containers"][0]["workingDir"] == work_dir(w)
    pod = to_dict(replicas_pod_spec(w, "env"))  # podman's: one pod, a container per replica
    assert [c["name"] for c in pod["containers"]] == ["task-0", "task-1"]
    assert all(c["volumeMounts"] == [{"name": "work", "mountPath": WORK_DIR}]
               for c in pod["containers"])
