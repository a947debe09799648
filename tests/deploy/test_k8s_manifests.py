"""The Kubernetes deployment (deploy/k8s): schema-valid, least privilege, settings that exist.

Every kustomization is rendered by kustomize itself (``kubectl kustomize``, as
``kubectl apply -k`` would), patches and all.  KEDA's objects are custom resources the
validator has no schema for: they are checked against what they point at instead.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import fakeredis
import kubernetes_validate
import pytest
import redis
import yaml

from shared.config import PREFIX, Settings
from shared.secrets import Cipher
from tests.deploy import doc_blocks
from workers.celery_app import make_celery
from workers.localstack import worker_argv
from workers.queues import QUEUES

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
OVERLAYS = {"hpa": K8S, "keda": K8S / "keda"}
# The oldest Kubernetes minor we support and the newest the validator ships.
KUBERNETES_VERSIONS = ("1.32.0", "1.37.0")
CUSTOM_GROUPS = {"keda.sh"}  # custom resources: checked structurally below
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "images", "patches"}
EXAMPLE = K8S / "overlays" / "example"  # what an operator copies and edits
SERVICE_NS, TASK_NS = "taskenv", "taskenv-tasks"
KUBE_API_ACCOUNTS = {"taskenv-launch", "taskenv-reconciler"}
IMAGE = "taskenv"  # the name deploy/Dockerfile's image has in the manifests

Doc = dict[str, Any]


def kustomization(directory: Path) -> Doc:
    data = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert isinstance(data, dict)
    return data


@functools.cache
def _rendered(directory: Path) -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (1.32 or later, kustomize built in) renders the manifests"
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def render(directory: Path) -> list[Doc]:
    """Every object ``kubectl apply -k directory`` would apply, as kustomize renders it."""
    return [d for d in yaml.safe_load_all(_rendered(directory)) if d is not None]


@pytest.fixture(scope="module", params=sorted(OVERLAYS))
def objects(request: pytest.FixtureRequest) -> list[Doc]:
    return render(OVERLAYS[request.param])


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[Doc], kind: str, name: str, namespace: str = SERVICE_NS) -> Doc:
    found = [d for d in of_kind(docs, kind)
             if d["metadata"]["name"] == name and d["metadata"].get("namespace") == namespace]
    assert len(found) == 1, f"{kind} {namespace}/{name}: {len(found)} found"
    return found[0]


def pod_templates(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """(workload, pod spec) for every Deployment and StatefulSet."""
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            yield doc, doc["spec"]["template"]["spec"]


def containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    for workload, spec in pod_templates(docs):
        for container in spec.get("initContainers", []) + spec["containers"]:
            yield workload, container


def pod_labels(workload: Doc) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"]["labels"])


def stage_deployments(docs: list[Doc]) -> dict[str, Doc]:
    """The Celery worker Deployments, by the queue their command consumes."""
    out = {}
    for workload, container in containers(docs):
        command = container.get("command", [])
        if "worker" in command and "-Q" in command:
            out[command[command.index("-Q") + 1]] = workload
    return out


def unlisted(repo: Path) -> list[str]:
    """What is wrong with the kustomizations ``repo`` ships under deploy/k8s: a key the
    tests do not read, a listed path that is missing, a manifest none lists.  An overlay
    of the reader's own in the tree (deploy/k8s/README.md, step 2) is theirs to check."""
    found = []
    files = doc_blocks.shipped(repo, "deploy/k8s")
    for kfile in (p for p in files if p.name == "kustomization.yaml"):
        directory = kfile.parent
        data = kustomization(directory)
        if not set(data) <= KUSTOMIZATION_KEYS:
            found.append(f"{kfile}: {sorted(set(data) - KUSTOMIZATION_KEYS)}")
        listed = {(directory / r).resolve() for r in data.get("resources", [])}
        listed |= {(directory / p["path"]).resolve() for p in data.get("patches", [])
                   if "path" in p}
        found += [f"{kfile} lists a missing path {p}" for p in sorted(listed) if not p.exists()]
        manifests = {p.resolve() for p in files if p.parent == directory
                     and p.suffix == ".yaml" and p.name != "kustomization.yaml"}
        found += [f"{kfile} does not list {p}" for p in sorted(manifests - listed)]
    found += [f"{p} is in no kustomization" for p in files if p.suffix == ".yaml"
              and not (p.parent / "kustomization.yaml").exists()]
    return found


def test_every_file_is_listed_in_its_kustomization_and_nothing_else_is_used():
    assert unlisted(K8S.parents[1]) == []


