"""Submit a workload to Kubernetes as a Secret (if it has secrets) and a batch/v1 Job.

``launch`` creates and returns at once (``running``); ``observe`` maps the Job and
its pod to an outcome; ``output_since`` reads what each running pod's log gained since
the last pass (``workers.launchers.kubernetes.output``), ``logs`` the rest at the end.
A redelivered launch meets 409 AlreadyExists and adopts what is there, so one revision
makes one Job.

The reconciler learns status from ``changes``: one LIST of the Jobs and one of
their pods that carry taskenv's label, then a WATCH of each from the list's
resourceVersion (``workers.launchers.kubernetes.watch``), resumed after a disconnect and
listed again on 410 Gone.  The watch is drained once per reconciler pass (each
WATCH asks for ``watch_seconds`` of events, from the last resourceVersion) rather
than followed by a background thread: events only matter when a pass applies
them, the reconciler's Redis lock already decides which replica that is, and a
pass that reads its own events needs no queue, no thread to supervise and no
second copy of the state to hand over.  What is missed between passes is not
lost: the next WATCH starts where the last one stopped, and the API server keeps
minutes of history (a longer pause gets 410 and a LIST).  A pass thus costs two
requests however many Jobs run, plus a log read per running pod (at most
:data:`PASS_READS` a pass, the tasks taken in turn) and per Job that finished.

Every API request first takes a token from a client-side bucket (20/s, burst 30
by default; per launcher, so per worker process).  429, 5xx, timeouts and
connection errors are retried with capped exponential backoff, waiting at least
the server's ``Retry-After``; when the retries run out :class:`TransientError` is
raised and the Celery task retries later.  Any other 4xx is the request's fault:
:class:`LaunchFailed` with the API server's message.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Any, TypeVar

import urllib3
from kubernetes import config
from kubernetes.client import (
    ApiClient,
    BatchV1Api,
    Configuration,
    CoreV1Api,
    NetworkingV1Api,
    V1DeleteOptions,
    V1Job,
    V1ObjectMeta,
    V1OwnerReference,
    V1Pod,
)
from kubernetes.client.exceptions import ApiException

from shared.config import Settings
from shared.errors import LaunchFailed, PermanentError, TransientError
from shared.store.logtail import MAX_CHUNK, log_budget
from shared.store.tasks import TaskStore
from shared.task.manifest import (
    ANNOTATION_TASK_ID,
    CONTAINER_NAME,
    INDEX_ANNOTATION,
    SELECTOR,
    Manifests,
    ManifestSettings,
    build,
    files_name,
    job_name,
    secret_name,
)
from shared.task.workload import Workload
from workers.launchers.base import CONTAINER_NEVER_STARTS, Change, Hooks, Outcome
from workers.launchers.common.stream import OutputStream
from workers.launchers.kubernetes.output import PodLog
from workers.launchers.kubernetes.ratelimit import TokenBucket
from workers.launchers.kubernetes.watch import (
    GONE,
    REPLICAS_NOT_ADMITTED,
    Fetch,
    Gone,
    Informer,
    JobStatus,
    container_state,
    job_outcome,
    slim_job,
    slim_pod,
    task_key,
)

T = TypeVar("T")
READ_CHUNK = MAX_CHUNK  # of a pod's log, asked for at once (and one append to Redis)
PASS_BYTES = 8 * READ_CHUNK  # of every pod's log, read in one pass (about)
PASS_READS = 16  # log requests a pass makes at most, the running tasks taken in turn


def make_api_client(configuration: Configuration) -> ApiClient:
    """An ApiClient whose only retries are the launcher's (urllib3's own are switched off)."""
    configuration.retries = False
    return ApiClient(configuration)


def load_api_client() -> ApiClient:
    """In-cluster service account if there is one, else the kubeconfig (``KUBECONFIG``)."""
    configuration = Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        # Read KUBECONFIG now: the client reads it once, when it is imported.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"),
                                client_configuration=configuration, persist_config=False)
    return make_api_client(configuration)


class KubernetesLauncher:
    name = "kubernetes"
    sweep_every_pass = False
    # A task of several replicas some of whose pods cannot be created waits as visibly.
    never_starts: frozenset[str] = CONTAINER_NEVER_STARTS | {REPLICAS_NOT_ADMITTED}

    def __init__(self, settings: Settings, api_client: ApiClient | None = None, *,
                 rate: float = 20, burst: int = 30, max_retries: int = 5,
                 backoff_base: float = 0.5, backoff_cap: float = 30,
                 request_timeout: float | tuple[float, float] = (5, 30),
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, watch_seconds: int = 1) -> None:
        self.manifest_settings = ManifestSettings.from_settings(settings)
        self.namespace = self.manifest_settings.namespace
        self.log_budget = log_budget(settings.log_max_bytes, TaskStore.LOG_LIMIT)
        self.api = api_client or load_api_client()
        self.batch, self.core = BatchV1Api(self.api), CoreV1Api(self.api)
        self.networking = NetworkingV1Api(self.api)
        self.bucket = TokenBucket(rate, burst, clock=clock, sleep=sleep)
        self.max_retries, self.backoff_base, self.backoff_cap = (
            max_retries, backoff_base, backoff_cap)
        self.request_timeout = request_timeout
        self._sleep = sleep
        # The readers of the running pods' logs (in memory), which pods this process found
        # running when it started, and that second (read from on, for those).
        self.readers: dict[str, dict[str, PodLog]] = {}  # job -> its pods' readers
        self.workloads: dict[str, Workload] = {}  # by job, of the running tasks read
        self.found_running: set[str] | None = None
        self.started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.turn = 0  # where the next output_since() begins among the running jobs
        self.status = JobStatus(
            Informer("jobs", self._lister("list jobs", self.batch.list_namespaced_job,
                                          watch_seconds), slim_job, watch_seconds),
            Informer("pods", self._lister("list pods", self.core.list_namespaced_pod,
                                          watch_seconds), slim_pod, watch_seconds))

    # -- the Launcher interface ---------------------------------------------------------

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        if workload.per_node:  # the scheduler picks the node once the Job exists
            names = ", ".join(dict.fromkeys(name for name, _, _ in workload.per_node))
            hooks.log(f"kubernetes: the platform's per-node defaults ({names}) are not "
                      "applied: the node is chosen by the scheduler after the Job is made\n")
        manifests = build(workload, self.manifest_settings)
        name = job_name(workload)
        if manifests.secret is not None:
            self._create("create secret", self.core.create_namespaced_secret, manifests.secret)
        if manifests.config_map is not None:
            self._create("create configmap", self.core.create_namespaced_config_map,
                         manifests.config_map)
        job = self._create("create job", self.batch.create_namespaced_job, manifests.job)
        verb = "created"
        if job is None:
            job, verb = self._adopt(workload, name), "adopted the existing"
        if manifests.secret is not None:
            self._let_job_own(name, _meta(job).uid, secret_name(workload), hooks,
                              "secret", self.core.patch_namespaced_secret)
        if manifests.config_map is not None:
            self._let_job_own(name, _meta(job).uid, files_name(workload), hooks,
                              "configmap", self.core.patch_namespaced_config_map)
        self._group_objects(manifests, name, _meta(job).uid, hooks)
        hooks.log(f"kubernetes: {verb} job {self.namespace}/{name}\n")
        hooks.started()
        return Outcome("running")

    def observe(self, workload: Workload) -> Outcome | None:
        name = job_name(workload)
        try:
            job = self._call("read job", self.batch.read_namespaced_job, name, self.namespace,
                             passthrough={404})
        except ApiException:
            return None  # no such Job: the backend has no view of this workload
        pod = self._latest_pod(name)
        return job_outcome(self._as_dict(job), self._as_dict(pod) if pod else None)

    def changes(self) -> list[Change]:
        return self.status.changes()

    def seen(self, workload: Workload) -> Outcome | None:
        return self.status.seen(job_name(workload))

    def as_stored(self, text: str) -> str:
        """What :meth:`output_since` and :meth:`logs` give is as the log keeps it already
        (the steps' mark shown as text, the platform's lines marked)."""
        return text

    def output_since(self, workload_of: Callable[[str, int], Workload | None]
                     ) -> list[tuple[str, int, str]]:
        """What each running task's pods printed since the last call, as the log keeps it
        (``workers.launchers.kubernetes.output``): a read of each pod's log of at most a
        second's output already read and :data:`READ_CHUNK` more, at most
        :data:`PASS_READS` reads and about :data:`PASS_BYTES` in a pass, the tasks taken in
        turn from where the last call stopped.  The pods are the watch's: no list call.
        ``workload_of`` is asked once for each task that runs (its secrets, replicas)."""
        if self.found_running is None:  # what ran before this process: read from its start
            self.found_running = set(self.status.pods.objects)
        running = sorted(job for job, seen in self.status.outcomes.items()
                         if seen.state == "running")
        self.workloads = {job: w for job, w in self.workloads.items() if job in running}
        self.readers = {job: r for job, r in self.readers.items()
                        if job in self.status.outcomes}
        first = self.turn % len(running) if running else 0
        out: list[tuple[str, int, str]] = []
        reads = read = looked = 0
        for job in running[first:] + running[:first]:
            if reads >= PASS_READS or read >= PASS_BYTES:
                break
            looked += 1
            key = task_key(self.status.jobs.objects.get(job) or {})
            workload = self.workloads.get(job) or (workload_of(*key) if key else None)
            if key is None or workload is None:
                continue
            self.workloads[job] = workload
            text = []
            for index, pod in self._pods_with_logs(job, workload.replicas):
                reader, said = self._reader(workload, job, pod, index)
                text.append(said + reader.read(self._fetch(pod), READ_CHUNK))
                reads, read = reads + 1, read + reader.got
            if "".join(text):
                out.append((*key, "".join(text)))
        self.turn = first + looked
        return out

    def logs(self, workload: Workload) -> str | None:
        """What each replica's pod printed that was not read while it ran, read up to its
        share of the log's budget (``limitBytes``: the API server sends no more, whatever
        the output's size; past it, a line says so), as the log keeps it.  None when no
        pod has a log (none made, or its container never started)."""
        job = job_name(workload)
        pods = self._pods_with_logs(job, workload.replicas, listed=True)
        parts = []
        for index, pod in pods:
            reader, said = self._reader(workload, job, pod, index)
            room = reader.stream.budget - reader.stream.taken
            parts.append(said + reader.rest(self._fetch(pod), max(room + 1, READ_CHUNK)))
        self.readers.pop(job, None)
        self.workloads.pop(job, None)
        return "".join(parts) if pods else None

    def _pods_with_logs(self, job: str, replicas: int,
                        listed: bool = False) -> list[tuple[int | None, str]]:
        """The pod of each replica whose container has started (the latest pod of each
        index; for a task of one, its latest pod), as (index or None, name): from the watch,
        or with ``listed`` from one LIST of the Job's pods when the watch knows none."""
        pods = [self.status.pods.objects[n] for n in self.status.pods_of.get(job, ())
                if n in self.status.pods.objects]
        if listed and not pods:
            found = self._call("list pods", self.core.list_namespaced_pod, self.namespace,
                               label_selector=f"job-name={job}").items or []
            pods = [slim_pod(self._as_dict(p)) for p in found]
        latest: dict[int | None, dict[str, Any]] = {}
        for pod in pods:
            meta = pod["metadata"]
            index: int | None = None
            if replicas > 1:
                found_index = str((meta.get("annotations") or {}).get(INDEX_ANNOTATION) or "")
                if not found_index.isdigit():
                    continue
                index = int(found_index)
            before = latest.get(index)
            if before is None or (meta.get("creationTimestamp") or "") > (
                    before["metadata"].get("creationTimestamp") or ""):
                latest[index] = pod
        return [(index, pod["metadata"]["name"]) for index, pod in
                sorted(latest.items(), key=lambda item: item[0] or 0)
                if {"running", "terminated"} & set(container_state(pod))]

    def _reader(self, workload: Workload, job: str, pod: str,
                index: int | None) -> tuple[PodLog, str]:
        """The pod's reader, made at its first read (and what it has to say then)."""
        readers = self.readers.setdefault(job, {})
        if pod in readers:
            return readers[pod], ""
        secrets = [v.value for v in workload.env if v.secret]
        stream = OutputStream(secrets, self.log_budget // workload.replicas, index)
        said = ""
        if pod in (self.found_running or ()):
            created = (self.status.pods.objects.get(pod, {}).get("metadata") or {}).get(
                "creationTimestamp") or ""
            if created < self.started:
                readers[pod], said = PodLog.adopted(pod, stream, self.started)
                return readers[pod], said
        readers[pod] = PodLog(pod, stream)
        return readers[pod], said

    def _fetch(self, pod: str) -> Callable[[str | None, int], bytes | None]:
        """A read of the pod's log, ``timestamps=true``, from a second on and at most so
        many bytes: its bytes, or None when it has none (the container waits, the pod is
        gone)."""
        def fetch(since: str | None, limit: int) -> bytes | None:
            query: list[tuple[str, Any]] = [("container", CONTAINER_NAME),
                                            ("timestamps", "true"), ("limitBytes", limit)]
            if since is not None:
                query.append(("sinceTime", since))
            try:
                return self._call("read log", self._read_log, pod, query,
                                  passthrough={400, 404})
            except ApiException:
                return None
        return fetch

    def _read_log(self, pod: str, query: list[tuple[str, Any]],
                  _request_timeout: Any = None) -> bytes:
        """GET the pod's log as bytes (the generated client has no ``sinceTime``)."""
        request = self.api.param_serialize(
            method="GET", resource_path="/api/v1/namespaces/{namespace}/pods/{name}/log",
            path_params={"namespace": self.namespace, "name": pod}, query_params=query,
            header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"])
        response = self.api.call_api(*request, _request_timeout=_request_timeout)
        data = bytes(response.read() or b"")
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response,
                                             body=data.decode(errors="replace"), data=None)
        return data

    def cancel(self, workload: Workload) -> None:
        """Delete the Job, its pods with it (``Foreground``: the Job stays until they are
        gone, so :meth:`observe` says gone only when nothing runs), and its Secret."""
        options = V1DeleteOptions(propagation_policy="Foreground")
        self._delete("delete job", self.batch.delete_namespaced_job, job_name(workload),
                     options)
        self._delete("delete secret", self.core.delete_namespaced_secret,
                     secret_name(workload), V1DeleteOptions())
        if workload.files:
            self._delete("delete configmap", self.core.delete_namespaced_config_map,
                         files_name(workload), V1DeleteOptions())
        if workload.replicas > 1:  # owned by the Job, unless a crash came before that patch
            for what, delete in (("service", self.core.delete_namespaced_service),
                                 ("network policy",
                                  self.networking.delete_namespaced_network_policy)):
                self._delete(f"delete {what}", delete, job_name(workload), V1DeleteOptions())
        if self.observe(workload) is not None:
            raise TransientError(f"job {self.namespace}/{job_name(workload)} is still "
                                 "being deleted")

    # -- steps ----------------------------------------------------------------------------

    def _create(self, what: str, create: Callable[..., T], body: Any) -> T | None:
        """The created object, or None when one of that name exists (409: adopt it)."""
        try:
            return self._call(what, create, self.namespace, body, passthrough={409})
        except ApiException:
            return None

    def _delete(self, what: str, delete: Callable[..., Any], name: str,
                options: V1DeleteOptions) -> None:
        """Delete one object; one already gone (404) is what was wanted."""
        try:
            self._call(what, delete, name, self.namespace, body=options, passthrough={404})
        except ApiException:
            pass

    def _adopt(self, workload: Workload, name: str) -> V1Job:
        job = self._call("read job", self.batch.read_namespaced_job, name, self.namespace)
        owner = (_meta(job).annotations or {}).get(ANNOTATION_TASK_ID)
        if owner != workload.task_id:
            raise LaunchFailed(f"job {self.namespace}/{name} exists and belongs to "
                               f"another task ({owner!r}); not adopting it")
        return job

    def _group_objects(self, manifests: Manifests, job: str, uid: str | None,
                       hooks: Hooks) -> None:
        """A task of several replicas: its headless Service and NetworkPolicy, created after
        the Job (a redelivered launch that adopted the Job creates what a crash left
        missing: an existing one is taken as made) and owned by it, so they go with it."""
        extras: list[tuple[str, Callable[..., Any], Callable[..., Any], Any]] = [
                  ("service", self.core.create_namespaced_service,
                   self.core.patch_namespaced_service, manifests.service),
                  ("network policy", self.networking.create_namespaced_network_policy,
                   self.networking.patch_namespaced_network_policy, manifests.network_policy)]
        for what, create, patch, body in extras:
            if body is None:
                continue
            self._create(f"create {what}", create, body)
            self._let_job_own(job, uid, body.metadata.name, hooks, what, patch)

    def _let_job_own(self, job: str, uid: str | None, owned: str, hooks: Hooks, kind: str,
                     patch_call: Callable[..., Any]) -> None:
        """Make the Secret (or ConfigMap, Service, NetworkPolicy) an owned object of the
        Job, so deleting the Job deletes it."""
        if not uid:
            return
        ref = V1OwnerReference(api_version="batch/v1", kind="Job", name=job, uid=uid,
                               block_owner_deletion=False)
        patch = {"metadata": {"ownerReferences": [self.api.sanitize_for_serialization(ref)]}}
        try:
            self._call(f"patch {kind}", patch_call, owned, self.namespace, patch)
        except PermanentError as exc:  # the Job runs either way; only clean-up is at stake
            hooks.log(f"kubernetes: warning: {kind} {owned} will outlive its job: {exc}\n")

    def _lister(self, what: str, list_call: Callable[..., Any], watch_seconds: int) -> Fetch:
        """``list_call`` of taskenv's objects, as raw JSON (a LIST, or a WATCH stream)."""
        def fetch(**query: Any) -> Any:
            timeout = (self._connect_timeout(), watch_seconds + 30) if query.get("watch") \
                else self.request_timeout
            try:
                return self._call(what, list_call, self.namespace, label_selector=SELECTOR,
                                  _preload_content=False, _request_timeout=timeout,
                                  passthrough={GONE}, **query)
            except ApiException as exc:  # a server that answers 410 before streaming
                raise Gone(api_message(exc)) from exc
        return fetch

    def _connect_timeout(self) -> float:
        timeout = self.request_timeout
        return timeout[0] if isinstance(timeout, tuple) else timeout

    def _as_dict(self, obj: V1Job | V1Pod) -> dict[str, Any]:
        """A model as the API server's JSON (camelCase), which the outcome mapping reads."""
        return dict(self.api.sanitize_for_serialization(obj))

    def _latest_pod(self, name: str) -> V1Pod | None:
        pods = self._call("list pods", self.core.list_namespaced_pod, self.namespace,
                          label_selector=f"job-name={name}")
        items = pods.items or []
        return max(items, key=_created_at, default=None)

    # -- one API call, rate-limited and retried --------------------------------------------

    def _call(self, what: str, fn: Callable[..., T], *args: Any,
              passthrough: Collection[int] = (), **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` with the rate limit and retries.

        Statuses in ``passthrough`` re-raise the ApiException for the caller to handle.
        """
        failure = ""
        for attempt in range(self.max_retries + 1):
            self.bucket.acquire()
            try:
                return fn(*args, **{"_request_timeout": self.request_timeout, **kwargs})
            except ApiException as exc:
                if exc.status in passthrough:
                    raise
                if not retryable(exc.status):
                    raise LaunchFailed(f"kubernetes {what}: {api_message(exc)}") from exc
                failure = f"HTTP {exc.status}: {api_message(exc)}"
                retry_after = retry_after_seconds(exc)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                failure, retry_after = f"{type(exc).__name__}: {exc}", None
            if attempt == self.max_retries:
                break
            delay = self.backoff(attempt, retry_after)
            if delay is None:
                failure += f" (Retry-After {retry_after:g}s is over {self.backoff_cap:g}s)"
                break
            self._sleep(delay)
        raise TransientError(f"kubernetes {what} failed after {attempt + 1} attempts: {failure}")

    def backoff(self, attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds before retry ``attempt + 1``; None when Retry-After asks for over the cap."""
        delay = min(self.backoff_cap, self.backoff_base * 2 ** attempt)
        if retry_after is None:
            return delay
        if retry_after > self.backoff_cap:
            return None  # do not hold a worker that long; the task is retried later
        return max(delay, retry_after)


def retryable(status: int | None) -> bool:
    # 0: the client could not complete the request (TLS and the like)
    return status is None or status in (0, 429) or 500 <= status <= 599


def api_message(exc: ApiException) -> str:
    """The ``message`` of the Status the API server sent, else the HTTP reason."""
    try:
        status = json.loads(exc.body or "")
    except ValueError:
        status = None
    if isinstance(status, dict) and status.get("message"):
        return str(status["message"])
    return f"{exc.status} {exc.reason}"


def retry_after_seconds(exc: ApiException) -> float | None:
    raw = (exc.headers or {}).get("Retry-After")
    try:
        seconds = float(raw) if raw is not None else None
    except ValueError:
        return None  # an HTTP-date: the API server only sends seconds
    return seconds if seconds is not None and seconds >= 0 else None


def _created_at(pod: V1Pod) -> datetime:
    return _meta(pod).creation_timestamp or datetime.min.replace(tzinfo=UTC)


def _meta(obj: V1Job | V1Pod) -> V1ObjectMeta:
    return obj.metadata or V1ObjectMeta()
