"""Kubernetes manifests for one workload: a batch/v1 Job and, if it has secrets, a Secret.

Pure: no client, no cluster, no I/O.  The Kubernetes launcher submits what
:func:`build` returns; the podman launcher plays a bare Pod made from
:func:`pod_spec`.

Two decisions make a value arrive in the container exactly as the user typed it
(values are data, never code):

* **``$`` is escaped as ``$$``.**  The kubelet expands ``$(NAME)`` in a
  container's ``env[].value``, ``command`` and ``args`` (``NAME`` defined earlier
  in the list → its value; undefined → left as is) and turns ``$$`` into ``$``.
  Doubling *every* ``$`` is the one escape that survives all of it: escaping only
  ``$(`` would still let Kubernetes collapse a typed ``$$`` (``"a$$b"`` would arrive
  as ``"a$b"``, ``"$$(X)"`` as ``"$"`` + X's value).  References between variables
  are therefore never expanded; taskenv does not offer them.
* **No value ever appears in the command.**  The steps run in order in one
  container as ``/bin/sh -c 'step1 && step2'``, each step's argv quoted with
  :func:`shlex.join`; the values reach the processes through the environment.

Secret variables go into a Secret and reach the container through
``valueFrom.secretKeyRef``: the Job never holds them.  (Kubernetes does not
expand values read through ``valueFrom``, so they are not escaped.)

A task's own files go into a ConfigMap (one key per file), mounted read-only in
an init container that copies each into a writable ``emptyDir`` mounted at
:data:`WORK_DIR`, with its mode; the task's container runs there (in its
``workdir`` below it), so the scripts find their files beside them and what they
write stays theirs.  The paths reach the init container as arguments of a fixed
script, never as code; the image needs ``/bin/sh``, ``mkdir``, ``cp`` and
``chmod``, as any POSIX image has.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from kubernetes.client import (
    ApiClient,
    Configuration,
    V1Capabilities,
    V1ConfigMap,
    V1ConfigMapVolumeSource,
    V1Container,
    V1EmptyDirVolumeSource,
    V1EnvVar,
    V1EnvVarSource,
    V1Job,
    V1JobSpec,
    V1LabelSelector,
    V1NetworkPolicy,
    V1NetworkPolicyEgressRule,
    V1NetworkPolicyIngressRule,
    V1NetworkPolicyPeer,
    V1NetworkPolicyPort,
    V1NetworkPolicySpec,
    V1ObjectFieldSelector,
    V1ObjectMeta,
    V1PodFailurePolicy,
    V1PodFailurePolicyOnExitCodesRequirement,
    V1PodFailurePolicyRule,
    V1PodSpec,
    V1PodTemplateSpec,
    V1ResourceRequirements,
    V1SeccompProfile,
    V1Secret,
    V1SecretKeySelector,
    V1SecurityContext,
    V1Service,
    V1ServicePort,
    V1ServiceSpec,
    V1Volume,
    V1VolumeMount,
)

from shared.config import DEFAULTS
from shared.env.identity import INDEX_NAMES, LOOPBACK, replica_env
from shared.task.limits import Limits, Maxima, limits_for, show_cpu
from shared.task.workload import Workload, with_default_image

CONTAINER_NAME = "task"
FILES_CONTAINER = "files"  # the init container that places the task's files
WORK_DIR = "/home/task"  # the writable working directory of a task with files
FILES_DIR = "/taskenv/files"  # where the init container sees the ConfigMap
# Each file: its ConfigMap key, where it goes, its mode (octal); arguments, never code.
COPY_FILES = ('set -e; while [ "$#" -gt 0 ]; do mkdir -p "$(dirname "$2")"; '
              'cp "$1" "$2"; chmod "$3" "$2"; shift 3; done')
SHELL = ("/bin/sh", "-c")
GPU_RESOURCE = "nvidia.com/gpu"
LABEL_TASK_ID = "taskenv.io/task-id"
LABEL_REVISION = "taskenv.io/revision"
LABEL_POLICY_VERSION = "taskenv.io/policy-version"
LABEL_REPLICAS = "taskenv.io/replicas"
ANNOTATION_TASK_ID = "taskenv.io/task-id"
ANNOTATION_TASK_NAME = "taskenv.io/task-name"
MAX_NAME = 63  # a DNS-1123 label; Job names become pod-name prefixes and label values
TASK_UID = 65534  # the step's user: never root, whatever the image says
# Where an Indexed Job's pod finds its index (the control plane sets it on every pod).
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE_CHARS = re.compile(r"[^-A-Za-z0-9_.]+")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")


@dataclass(frozen=True)
class ManifestSettings:
    namespace: str = DEFAULTS.kube_namespace
    backoff_limit: int = DEFAULTS.kube_backoff_limit
    default_image: str = DEFAULTS.kube_image  # for a task that names no image
    maxima: Maxima | None = None  # None: no limits written (only what the task asked)

    @classmethod
    def from_settings(cls, settings: Any) -> ManifestSettings:
        return cls(namespace=settings.kube_namespace,
                   backoff_limit=int(settings.kube_backoff_limit),
                   default_image=settings.kube_image,
                   maxima=Maxima.from_settings(settings))

    def limits(self, workload: Workload) -> Limits | None:
        if self.maxima is None:
            return None
        res = workload.resources
        return limits_for({"cpu": res.cpu, "memory": res.memory, "gpus": res.gpus},
                          self.maxima)


@dataclass(frozen=True)
class Manifests:
    job: V1Job
    secret: V1Secret | None
    config_map: V1ConfigMap | None = None  # the task's own files
    # A task of several replicas: the headless Service that gives each pod a stable name
    # (``<job>-<index>.<job>``) and the NetworkPolicy that lets only the task's own pods
    # (and DNS) reach them; both owned by the Job once it exists.
    service: V1Service | None = None
    network_policy: V1NetworkPolicy | None = None


def escape(value: str) -> str:
    """``value`` written so that Kubernetes' ``$(VAR)`` expansion gives it back unchanged."""
    return value.replace("$", "$$")


