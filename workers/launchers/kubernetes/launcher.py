"""Submit a workload to Kubernetes as a Secret (if it has secrets) and a batch/v1 Job.

``launch`` creates and returns at once (``running``); ``observe`` maps the Job and
its pod to an outcome; ``logs`` reads the pod's log.  A redelivered launch meets
409 AlreadyExists and adopts what is there, so one revision makes one Job.

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
requests however many Jobs run, plus one log read per Job that finished.

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
from shared.secrets import redact, redact_cut
from shared.store.logtail import head_only_note, log_budget
from shared.store.tasks import TaskStore
from shared.task import replica_logs
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
from workers.launchers.kubernetes.ratelimit import TokenBucket
from workers.launchers.kubernetes.watch import (
    GONE,
    REPLICAS_NOT_ADMITTED,
    Fetch,
    Gone,
    Informer,
    JobStatus,
    job_outcome,
    slim_job,
    slim_pod,
)

T = TypeVar("T")


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

    def logs(self, workload: Workload) -> str | None:
        if workload.replicas > 1:
            return self._replica_logs(workload)
        name = job_name(workload)
        known = self.status.latest_pod(name)  # the watch knows the pod: no list call
        pod = known["metadata"]["name"] if known else _name(self._latest_pod(name))
        if pod is None:
            return None
        try:
            # limitBytes: the API server sends no more than the log's budget (and one
            # byte to tell that there was more), however large the output.
            text = self._call("read log", self.core.read_namespaced_pod_log, pod,
                              self.namespace, container=CONTAINER_NAME,
                              limit_bytes=self.log_budget + 1, passthrough={400, 404})
        except ApiException:
            return None  # the pod is gone, or its container has not started yet
        data = text.encode(errors="surrogatepass")
        if len(data) <= self.log_budget:
            return text
        head = data[:self.log_budget].decode(errors="ignore")
        secrets = [v.value for v in workload.env if v.secret]
        return redact_cut(head, secrets) + head_only_note(self.log_budget)

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

    def _replica_logs(self, workload: Workload) -> str | None:
        """Each replica's pod log (its latest pod per index), prefixed with its index."""
        pods = self._call("list pods", self.core.list_namespaced_pod, self.namespace,
                          label_selector=f"job-name={job_name(workload)}").items or []
        latest: dict[int, V1Pod] = {}
        for pod in pods:
            found = (_meta(pod).annotations or {}).get(INDEX_ANNOTATION) or ""
            if not found.isdigit():
                continue
            index = int(found)
            if index not in latest or _created_at(pod) > _created_at(latest[index]):
                latest[index] = pod
        secrets = [v.value for v in workload.env if v.secret]
        budget = self.log_budget // workload.replicas  # the log's budget, shared
        parts = []
        for k in sorted(latest):
            try:
                text = self._call("read log", self.core.read_namespaced_pod_log,
                                  _meta(latest[k]).name, self.namespace,
                                  container=CONTAINER_NAME, limit_bytes=budget + 1,
                                  passthrough={400, 404})
            except ApiException:
                continue
            data = (text or "").encode(errors="surrogatepass")
            shown = redact(text or "", secrets) if len(data) <= budget else (
                redact_cut(data[:budget].decode(errors="ignore"), secrets)
                + head_only_note(budget))
            parts.append(replica_logs.prefixed(k, shown))
        return "".join(parts) if parts else None

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


def _name(pod: V1Pod | None) -> str | None:
    return _meta(pod).name if pod is not None else None


def _meta(obj: V1Job | V1Pod) -> V1ObjectMeta:
    return obj.metadata or V1ObjectMeta()