def git_copy(repo: Path) -> Path:
    """A checkout holding what ``repo`` ships under deploy/ (tracked, so as git sees it)."""
    for path in doc_blocks.shipped(REPO, "deploy"):
        target = repo / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    for argv in (["init", "-q"], ["add", "deploy"]):
        subprocess.run(["git", *argv], cwd=repo, check=True, capture_output=True, timeout=60)
    return repo


def follow_step_2_and_the_slurm_component(repo: Path) -> Path:
    """What deploy/k8s/README.md has a reader do in their checkout: the example overlay
    copied to overlays/prod, then the Slurm component added to it."""
    overlays = repo / "deploy" / "k8s" / "overlays"
    shutil.copytree(overlays / "example", overlays / "prod")
    with (overlays / "prod" / "kustomization.yaml").open("a") as f:
        f.write("components:\n  - ../../../slurm/k8s\n")
    return overlays / "prod"


def test_a_readers_own_overlay_in_the_tree_is_theirs_and_not_checked(tmp_path):
    repo = git_copy(tmp_path / "checkout")
    prod = follow_step_2_and_the_slurm_component(repo)
    (prod / "extra.yaml").write_text("kind: ConfigMap\n")  # theirs, listed or not
    assert unlisted(repo) == []
    assert prod / "kustomization.yaml" not in doc_blocks.shipped(repo, "deploy/k8s")
    # Not vacuous: a manifest beside the shipped ones, tracked or not, is still checked.
    (repo / "deploy" / "k8s" / "base" / "forgotten.yaml").write_text("kind: ConfigMap\n")
    assert [p for p in unlisted(repo) if "does not list" in p and "forgotten.yaml" in p]


def test_the_overlays_differ_only_in_how_the_stages_scale():
    hpa, keda = (render(OVERLAYS[name]) for name in ("hpa", "keda"))
    autoscaling = {"HorizontalPodAutoscaler", "ScaledObject", "TriggerAuthentication"}
    assert [d for d in hpa if d["kind"] not in autoscaling] == \
        [d for d in keda if d["kind"] not in autoscaling]
    # Two autoscalers driving one Deployment fight: KEDA makes its own HPA.
    assert not of_kind(keda, "HorizontalPodAutoscaler")
    assert not of_kind(hpa, "ScaledObject")