def kube_expand(text: str, mapping: Callable[[str], str | None]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (third_party/forked/golang/expansion): ``$$`` is one
    ``$``; ``$(NAME)`` is NAME's value if ``mapping`` knows it, else left as is; an unclosed
    ``$(`` and any other ``$x`` are copied.  The inverse of :func:`escape`, used where a
    backend (podman) must do what the kubelet does."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        close = text.find(")", i + 2) if nxt == "(" else -1
        if nxt == "$":
            out.append("$")
            i += 2
        elif close != -1:
            name = text[i + 2:close]
            value = mapping(name)
            out.append(value if value is not None else f"$({name})")
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def job_name(workload: Workload) -> str:
    """``workload.run_name`` when it is a DNS-1123 label, else a sanitised, hashed stand-in."""
    name = workload.run_name
    if len(name) <= MAX_NAME and _DNS_LABEL.fullmatch(name):
        return name
    digest = hashlib.sha256(f"{workload.task_id}\0{workload.revision}".encode()).hexdigest()
    suffix = f"-{digest[:10]}-r{workload.revision}"
    stem = re.sub(r"[^a-z0-9]+", "-", workload.task_id.lower()).strip("-")
    stem = stem[: MAX_NAME - len("taskenv-") - len(suffix)].strip("-")
    return f"taskenv-{stem}{suffix}" if stem else f"taskenv{suffix}"


def secret_name(workload: Workload) -> str:
    """The Secret holding the workload's secret values (a DNS-1123 subdomain)."""
    return f"{job_name(workload)}-env"


def files_name(workload: Workload) -> str:
    """The ConfigMap holding the workload's own files (a DNS-1123 subdomain)."""
    return f"{job_name(workload)}-files"


def label_value(text: str) -> str:
    """``text`` squeezed into a label value: at most 63 of ``[-A-Za-z0-9_.]``, alnum ends."""
    cleaned = _LABEL_VALUE_CHARS.sub("-", text)[:MAX_NAME]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)


MANAGED_BY = ("app.kubernetes.io/managed-by", "taskenv")
# What every workload taskenv made carries: how a Kubernetes watch and a podman listing
# select taskenv's own, and nothing else.
SELECTOR = "=".join(MANAGED_BY)


def task_labels(workload: Workload) -> dict[str, str]:
    labels = {
        MANAGED_BY[0]: MANAGED_BY[1],
        LABEL_TASK_ID: label_value(workload.task_id),
        LABEL_REVISION: str(workload.revision),
        LABEL_POLICY_VERSION: str(workload.policy_version),
    }
    if workload.replicas > 1:  # how many replicas a listing of the task's pods should find
        labels[LABEL_REPLICAS] = str(workload.replicas)
    return labels


def task_annotations(workload: Workload) -> dict[str, str]:
    return {ANNOTATION_TASK_ID: workload.task_id, ANNOTATION_TASK_NAME: workload.name}


def script(workload: Workload) -> str:
    """The steps as one shell line, each argv quoted: ``a 'b c' && d``."""
    return " && ".join(shlex.join(step) for step in workload.steps) or "true"


def secret_keys(workload: Workload) -> dict[str, str]:
    """Variable name → key in the Secret; the name itself whenever it is a valid key."""
    keys: dict[str, str] = {}
    used: set[str] = set()
    for index, var in enumerate(v for v in workload.env if v.secret):
        key = var.name if _SECRET_KEY.fullmatch(var.name) else f"var-{index}"
        while key in used:
            key = f"{key}-{index}"
        keys[var.name] = key
        used.add(key)
    return keys


def env_vars(workload: Workload, secret: str | None) -> list[V1EnvVar]:
    keys = secret_keys(workload)
    if keys and secret is None:
        raise ValueError("the workload has secret variables: a secret name is required")
    out = []
    for var in workload.env:
        if var.secret:
            ref = V1SecretKeySelector(name=secret, key=keys[var.name], optional=False)
            out.append(V1EnvVar(name=var.name, value_from=V1EnvVarSource(secret_key_ref=ref)))
        else:
            out.append(V1EnvVar(name=var.name, value=escape(var.value)))
    return out


def resources(workload: Workload, limits: Limits | None = None
              ) -> V1ResourceRequirements | None:
    """With ``limits``: requests equal to limits (a Guaranteed pod: what it asked is what it
    has, and the kubelet kills it past its memory); without, only what the task asked."""
    if limits is not None:
        bounded = {"cpu": show_cpu(limits.millicpu), "memory": str(limits.memory_bytes)}
        gpus = {GPU_RESOURCE: str(limits.gpus)} if limits.gpus > 0 else {}
        return V1ResourceRequirements(requests=dict(bounded), limits={**bounded, **gpus})
    res = workload.resources
    requests = {k: v for k, v in (("cpu", res.cpu), ("memory", res.memory)) if v}
    asked = {GPU_RESOURCE: str(res.gpus)} if res.gpus > 0 else {}
    if not requests and not asked:
        return None
    return V1ResourceRequirements(requests=requests or None, limits=asked or None)


def security_context() -> V1SecurityContext:
    """The step runs as an unprivileged user, without capabilities or a way to gain any,
    under the runtime's default seccomp profile, whatever the image would have."""
    return V1SecurityContext(
        run_as_non_root=True, run_as_user=TASK_UID, run_as_group=TASK_UID,
        allow_privilege_escalation=False, privileged=False,
        capabilities=V1Capabilities(drop=["ALL"]),
        seccomp_profile=V1SeccompProfile(type="RuntimeDefault"))


def scratch_volumes(limits: Limits | None) -> tuple[list[V1Volume], list[V1VolumeMount]]:
    """The task's home (:data:`WORK_DIR`, where a task's files go) and ``/tmp``: RAM-backed,
    size-capped, writable by the task's user (a tmpfs is world-writable) and counted in
    its memory, as the local launcher's are."""
    if limits is None:
        return [], []
    sizes = {"work": (WORK_DIR, limits.home_bytes), "tmp": ("/tmp", limits.tmp_bytes)}  # noqa: S108
    volumes = [V1Volume(name=name, empty_dir=V1EmptyDirVolumeSource(medium="Memory",
                                                                    size_limit=str(size)))
               for name, (_, size) in sizes.items()]
    mounts = [V1VolumeMount(name=name, mount_path=path) for name, (path, _) in sizes.items()]
    return volumes, mounts


def identity_vars(workload: Workload, index: int | None,
                  master_addr: str = LOOPBACK) -> list[V1EnvVar]:
    """Replica ``index``'s identity (``shared.env.identity``); with ``index`` None, the
    variables whose value is the index read it from the pod's own Indexed-Job annotation
    (the downward API), so one pod template serves every replica."""
    out = []
    for name, value in replica_env(workload.group(master_addr), index or 0):
        if index is None and name in INDEX_NAMES:
            field = V1ObjectFieldSelector(field_path=f"metadata.annotations['{INDEX_ANNOTATION}']")
            out.append(V1EnvVar(name=name, value_from=V1EnvVarSource(field_ref=field)))
        else:
            out.append(V1EnvVar(name=name, value=escape(value)))
    return out


def container(workload: Workload, secret_name: str | None, identity: list[V1EnvVar],
              limits: Limits | None, mounts: list[V1VolumeMount],
              name: str = CONTAINER_NAME) -> V1Container:
    """The container running the steps in order: the resolved env, then the identity."""
    return V1Container(
        name=name,
        image=workload.image,
        command=[*SHELL, escape(script(workload))],
        env=env_vars(workload, secret_name) + identity,
        working_dir=workload.workdir or None,
        resources=resources(workload, limits),
        security_context=security_context(),
        volume_mounts=list(mounts) or None,
    )


def replica_container_name(index: int, replicas: int) -> str:
    """A replica's container in a pod of several (podman); a task of one keeps ``task``."""
    return CONTAINER_NAME if replicas == 1 else f"{CONTAINER_NAME}-{index}"


def pod_spec(workload: Workload, secret_name: str | None, limits: Limits | None = None,
             identity: list[V1EnvVar] | None = None) -> V1PodSpec:
    """One container running the steps in order with the resolved env, never restarted.

    ``identity``: the replica's identity variables; replica 0 of the workload's group
    (listening on loopback) when not given.  Service links are off and no service-account
    token is mounted, so the container's env is the resolved env and the identity (plus
    the ``KUBERNETES_SERVICE_*`` pair the kubelet always adds).  With ``limits`` (every
    launcher passes them) the container has them as its resources, and size-capped
    scratch volumes.
    """
    ident = identity_vars(workload, 0) if identity is None else identity
    return _pod(workload, limits, lambda mounts: [
        container(workload, secret_name, ident, limits, mounts)])


def replicas_pod_spec(workload: Workload, secret_name: str | None,
                      limits: Limits | None = None) -> V1PodSpec:
    """Every replica as a container of one pod, sharing its network: replica 0 listens on
    the pod's loopback (podman's form of a distributed task)."""
    return _pod(workload, limits, lambda mounts: [
        container(workload, secret_name, identity_vars(workload, k), limits, mounts,
                  replica_container_name(k, workload.replicas))
        for k in range(workload.replicas)])


def _pod(workload: Workload, limits: Limits | None,
         containers: Callable[[list[V1VolumeMount]], list[V1Container]]) -> V1PodSpec:
    volumes, mounts = scratch_volumes(limits)
    spec = V1PodSpec(containers=containers(mounts), restart_policy="Never",
                     enable_service_links=False, automount_service_account_token=False,
                     volumes=volumes or None)
    if workload.files:
        with_files(spec, workload, limits)
    return spec


def work_dir(workload: Workload) -> str:
    """The working directory of a task with files: its workdir inside :data:`WORK_DIR`."""
    return str(PurePosixPath(WORK_DIR, workload.workdir or ""))


def file_key(index: int) -> str:
    return f"file-{index}"


def with_files(spec: V1PodSpec, workload: Workload, limits: Limits | None = None) -> None:
    """Add the files' volumes, the init container that copies them into the writable
    working directory, and that directory to the task's containers (podman's replicas
    share the pod's).  The init container is held like the task's: unprivileged, within
    the same limits."""
    work = V1VolumeMount(name="work", mount_path=WORK_DIR)
    args: list[str] = []
    for index, file in enumerate(workload.files):
        target = str(PurePosixPath(work_dir(workload), file.path))
        args += [f"{FILES_DIR}/{file_key(index)}", target, f"{file.mode:o}"]
    spec.init_containers = [V1Container(
        name=FILES_CONTAINER, image=workload.image,
        command=[*SHELL, escape(COPY_FILES), "sh", *(escape(a) for a in args)],
        volume_mounts=[V1VolumeMount(name="files", mount_path=FILES_DIR, read_only=True),
                       work],
        security_context=security_context(), resources=resources(workload, limits))]
    for task in spec.containers:
        mounts = task.volume_mounts or []
        task.volume_mounts = mounts if any(m.name == "work" for m in mounts) else [*mounts, work]
        task.working_dir = work_dir(workload)
    volumes = spec.volumes or []
    files = V1Volume(name="files", config_map=V1ConfigMapVolumeSource(
        name=files_name(workload), default_mode=0o444))
    if not any(v.name == "work" for v in volumes):  # no limits given: an unsized one
        volumes = [*volumes, V1Volume(name="work", empty_dir=V1EmptyDirVolumeSource())]
    spec.volumes = [files, *volumes]


def config_map(workload: Workload, settings: ManifestSettings) -> V1ConfigMap | None:
    """The workload's own files, one key each; None for a task without files."""
    if not workload.files:
        return None
    return V1ConfigMap(
        api_version="v1", kind="ConfigMap", immutable=True,
        metadata=_metadata(workload, files_name(workload), settings.namespace),
        data={file_key(i): f.content for i, f in enumerate(workload.files)})


def build(workload: Workload, settings: ManifestSettings) -> Manifests:
    workload = with_default_image(workload, settings.default_image)
    secret = secret_name(workload) if any(v.secret for v in workload.env) else None
    job = V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=_metadata(workload, job_name(workload), settings.namespace),
        spec=V1JobSpec(
            backoff_limit=settings.backoff_limit,
            template=V1PodTemplateSpec(
                metadata=V1ObjectMeta(labels=task_labels(workload),
                                      annotations=task_annotations(workload)),
                spec=pod_spec(workload, secret, settings.limits(workload)),
            ),
        ),
    )
    found = Manifests(job=job, secret=_secret(workload, secret, settings) if secret else None,
                      config_map=config_map(workload, settings))
    return found if workload.replicas == 1 else _distributed(workload, found, secret, settings)


def master_addr(workload: Workload) -> str:
    """Replica 0's stable name: its pod's hostname under the task's headless Service."""
    name = job_name(workload)
    return f"{name}-0.{name}"


def _distributed(workload: Workload, found: Manifests, secret: str | None,
                 settings: ManifestSettings) -> Manifests:
    """An Indexed Job (one pod per replica, each reading its index from its own
    annotation), failing as a whole on the first pod that fails: a pod failure policy,
    not retries of one index while its peers wait in the rendezvous."""
    name = job_name(workload)
    spec = found.job.spec
    assert spec is not None
    spec.completion_mode = "Indexed"
    spec.completions = spec.parallelism = workload.replicas
    spec.backoff_limit = 0
    spec.pod_failure_policy = V1PodFailurePolicy(rules=[V1PodFailurePolicyRule(
        action="FailJob", on_exit_codes=V1PodFailurePolicyOnExitCodesRequirement(
            container_name=CONTAINER_NAME, operator="NotIn", values=[0]))])
    pod = pod_spec(workload, secret, settings.limits(workload),
                   identity_vars(workload, None, master_addr(workload)))
    pod.subdomain = name  # hostname <job>-<index>, resolvable under the Service
    spec.template.spec = pod
    return Manifests(job=found.job, secret=found.secret, config_map=found.config_map,
                     service=_service(workload, name, settings),
                     network_policy=_network_policy(workload, name, settings))