def test_no_object_is_defined_twice(objects):
    keys = Counter((d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
                   for d in objects)
    assert [k for k, n in keys.items() if n > 1] == []


@pytest.mark.slow  # every object against each version's full schema; make test runs it
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_builtin_object_passes_the_strict_schema(objects, version):
    checked = 0
    for doc in objects:
        if doc["apiVersion"].split("/")[0] in CUSTOM_GROUPS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    assert checked >= 20


def test_only_keda_objects_are_custom_resources(objects):
    custom = {d["kind"] for d in objects if d["apiVersion"].split("/")[0] in CUSTOM_GROUPS}
    assert custom <= {"ScaledObject", "TriggerAuthentication"}


def test_objects_live_in_the_two_namespaces_the_manifests_create(objects):
    namespaces = {d["metadata"]["name"] for d in of_kind(objects, "Namespace")}
    assert namespaces == {SERVICE_NS, TASK_NS}
    for doc in objects:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") in namespaces, doc["metadata"]["name"]


def without_node_name(argv: list[str]) -> list[str]:
    at = argv.index("-n")
    return argv[1:at] + argv[at + 2:]


def test_there_is_one_worker_deployment_per_queue_started_as_make_run_starts_it(objects):
    stages = stage_deployments(objects)
    assert set(stages) == set(QUEUES)
    for queue, workload in stages.items():
        command = workload["spec"]["template"]["spec"]["containers"][0]["command"]
        concurrency, pool = command[command.index("-c") + 1], command[command.index("-P") + 1]
        assert command[0] == "python"
        assert without_node_name(command) == \
            without_node_name(worker_argv(queue, int(concurrency), pool))
        assert command[command.index("-n") + 1] == f"{queue}@%h"  # %h: the pod's name
        assert workload["metadata"]["name"] == f"taskenv-{queue}"
    reconciler = named(objects, "Deployment", "taskenv-reconciler")
    assert reconciler["spec"]["template"]["spec"]["containers"][0]["command"] == \
        ["python", "-m", "workers.reconcile"]


def test_every_workload_selects_its_own_pods(objects):
    for workload, _ in pod_templates(objects):
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selector.items() <= pod_labels(workload).items(), workload["metadata"]["name"]
    selectors = [tuple(sorted(w["spec"]["selector"]["matchLabels"].items()))
                 for w, _ in pod_templates(objects)]
    assert len(selectors) == len(set(selectors)), "two workloads select the same pods"


def test_a_container_that_serves_http_has_liveness_and_readiness_probes(objects):
    for workload, container in containers(objects):
        if not container.get("ports"):
            assert "readinessProbe" not in container, "a probe on a port nobody serves"
            continue
        port_names = {p["name"] for p in container["ports"]}
        for probe in ("livenessProbe", "readinessProbe"):
            assert probe in container, f"{workload['metadata']['name']} has no {probe}"
            check = container[probe].get("httpGet") or container[probe]["tcpSocket"]
            assert check["port"] in port_names
    api = named(objects, "Deployment", "taskenv-api")["spec"]["template"]["spec"]
    assert api["containers"][0]["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_service_reaches_the_api_pods_on_their_http_port(objects):
    service = named(objects, "Service", "taskenv-api")
    api = named(objects, "Deployment", "taskenv-api")
    assert service["spec"]["selector"].items() <= pod_labels(api).items()
    ports = {p["name"]: p["containerPort"]
             for p in api["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)
    config = named(objects, "ConfigMap", "taskenv-config")["data"]
    assert ports["http"] == int(config["TASKENV_PORT"])
    assert config["TASKENV_HOST"] == "0.0.0.0"  # waitress binds loopback by default


def test_no_pod_runs_privileged_or_as_root_and_every_container_is_locked_down(objects):
    for workload, spec in pod_templates(objects):
        name = workload["metadata"]["name"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), name
    for workload, container in containers(objects):
        context = container["securityContext"]
        where = f"{workload['metadata']['name']}/{container['name']}"
        assert context.get("privileged", False) is False, where
        assert context["allowPrivilegeEscalation"] is False, where
        assert context["readOnlyRootFilesystem"] is True, where
        assert context["capabilities"] == {"drop": ["ALL"]}, where
        assert "add" not in context["capabilities"], where


def test_every_container_has_cpu_and_memory_requests_and_limits(objects):
    for workload, container in containers(objects):
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][bound]), \
                f"{workload['metadata']['name']}: {bound}"


def test_taskenv_containers_run_the_dockerfile_image_with_the_settings(objects):
    for workload, container in containers(objects):
        if container["image"].split(":")[0] != IMAGE:
            continue
        sources = [next(iter(s.values()))["name"] for s in container["envFrom"]]
        api_only = ["taskenv-api"] if workload["metadata"]["name"] == "taskenv-api" else []
        assert sources == ["taskenv-config", "taskenv-settings", *api_only], \
            workload["metadata"]["name"]
    names = {w["metadata"]["name"] for w, c in containers(objects)
             if c["image"].split(":")[0] == IMAGE}
    assert names == {"taskenv-api", "taskenv-reconciler"} | {f"taskenv-{q}" for q in QUEUES}


# --- settings ------------------------------------------------------------------------------

def setting_names() -> set[str]:
    return {PREFIX + name.upper() for name in Settings.__dataclass_fields__}


def test_every_configmap_and_settings_secret_key_is_a_real_setting(objects):
    config = named(objects, "ConfigMap", "taskenv-config")["data"]
    secret = {**named(objects, "Secret", "taskenv-settings")["stringData"],
              **named(objects, "Secret", "taskenv-api")["stringData"]}
    assert set(config) - setting_names() == set()
    assert set(secret) - setting_names() == set()
    assert not set(config) & set(secret), "a setting defined twice"
    settings = Settings.from_env({**config, **secret})  # ints parse, names match fields
    assert settings.launcher == "kubernetes"
    assert settings.kube_namespace == TASK_NS


def test_the_secrets_hold_the_secret_settings_and_nothing_secret_is_in_the_configmap(objects):
    secret = named(objects, "Secret", "taskenv-settings")["stringData"]
    assert set(secret) == {"TASKENV_SECRET_KEYS", "TASKENV_REDIS_URL"}
    api_only = named(objects, "Secret", "taskenv-api")["stringData"]
    assert set(api_only) == {"TASKENV_ADMIN_TOKEN", "TASKENV_SESSION_SECRET"}
    config = named(objects, "ConfigMap", "taskenv-config")["data"]
    assert not any(word in key for key in config for word in ("SECRET", "TOKEN", "PASSWORD"))
    assert "TASKENV_REDIS_URL" not in config  # it carries the password


def test_the_placeholders_are_marked_and_the_api_refuses_to_start_on_them(objects):
    for secret in of_kind(objects, "Secret"):
        assert "taskenv.io/placeholder" in secret["metadata"]["annotations"]
        assert all("REPLACE-ME" in value for value in secret["stringData"].values())
    keys = named(objects, "Secret", "taskenv-settings")["stringData"]["TASKENV_SECRET_KEYS"]
    with pytest.raises(ValueError):
        Cipher.from_setting(keys)


def test_the_redis_url_has_the_redis_servers_password_and_points_at_its_service(objects):
    url = urlsplit(named(objects, "Secret", "taskenv-settings")["stringData"]["TASKENV_REDIS_URL"])
    password = named(objects, "Secret", "taskenv-redis")["stringData"]["password"]
    assert url.password == password
    service = named(objects, "Service", "taskenv-redis")
    assert url.hostname == f"taskenv-redis.{SERVICE_NS}.svc"
    assert url.port == service["spec"]["ports"][0]["port"]
    assert named(objects, "Secret", "taskenv-redis")["stringData"]["auth.conf"] == \
        f"requirepass {password}"


# --- the Redis server's config -------------------------------------------------------------

def redis_pod(objects: list[Doc]) -> Doc:
    return dict(named(objects, "StatefulSet", "taskenv-redis")["spec"]["template"]["spec"])


def mounted_file(pod: Doc, container: Doc, path: str) -> tuple[Doc, str]:
    """The volume a container sees ``path`` in, and the file's name (key) in that volume."""
    for mount in container["volumeMounts"]:
        directory = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(directory):
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            assert mount.get("readOnly") is True, path
            return volume, path.removeprefix(directory)
    raise AssertionError(f"nothing is mounted at {path}")


def redis_config(objects: list[Doc]) -> tuple[str, Path, str]:
    """The config file redis-server is started with, the file it includes, and that
    file's text (from the Secret)."""
    pod = redis_pod(objects)
    (container,) = pod["containers"]
    assert container["args"][0] == "redis-server" and len(container["args"]) == 2
    volume, key = mounted_file(pod, container, container["args"][1])
    config = named(objects, "ConfigMap", volume["configMap"]["name"])["data"][key]
    (include,) = [line.split()[1] for line in config.splitlines()
                  if line.startswith("include ")]
    volume, key = mounted_file(pod, container, include)
    items = {i["path"]: i["key"] for i in volume["secret"].get("items", [])}
    auth = named(objects, "Secret", volume["secret"]["secretName"])["stringData"]
    return config, Path(include), auth[items.get(key, key)]


def test_redis_gets_its_settings_and_password_from_mounted_files(objects):
    config, _, auth = redis_config(objects)
    settings = dict(line.split(maxsplit=1) for line in config.splitlines()
                    if line and not line.startswith("#"))
    assert settings["appendonly"] == "yes" and settings["appendfsync"] == "everysec"
    assert settings["maxmemory-policy"] == "noeviction"
    assert settings["hash-max-ziplist-value"] == "1024"
    # A ceiling Redis reaches before the container's memory limit kills it: taskenv then
    # answers 503 store_full instead of losing Redis.
    (redis_container,) = [c for w, c in containers(objects)
                          if w["metadata"]["name"] == "taskenv-redis"]
    limit = redis_container["resources"]["limits"]["memory"]
    assert settings["maxmemory"].endswith("mb") and limit.endswith("Gi")
    assert 0 < int(settings["maxmemory"][:-2]) * 2**20 <= 0.8 * int(limit[:-2]) * 2**30
    assert settings["dir"] == "/data" and "requirepass" not in settings
    password = named(objects, "Secret", "taskenv-redis")["stringData"]["password"]
    assert auth == f"requirepass {password}"


def test_no_container_has_a_secret_on_its_command_line_or_the_redis_server_in_its_env(
        objects):
    secret_vars = {e["name"] for _, c in containers(objects) for e in c.get("env", [])
                   if "secretKeyRef" in e.get("valueFrom", {})}
    for workload, container in containers(objects):
        probes = [container.get(p, {}).get("exec", {}).get("command", [])
                  for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        argv = " ".join(container.get("command", []) + container.get("args", [])
                        + [word for probe in probes for word in probe])
        where = f"{workload['metadata']['name']}/{container['name']}"
        assert "requirepass" not in argv and "REDISCLI_AUTH" not in argv, where
        assert not any(f"$({name})" in argv for name in secret_vars), where
        assert not {"-a", "--pass", "--askpass"} & set(argv.split()), where
    (redis_server,) = redis_pod(objects)["containers"]
    assert not redis_server.get("env") and not redis_server.get("envFrom")


@pytest.mark.integration
def test_the_redis_config_starts_a_real_redis_that_wants_the_password(objects, tmp_path):
    """The ConfigMap's file and the Secret's line, as mounted, read by redis-server itself."""
    config, include, auth = redis_config(objects)
    (tmp_path / include.name).write_text(auth + "\n")
    conf = tmp_path / "redis.conf"  # the pod's paths, here
    conf.write_text(config.replace(f"include {include}", f"include {tmp_path / include.name}")
                    .replace("dir /data\n", f"dir {tmp_path}\n"))
    socket = tmp_path / "redis.sock"
    server = subprocess.Popen([shutil.which("redis-server") or "redis-server", str(conf),
                               "--port", "0", "--unixsocket", str(socket)],
                              stdout=subprocess.DEVNULL)
    try:
        password = auth.removeprefix("requirepass ")
        client = redis.Redis(unix_socket_path=str(socket), password=password,
                             decode_responses=True)
        deadline = time.monotonic() + 10
        while not socket.exists() and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.05)
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert client.config_get("hash-max-listpack-value") == {
            "hash-max-listpack-value": "1024"}  # the newer name of hash-max-ziplist-value
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(unix_socket_path=str(socket)).ping()
    finally:
        server.terminate()
        server.wait(10)


# --- RBAC ----------------------------------------------------------------------------------

def test_nothing_is_granted_cluster_wide(objects):
    assert not of_kind(objects, "ClusterRole")
    assert not of_kind(objects, "ClusterRoleBinding")


def test_roles_live_in_the_task_namespace_and_grant_only_what_the_launcher_uses(objects):
    roles = of_kind(objects, "Role")
    assert roles and all(r["metadata"]["namespace"] == TASK_NS for r in roles)
    granted = {(group, resource): set(rule["verbs"])
               for role in roles for rule in role["rules"]
               for group in rule["apiGroups"] for resource in rule["resources"]}
    assert set(granted) == {("batch", "jobs"), ("", "pods"), ("", "pods/log"), ("", "secrets"),
                            ("", "configmaps"), ("", "services"),
                            ("networking.k8s.io", "networkpolicies")}
    assert granted[("", "configmaps")] == {"create", "patch", "delete"}  # a task's files
    assert granted[("batch", "jobs")] >= {"create", "get", "list", "watch"}
    # patch: ownerReferences to the Job (a task of several replicas' Service and policy too)
    for owned in (("", "secrets"), ("", "services"), ("networking.k8s.io", "networkpolicies")):
        assert granted[owned] >= {"create", "patch", "delete"}
    assert "create" not in granted[("", "pods")]  # the Job controller makes the pods
    assert all("*" not in verbs for verbs in granted.values())


def test_only_the_launch_worker_and_the_reconciler_are_bound_to_a_role(objects):
    bindings = of_kind(objects, "RoleBinding")
    assert bindings and all(b["metadata"]["namespace"] == TASK_NS for b in bindings)
    subjects = {(s["kind"], s["namespace"], s["name"]) for b in bindings for s in b["subjects"]}
    assert subjects == {("ServiceAccount", SERVICE_NS, name) for name in KUBE_API_ACCOUNTS}
    roles = {r["metadata"]["name"] for r in of_kind(objects, "Role")}
    assert all(b["roleRef"]["kind"] == "Role" and b["roleRef"]["name"] in roles
               for b in bindings)


def test_pods_without_kubernetes_rights_get_no_token(objects):
    accounts = {a["metadata"]["name"]: a for a in of_kind(objects, "ServiceAccount")}
    users = {}
    for workload, spec in pod_templates(objects):
        account = spec.get("serviceAccountName", "default")
        users[workload["metadata"]["name"]] = account
        if account not in KUBE_API_ACCOUNTS:
            assert spec["automountServiceAccountToken"] is False, workload["metadata"]["name"]
    assert users["taskenv-launch"] == "taskenv-launch"
    assert users["taskenv-reconciler"] == "taskenv-reconciler"
    for name, account in accounts.items():
        assert account["automountServiceAccountToken"] is (name in KUBE_API_ACCOUNTS), name


# --- availability and autoscaling ----------------------------------------------------------

def test_every_taskenv_role_has_a_disruption_budget_that_a_drain_can_satisfy(objects):
    deployments = of_kind(objects, "Deployment")
    minimum = {d["metadata"]["name"]: d["spec"].get("replicas") for d in deployments}
    for scaler in of_kind(objects, "HorizontalPodAutoscaler"):
        minimum[scaler["spec"]["scaleTargetRef"]["name"]] = scaler["spec"]["minReplicas"]
    for scaler in of_kind(objects, "ScaledObject"):
        minimum[scaler["spec"]["scaleTargetRef"]["name"]] = scaler["spec"]["minReplicaCount"]
    covered = set()
    for budget in of_kind(objects, "PodDisruptionBudget"):
        selector = budget["spec"]["selector"]["matchLabels"].items()
        matched = [d["metadata"]["name"] for d in deployments
                   if selector <= pod_labels(d).items()]
        assert len(matched) == 1, budget["metadata"]["name"]
        assert budget["spec"]["minAvailable"] < minimum[matched[0]], matched[0]
        covered.add(matched[0])
    assert covered == set(minimum)


def test_each_stage_has_exactly_one_autoscaler_and_does_not_fix_its_replicas(objects):
    stages = stage_deployments(objects)
    scalers = of_kind(objects, "HorizontalPodAutoscaler") + of_kind(objects, "ScaledObject")
    targets = [s["spec"]["scaleTargetRef"]["name"] for s in scalers]
    assert sorted(targets) == sorted(d["metadata"]["name"] for d in stages.values())
    for workload in stages.values():
        assert "replicas" not in workload["spec"], "re-applying would reset the autoscaler"


def test_cpu_autoscalers_target_deployments_that_request_cpu(objects):
    for scaler in of_kind(objects, "HorizontalPodAutoscaler"):
        target = named(objects, "Deployment", scaler["spec"]["scaleTargetRef"]["name"])
        assert scaler["spec"]["scaleTargetRef"]["kind"] == "Deployment"
        assert [m["resource"]["name"] for m in scaler["spec"]["metrics"]] == ["cpu"]
        assert "cpu" in target["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]


@pytest.fixture(scope="module")
def queue_keys() -> dict[str, str]:
    """The Redis key of each queue, as kombu really writes it: send one message per stage."""
    server = fakeredis.FakeServer()
    config = yaml.safe_load((K8S / "base" / "configmap.yaml").read_text())["data"]

    def fake_pool(self: object, asynchronous: bool = False) -> redis.ConnectionPool:
        return redis.ConnectionPool(connection_class=fakeredis.FakeRedisConnection, server=server)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("kombu.transport.redis.Channel._get_pool", fake_pool)
        celery = make_celery(Settings(key_prefix=config["TASKENV_KEY_PREFIX"]))
        keys = {}
        for queue in QUEUES:
            before = set(fakeredis.FakeRedis(server=server).keys())
            celery.send_task(f"taskenv.{queue}", args=["0" * 32, 1], queue=queue)
            lists = [k.decode() for k in set(fakeredis.FakeRedis(server=server).keys()) - before
                     if fakeredis.FakeRedis(server=server).type(k) == b"list"]
            assert len(lists) == 1, lists
            keys[queue] = lists[0]
    return keys


def test_keda_scales_each_stage_on_the_list_kombu_keeps_its_queue_in(queue_keys):
    docs = render(OVERLAYS["keda"])
    stages = {w["metadata"]["name"]: q for q, w in stage_deployments(docs).items()}
    scaled = of_kind(docs, "ScaledObject")
    assert len(scaled) == len(QUEUES)
    for scaler in scaled:
        target = scaler["spec"]["scaleTargetRef"]["name"]
        named(docs, "Deployment", target, scaler["metadata"]["namespace"])
        assert target in stages, f"{target} is not a stage"
        (trigger,) = scaler["spec"]["triggers"]
        assert trigger["type"] == "redis"
        assert trigger["metadata"]["listName"] == queue_keys[stages[target]]
        assert int(trigger["metadata"]["listLength"]) > 0
        assert scaler["spec"]["minReplicaCount"] >= 1  # /readyz wants a consumer per queue


def test_keda_reaches_the_redis_the_stages_use_with_its_password():
    objects = render(OVERLAYS["keda"])
    url = urlsplit(named(objects, "Secret", "taskenv-settings")["stringData"]["TASKENV_REDIS_URL"])
    for scaler in of_kind(objects, "ScaledObject"):
        (trigger,) = scaler["spec"]["triggers"]
        assert trigger["metadata"]["address"] == f"{url.hostname}:{url.port}"
        assert trigger["metadata"]["databaseIndex"] == url.path.strip("/")
        auth = named(objects, "TriggerAuthentication", trigger["authenticationRef"]["name"])
        (ref,) = auth["spec"]["secretTargetRef"]
        assert ref["parameter"] == "password"
        assert named(objects, "Secret", ref["name"])["stringData"][ref["key"]] == url.password


# --- the Role, the launcher's calls and the docs say the same ------------------------------

LAUNCHER = (Path(__file__).resolve().parents[2] / "workers" / "launchers" / "kubernetes"
            / "launcher.py")
CALL = re.compile(r"self\.(batch|core|networking)\.(create|read|list|patch|delete)"
                  r"_namespaced_(\w+?)\b")
VERB = {"create": "create", "read": "get", "list": "list", "patch": "patch",
        "delete": "delete"}
RESOURCE = {"job": ("batch", "jobs"), "pod": ("", "pods"), "pod_log": ("", "pods/log"),
            "secret": ("", "secrets"), "config_map": ("", "configmaps"),
            "service": ("", "services"),
            "network_policy": ("networking.k8s.io", "networkpolicies")}
BY_PATH = re.compile(r'method="(GET|POST|PATCH|DELETE)", resource_path="([^"]+)"')
METHOD = {"GET": "read", "POST": "create", "PATCH": "patch", "DELETE": "delete"}
PATH_RESOURCE = {"/api/v1/namespaces/{namespace}/pods/{name}/log": ("", "pods/log")}
TABLE_ROW = re.compile(r"^\| `([a-z/]+)`(?: \(([\w.]+)\))? \| ([a-z, ]+) \|", re.MULTILINE)


def granted(objects: list[Doc]) -> dict[tuple[str, str], set[str]]:
    return {(group, resource): set(rule["verbs"])
            for role in of_kind(objects, "Role") for rule in role["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"]}


def launcher_calls() -> dict[tuple[str, str], set[str]]:
    """What workers/launchers/kubernetes/launcher.py asks the API server, as RBAC verbs: a list
    feeds an informer, which watches too; a request it makes by path (the pod log with
    ``sinceTime``, which the generated client does not take) by its method and path."""
    calls: dict[tuple[str, str], set[str]] = {}
    source = LAUNCHER.read_text()
    for _, action, kind in CALL.findall(source):
        verbs = {VERB[action]} | ({"watch"} if action == "list" else set())
        calls.setdefault(RESOURCE[kind], set()).update(verbs)
    for method, path in BY_PATH.findall(source):
        calls.setdefault(PATH_RESOURCE[path], set()).add(VERB[METHOD[method]])
    return calls


def documented(path: Path) -> dict[tuple[str, str], set[str]]:
    rows = TABLE_ROW.findall(path.read_text())
    assert rows, f"{path} has no permission table"
    return {(group, resource): {v.strip() for v in verbs.split(",")}
            for resource, group, verbs in rows}


def test_the_role_grants_exactly_what_the_launcher_calls():
    assert granted(render(K8S)) == launcher_calls()


@pytest.mark.parametrize("doc", [Path("docs/kubernetes.md"), Path("deploy/k8s/README.md")])
def test_the_documented_permissions_are_the_roles(doc: Path):
    assert documented(K8S.parents[1] / doc) == granted(render(K8S))


# --- the example overlay: what an operator copies -------------------------------------------

@pytest.mark.slow  # the overlay against each version's full schema; make test runs it
def test_the_example_overlay_renders_schema_valid_objects_with_an_ingress():
    objects = render(EXAMPLE)
    for version in KUBERNETES_VERSIONS:
        for doc in objects:
            kubernetes_validate.validate(doc, version, strict=True)
    (ingress,) = of_kind(objects, "Ingress")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    service = named(objects, "Service", backend["name"])
    assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    assert ingress["spec"]["tls"], "page cookies are Secure: the Ingress must serve TLS"


def test_the_example_overlay_changes_only_what_an_operator_sets():
    example, base = render(EXAMPLE), render(K8S)
    assert not of_kind(example, "Secret"), "an apply must not overwrite the real Secrets"
    images = {c["image"] for _, c in containers(example) if "taskenv" in c["image"]}
    assert images == {"registry.example.com/platform/taskenv:1.0.0"}
    config = named(example, "ConfigMap", "taskenv-config")["data"]
    assert config == {**named(base, "ConfigMap", "taskenv-config")["data"],
                      "TASKENV_KUBE_IMAGE": "registry.example.com/platform/train-base:2024.06"}
    same = {"Secret", "Ingress", "ConfigMap", "Deployment"}
    assert [d for d in example if d["kind"] not in same] == \
        [d for d in base if d["kind"] not in same]


def test_a_task_without_an_image_gets_one_a_cluster_can_pull():
    for directory in (K8S, K8S / "keda", EXAMPLE):
        image = named(render(directory), "ConfigMap", "taskenv-config")["data"][
            "TASKENV_KUBE_IMAGE"]
        assert not image.startswith("localhost/"), directory
    base = yaml.safe_load((K8S / "base" / "configmap.yaml").read_text())["data"]
    assert base["TASKENV_KUBE_IMAGE"] == Settings().kube_image


def test_the_walkthrough_creates_the_namespace_then_the_secrets_the_pods_read():
    readme = (K8S / "README.md").read_text()
    namespace_at = readme.index("kubectl apply -f deploy/k8s/base/namespaces.yaml")
    assert namespace_at < readme.index("kubectl -n taskenv create secret")
    assert readme.index("make k8s-image") < namespace_at < readme.index("taskenv login")
    recipe = readme[namespace_at:].split("```")[0]
    created = {}
    for block in recipe.split("create secret generic ")[1:]:
        name = block.split()[0]
        created[name] = set(re.findall(r"--from-literal=([A-Za-z_.]+)=", block))
    placeholders = {s["metadata"]["name"]: set(s["stringData"])
                    for s in of_kind(render(K8S), "Secret")}
    assert created == placeholders
    read = {ref["secretRef"]["name"] for _, c in containers(render(EXAMPLE))
            for ref in c.get("envFrom", []) if "secretRef" in ref}
    assert read <= set(created)


def test_the_makefile_builds_and_pushes_the_image_in_one_target():
    makefile = (K8S.parents[1] / "Makefile").read_text()
    target = makefile[makefile.index("\nk8s-image:"):].split("\n\n")[0]
    assert "deploy/image/build-taskenv.sh" in target and "podman push" in target


def test_each_deployment_gets_only_the_secrets_it_uses(objects):
    """The admin token and session secret reach the API alone: a worker (the launch worker
    runs users' steps) or the reconciler never holds them, by envFrom, env or volume."""
    for workload, spec in pod_templates(objects):
        name = workload["metadata"]["name"]
        used = {source["secretRef"]["name"] for c in spec["containers"]
                for source in c.get("envFrom", []) if "secretRef" in source}
        used |= {e["valueFrom"]["secretKeyRef"]["name"] for c in spec["containers"]
                 for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
        used |= {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
        if name == "taskenv-api":
            assert "taskenv-api" in used
        else:
            assert "taskenv-api" not in used, name


def _in_tasks(objects: Any, kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind
            and o["metadata"].get("namespace") == "taskenv-tasks"]


def test_the_tasks_namespace_has_limits_in_step_with_the_settings(objects):
    config = next(o for o in objects if o["kind"] == "ConfigMap"
                  and o["metadata"]["name"] == "taskenv-config")["data"]
    (limit_range,) = _in_tasks(objects, "LimitRange")
    container = next(lim for lim in limit_range["spec"]["limits"] if lim["type"] == "Container")
    assert container["default"] == {"cpu": config["TASKENV_TASK_DEFAULT_CPU"],
                                    "memory": config["TASKENV_TASK_DEFAULT_MEMORY"]}
    assert container["max"] == {"cpu": config["TASKENV_TASK_MAX_CPU"],
                                "memory": config["TASKENV_TASK_MAX_MEMORY"]}
    (quota,) = _in_tasks(objects, "ResourceQuota")
    assert {"requests.cpu", "requests.memory", "pods", "requests.nvidia.com/gpu"} <= set(
        quota["spec"]["hard"])


def test_task_pods_reach_nothing_of_taskenv_and_nothing_reaches_them(objects):
    (policy,) = _in_tasks(objects, "NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "taskenv"}
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"} and spec["ingress"] == []
    peers = [peer for rule in spec["egress"] for peer in rule["to"]]
    for peer in peers:
        selector = peer.get("namespaceSelector", {})
        assert selector.get("matchLabels", {}).get("kubernetes.io/metadata.name") != "taskenv"
        for expression in selector.get("matchExpressions", []):
            assert expression["operator"] == "NotIn" and "taskenv" in expression["values"]
        if "ipBlock" in peer:  # cluster addresses (taskenv's pods among them) are excepted
            assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} <= set(
                peer["ipBlock"]["except"])


def test_the_tasks_namespace_enforces_the_restricted_pod_security_profile(objects):
    namespace = next(o for o in objects if o["kind"] == "Namespace"
                     and o["metadata"]["name"] == "taskenv-tasks")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