def _pod_selector(workload: Workload) -> dict[str, str]:
    """What selects the pods of this task revision, and nothing else's."""
    labels = task_labels(workload)
    return {LABEL_TASK_ID: labels[LABEL_TASK_ID], LABEL_REVISION: labels[LABEL_REVISION]}


def _service(workload: Workload, name: str, settings: ManifestSettings) -> V1Service:
    """Headless: DNS answers with each pod's own address, ready or not (a replica must
    find replica 0 while it starts, as Kubeflow's Services do)."""
    port = workload.group().master_port
    return V1Service(api_version="v1", kind="Service",
                     metadata=_metadata(workload, name, settings.namespace),
                     spec=V1ServiceSpec(cluster_ip="None", selector=_pod_selector(workload),
                                        publish_not_ready_addresses=True,
                                        ports=[V1ServicePort(name="rendezvous", port=port,
                                                             target_port=port)]))


def _network_policy(workload: Workload, name: str,
                    settings: ManifestSettings) -> V1NetworkPolicy:
    """The task's pods reach each other and DNS; no other pod reaches them."""
    own = V1NetworkPolicyPeer(pod_selector=V1LabelSelector(match_labels=_pod_selector(workload)))
    dns = [V1NetworkPolicyPort(protocol=protocol, port=53) for protocol in ("UDP", "TCP")]
    return V1NetworkPolicy(
        api_version="networking.k8s.io/v1", kind="NetworkPolicy",
        metadata=_metadata(workload, name, settings.namespace),
        spec=V1NetworkPolicySpec(
            pod_selector=V1LabelSelector(match_labels=_pod_selector(workload)),
            policy_types=["Ingress", "Egress"],
            ingress=[V1NetworkPolicyIngressRule(_from=[own])],
            egress=[V1NetworkPolicyEgressRule(to=[own]), V1NetworkPolicyEgressRule(ports=dns)]))


def _metadata(workload: Workload, name: str, namespace: str) -> V1ObjectMeta:
    return V1ObjectMeta(name=name, namespace=namespace, labels=task_labels(workload),
                        annotations=task_annotations(workload))


def _secret(workload: Workload, name: str, settings: ManifestSettings) -> V1Secret:
    keys = secret_keys(workload)
    data: dict[str, bytes | str] = {
        keys[v.name]: base64.b64encode(v.value.encode()).decode()
        for v in workload.env if v.secret}
    return V1Secret(api_version="v1", kind="Secret", type="Opaque", immutable=True,
                    metadata=_metadata(workload, name, settings.namespace), data=data)


@functools.cache
def _serializer() -> ApiClient:
    return ApiClient(Configuration())


def to_dict(obj: Any) -> dict[str, Any]:
    """The JSON the API server receives for a kubernetes client model (camelCase keys)."""
    return _serializer().sanitize_for_serialization(obj)


def for_display(manifests: Manifests) -> dict[str, Any]:
    """The manifests as a user may see them: the Secret's keys, never its values."""
    out: dict[str, Any] = {"job": to_dict(manifests.job), "secret": None,
                           "config_map": None if manifests.config_map is None
                           else to_dict(manifests.config_map)}
    if manifests.service is not None:
        out["service"] = to_dict(manifests.service)
    if manifests.network_policy is not None:
        out["network_policy"] = to_dict(manifests.network_policy)
    if manifests.secret is not None:
        secret = to_dict(manifests.secret)
        secret["data"] = {key: "<redacted>" for key in secret.get("data", {})}
        out["secret"] = secret
    return out
