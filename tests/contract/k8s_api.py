"""A local HTTP server that plays the Kubernetes API server's contract for the launcher.

No cluster can run on these machines, so the launcher is tested against this:
the same paths, verbs and JSON bodies as a real API server for the calls the
launcher makes, errors as ``Status`` objects (``kind: Status``, ``reason``,
``code``, ``message``, ``details``), objects kept between calls, and the bits of
server-side behaviour the launcher depends on:

* ``POST`` of an existing name answers 409 ``AlreadyExists``; a ``GET`` of a
  missing one 404 ``NotFound``; a body whose namespace or kind does not match
  the path 400 ``BadRequest``; a name that is not a DNS-1123 label 422 ``Invalid``;
* a Secret's ``stringData`` is folded into base64 ``data``;
* a Job gets a uid, a ``controller-uid`` selector and the ``job-name`` labels on
  its pod template, and ``status: {}``; an Indexed one without ``completions``, or a
  pod failure policy on a template that restarts, is refused 422 ``Invalid``; an
  Indexed Job's pods (:meth:`FakeKubeApi.add_pod` with ``index``) carry their index
  in the ``batch.kubernetes.io/job-completion-index`` annotation and label and the
  hostname ``<job>-<index>``;
* Services (a headless one keeps ``clusterIP: None``, any other gets an address) and
  NetworkPolicies (``spec.podSelector`` required) are created, read, patched and
  deleted like Secrets;
* pods are listed by ``labelSelector`` (``k=v``, ``k==v``, ``k!=v``, comma-separated);
  a pod log is ``text/plain``; asking for the log of a container that is still
  waiting answers 400, as the real server does.  Each line of a log keeps the time it
  was written (:meth:`FakeKubeApi.write_log` adds lines as a running container prints
  them): ``timestamps=true`` starts each line with it (RFC 3339, nanoseconds, UTC, and a
  space), ``sinceTime`` keeps the lines written in that second or after (the API server
  passes it on to the kubelet to the second), and ``limitBytes`` counts what is sent,
  times included;
* ``PATCH`` takes a strategic-merge or merge patch (applied as a JSON merge
  patch, RFC 7386: enough for the launcher's ``metadata.ownerReferences``);
* ``DELETE`` of a Job reads ``propagationPolicy`` from the ``DeleteOptions`` body
  or the query: ``Foreground`` or ``Background`` deletes the pods it owns (and a
  Secret, Service or NetworkPolicy it owns) with it, while none (or ``Orphan``)
  leaves them behind, as a batch/v1 Job's default does.  Deletion is immediate (no
  finalizers modelled);
* Jobs and pods are listed by ``labelSelector``, the list's ``metadata`` carrying the
  ``resourceVersion`` it was read at; every change (create, patch, status, delete)
  takes the next resourceVersion and is kept as an event;
* ``?watch=true&resourceVersion=N`` streams, as JSON lines of ``{type, object}``
  (chunked), every event after N that the selector matches, then waits for more
  until ``timeoutSeconds`` and closes; a BOOKMARK ends it when
  ``allowWatchBookmarks`` is set.  A resourceVersion older than the kept history
  (:meth:`FakeKubeApi.expire_history`) gets an ``ERROR`` event with a 410 ``Expired``
  Status, as etcd's compaction makes a real server send.

Tests script answers (``script("POST", path, 429, headers={"Retry-After": "1"})``,
a delay, a dropped connection, :meth:`FakeKubeApi.drop_next_watch`), set a Job's
status and add its pods, and read every request back (method, path, query,
monotonic time, parsed body), or their numbers by verb (:meth:`FakeKubeApi.count`).

Not modelled: authentication, resourceVersion conflicts, field
validation beyond names, the Job controller (tests play it with
:meth:`FakeKubeApi.set_job_status` and :meth:`FakeKubeApi.add_pod`).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           405: "MethodNotAllowed", 409: "AlreadyExists", 415: "UnsupportedMediaType",
           422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
           503: "ServiceUnavailable", 504: "Timeout"}
PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json")

_NS = r"(?P<ns>[^/]+)"
_NAME = r"(?P<name>[^/]+)"
ROUTES = [
    ("POST", re.compile(rf"/api/v1/namespaces/{_NS}/secrets"), "create_secret"),
    ("GET", re.compile(rf"/api/v1/namespaces/{_NS}/secrets/{_NAME}"), "read_secret"),
    ("PATCH", re.compile(rf"/api/v1/namespaces/{_NS}/secrets/{_NAME}"), "patch_secret"),
    ("POST", re.compile(rf"/api/v1/namespaces/{_NS}/configmaps"), "create_configmap"),
    ("PATCH", re.compile(rf"/api/v1/namespaces/{_NS}/configmaps/{_NAME}"), "patch_configmap"),
    ("DELETE", re.compile(rf"/api/v1/namespaces/{_NS}/configmaps/{_NAME}"),
     "delete_configmap"),
    ("POST", re.compile(rf"/apis/batch/v1/namespaces/{_NS}/jobs"), "create_job"),
    ("GET", re.compile(rf"/apis/batch/v1/namespaces/{_NS}/jobs"), "list_jobs"),
    ("GET", re.compile(rf"/apis/batch/v1/namespaces/{_NS}/jobs/{_NAME}"), "read_job"),
    ("DELETE", re.compile(rf"/apis/batch/v1/namespaces/{_NS}/jobs/{_NAME}"), "delete_job"),
    ("DELETE", re.compile(rf"/api/v1/namespaces/{_NS}/secrets/{_NAME}"), "delete_secret"),
    ("GET", re.compile(rf"/api/v1/namespaces/{_NS}/pods"), "list_pods"),
    ("GET", re.compile(rf"/api/v1/namespaces/{_NS}/pods/{_NAME}/log"), "read_log"),
    ("POST", re.compile(rf"/api/v1/namespaces/{_NS}/services"), "create_service"),
    ("GET", re.compile(rf"/api/v1/namespaces/{_NS}/services/{_NAME}"), "read_service"),
    ("PATCH", re.compile(rf"/api/v1/namespaces/{_NS}/services/{_NAME}"), "patch_service"),
    ("DELETE", re.compile(rf"/api/v1/namespaces/{_NS}/services/{_NAME}"), "delete_service"),
    ("POST", re.compile(rf"/apis/networking.k8s.io/v1/namespaces/{_NS}/networkpolicies"),
     "create_network_policy"),
    ("GET", re.compile(rf"/apis/networking.k8s.io/v1/namespaces/{_NS}/networkpolicies/{_NAME}"),
     "read_network_policy"),
    ("PATCH", re.compile(rf"/apis/networking.k8s.io/v1/namespaces/{_NS}/networkpolicies/{_NAME}"),
     "patch_network_policy"),
    ("DELETE", re.compile(rf"/apis/networking.k8s.io/v1/namespaces/{_NS}/networkpolicies/"
                          rf"{_NAME}"), "delete_network_policy"),
]
WATCHABLE = {  # collection path → route family
    re.compile(rf"/apis/batch/v1/namespaces/{_NS}/jobs"): "job",
    re.compile(rf"/api/v1/namespaces/{_NS}/pods"): "pod",
}
KINDS = {  # route family → (kind, apiVersion, resource, group)
    "secret": ("Secret", "v1", "secrets", ""),
    "configmap": ("ConfigMap", "v1", "configmaps", ""),
    "job": ("Job", "batch/v1", "jobs", "batch"),
    "pod": ("Pod", "v1", "pods", ""),
    "service": ("Service", "v1", "services", ""),
    "networkpolicy": ("NetworkPolicy", "networking.k8s.io/v1", "networkpolicies",
                      "networking.k8s.io"),
}
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


@dataclass
class Response:
    status: int
    body: Any = None  # dict → JSON; str or bytes → text/plain
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    time: float  # time.monotonic() on arrival
    body: Any
    headers: dict[str, str]  # names lower-cased


@dataclass
class Event:
    version: int
    family: str
    namespace: str
    type: str  # ADDED | MODIFIED | DELETED
    object: dict[str, Any]


@dataclass
class Script:
    method: str
    path: str
    response: Response | None  # None: answer normally (after the delay)
    times: int | None  # None: every matching request from now on
    delay: float = 0.0
    drop: bool = False


def status_body(code: int, message: str, reason: str | None = None,
                **details: Any) -> dict[str, Any]:
    """A ``Status`` object, as the API server sends for every error."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": message,
                            "reason": reason or REASONS.get(code, "Unknown"), "code": code}
    if details:
        body["details"] = details
    return body


def condition(type_: str, reason: str | None = None, message: str | None = None) -> dict:
    """A true Job condition (``Complete``, ``Failed``, ``FailureTarget``...)."""
    out = {"type": type_, "status": "True", "lastProbeTime": _now(),
           "lastTransitionTime": _now()}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def running() -> dict:
    return {"running": {"startedAt": _now()}}


def waiting(reason: str, message: str = "") -> dict:
    return {"waiting": {"reason": reason, "message": message}}


def terminated(exit_code: int, reason: str) -> dict:
    return {"terminated": {"exitCode": exit_code, "reason": reason,
                           "startedAt": _now(), "finishedAt": _now()}}


def _stamp(at: datetime) -> str:
    """A log line's time as the kubelet writes it: RFC 3339 with nanoseconds, in UTC."""
    at = at.astimezone(UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond:06d}000Z"


def _now(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


class _ApiError(Exception):
    def __init__(self, code: int, message: str, reason: str | None = None,
                 **details: Any) -> None:
        super().__init__(message)
        self.response = Response(code, status_body(code, message, reason, **details))


class FakeKubeApi:
    """The API server stand-in; ``with FakeKubeApi() as api: ... api.url``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, ns, name)
        # Each pod's log: (when it was written, a line, its end included if it has one).
        self.pod_logs: dict[tuple[str, str], list[tuple[datetime, str]]] = {}
        self.requests: list[Recorded] = []
        self.scripts: list[Script] = []
        self._version = 1000
        self.changed = threading.Condition(self.lock)
        self.history: list[Event] = []
        self.compacted = 0  # watches from before this resourceVersion get 410
        self.calls: Counter[tuple[str, str]] = Counter()  # (verb, path) → requests
        self._watch_drops: list[int] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeKubeApi:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        httpd.daemon_threads = True
        httpd.api = self  # type: ignore[attr-defined]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, args=(0.05,),
                                        name="fake-kube-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        port = self._httpd.server_address[1]
        return f"http://127.0.0.1:{port}"

    # -- what tests script and set -------------------------------------------------------

    def script(self, method: str, path: str, status: int | None = None, *,
               body: Any = None, headers: dict[str, str] | None = None,
               times: int | None = 1, delay: float = 0.0, drop: bool = False) -> None:
        """Answer the next ``times`` requests to ``method path`` this way (None: always).

        With no ``status``, the request is answered normally after ``delay``; with
        ``drop`` the connection is closed without an answer.
        """
        response = None
        if status is not None:
            if body is None and status >= 400:
                body = status_body(status, f"scripted {status}")
            response = Response(status, body, dict(headers or {}))
        with self.lock:
            self.scripts.append(Script(method, path, response, times, delay, drop))

    def set_job_status(self, name: str, status: dict[str, Any],
                       namespace: str = "default") -> None:
        with self.lock:
            job = self.objects[("job", namespace, name)]
            job["status"] = copy.deepcopy(status)
            self._put("job", namespace, name, job, "MODIFIED")

    def add_pod(self, job: str, *, state: dict[str, Any], namespace: str = "default",
                name: str | None = None, phase: str = "Running", log: str = "",
                created: datetime | None = None, index: int | None = None) -> str:
        """A pod of ``job`` as the Job controller would make it, its one container in ``state``.

        An Indexed Job's pod carries its index (``index``) in its annotation and label,
        its hostname ``<job>-<index>`` and its template's subdomain, as the controller
        sets them."""
        with self.lock:
            owner = self.objects[("job", namespace, job)]
            indexed = owner["spec"].get("completionMode") == "Indexed"
            if indexed and (index is None or not 0 <= index < owner["spec"]["completions"]):
                raise ValueError(f"a pod of Indexed Job {job} needs an index below "
                                 f"{owner['spec']['completions']}")
            name = name or (f"{job}-{index}-{uuid.uuid4().hex[:5]}" if indexed
                            else f"{job}-{uuid.uuid4().hex[:5]}")
            spec = copy.deepcopy(owner["spec"]["template"].get("spec", {}))
            container = spec["containers"][0]
            pod = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                    "resourceVersion": self._next_version(),
                    "creationTimestamp": _now(created),
                    "labels": dict(owner["spec"]["template"]["metadata"]["labels"]),
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                         "uid": owner["metadata"]["uid"], "controller": True,
                                         "blockOwnerDeletion": True}],
                },
                "spec": spec,
                "status": {"phase": phase, "containerStatuses": [{
                    "name": container["name"], "image": container["image"], "imageID": "",
                    "ready": "running" in state, "restartCount": 0, "state": state}]},
            }
            if indexed:
                meta = pod["metadata"]
                meta.setdefault("annotations", {})[INDEX_ANNOTATION] = str(index)
                meta["labels"][INDEX_ANNOTATION] = str(index)
                spec["hostname"] = f"{job}-{index}"
            self._put("pod", namespace, name, pod, "ADDED")
            self.pod_logs[(namespace, name)] = []
        if log:
            self.write_log(name, log, namespace, created)
        return name

    def write_log(self, pod: str, text: str, namespace: str = "default",
                  at: datetime | None = None) -> None:
        """``text`` added to the pod's log, its lines written at ``at`` (now by default); a
        line the last write left unfinished goes on, keeping the time it began."""
        at = at or datetime.now(UTC)
        with self.lock:
            lines = self.pod_logs[(namespace, pod)]
            if lines and not lines[-1][1].endswith("\n"):
                began, start = lines.pop()
                text, at = start + text, began
            lines += [(at, line) for line in text.splitlines(keepends=True)]

    def add_job(self, body: dict[str, Any], namespace: str = "default") -> str:
        """Store a Job as ``POST`` would, without a request (to fill the server quickly)."""
        with self.lock:
            body = copy.deepcopy(body)
            name = self._check_new("job", body, namespace, "")
            self._store_job(body, namespace, name)
        return name

    def delete(self, kind: str, name: str, namespace: str = "default") -> None:
        """Remove an object as someone else's ``kubectl delete`` would (a DELETED event)."""
        with self.lock:
            self._remove((kind, namespace, name))

    def set_pod_state(self, name: str, state: dict[str, Any], namespace: str = "default",
                      phase: str | None = None) -> None:
        with self.lock:
            pod = self.objects[("pod", namespace, name)]
            pod["status"]["containerStatuses"][0]["state"] = copy.deepcopy(state)
            if phase:
                pod["status"]["phase"] = phase
            self._put("pod", namespace, name, pod, "MODIFIED")

    def expire_history(self) -> None:
        """Forget every event so far, as etcd's compaction does: a watch from an older
        resourceVersion than the current one is answered 410 Expired."""
        with self.lock:
            self.history.clear()
            self.compacted = self._version

    def drop_next_watch(self, after_events: int = 0) -> None:
        """The next watch sends ``after_events`` events, then loses its connection."""
        with self.lock:
            self._watch_drops.append(after_events)

    # -- what tests read -------------------------------------------------------------------

    def count(self, verb: str | None = None) -> int:
        """Requests served so far with that verb (list, watch, get, create, patch, delete),
        or all of them."""
        with self.lock:
            return sum(n for (v, _), n in self.calls.items() if verb in (None, v))

    def stored(self, kind: str, namespace: str = "default") -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(obj) for (k, ns, _), obj in self.objects.items()
                    if k == kind and ns == namespace]

    def requests_to(self, method: str, path: str) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method and r.path == path]

    # -- serving ---------------------------------------------------------------------------

    def _record(self, method: str, target: str, body: Any, headers: dict[str, str]) -> Recorded:
        parts = urlsplit(target)
        rec = Recorded(method, parts.path, parse_qs(parts.query), time.monotonic(), body, headers)
        with self.lock:
            self.requests.append(rec)
            self.calls[(_verb(rec), rec.path)] += 1
        return rec

    def _scripted(self, method: str, path: str) -> Script | None:
        with self.lock:
            for script in self.scripts:
                if script.method == method and script.path == path:
                    if script.times is not None:
                        script.times -= 1
                        if script.times == 0:
                            self.scripts.remove(script)
                    return script
        return None

    def handle(self, req: Recorded, content_type: str) -> Response:
        for method, pattern, handler in ROUTES:
            match = pattern.fullmatch(req.path)
            if match is None:
                continue
            if method != req.method:
                continue
            try:
                with self.lock:
                    return getattr(self, handler)(req, content_type, **match.groupdict())
            except _ApiError as exc:
                return exc.response
        if any(p.fullmatch(req.path) for _, p, _ in ROUTES):
            return Response(405, status_body(405, "the server does not allow this method "
                                                  "on the requested resource"))
        return Response(404, status_body(404, "the server could not find the requested "
                                              "resource"))

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _put(self, family: str, ns: str, name: str, obj: dict[str, Any], kind: str) -> None:
        """Store ``obj`` at the next resourceVersion and keep the event (lock held)."""
        obj["metadata"]["resourceVersion"] = self._next_version()
        self.objects[(family, ns, name)] = obj
        self._emit(family, ns, kind, obj)

    def _remove(self, key: tuple[str, str, str]) -> None:
        obj = self.objects.pop(key)
        obj["metadata"]["resourceVersion"] = self._next_version()
        self._emit(key[0], key[1], "DELETED", obj)

    def _emit(self, family: str, ns: str, kind: str, obj: dict[str, Any]) -> None:
        self.history.append(Event(self._version, family, ns, kind, copy.deepcopy(obj)))
        self.changed.notify_all()

    def events_after(self, family: str, ns: str, version: int, selector: str,
                     deadline: float, bookmark: bool = False) -> Iterator[dict[str, Any]]:
        """A watch's events after ``version``, as they happen, until ``deadline``; then a
        BOOKMARK of the last resourceVersion looked at, if asked for."""
        wanted = _parse_selector(selector)
        with self.lock:
            if version < self.compacted:
                yield {"type": "ERROR", "object": status_body(
                    410, f"too old resource version: {version} ({self.compacted})", "Expired")}
                return
        seen = version
        while True:
            with self.lock:
                fresh = [e for e in self.history if e.version > seen]
                if not fresh:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.changed.wait(min(left, 0.1))
                    continue
            seen = fresh[-1].version
            for event in fresh:
                if (event.family, event.namespace) == (family, ns) and _selects(wanted,
                                                                             event.object):
                    yield {"type": event.type, "object": event.object}
        if bookmark:
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(seen)}}}

    def _watch_drop(self) -> int | None:
        with self.lock:
            return self._watch_drops.pop(0) if self._watch_drops else None

    def _check_new(self, family: str, body: Any, ns: str, content_type: str) -> str:
        kind, api_version, resource, group = KINDS[family]
        # No Content-Type means the first supported one, JSON (as the real server negotiates);
        # the Python client sends none on create.
        if content_type and not content_type.startswith("application/json"):
            raise _ApiError(415, "the body of the request was in an unknown format - "
                                 "accepted media types include: application/json")
        if not isinstance(body, dict):
            raise _ApiError(400, "the request body is not a JSON object")
        if body.get("kind") != kind or body.get("apiVersion") != api_version:
            raise _ApiError(400, f"the API version in the data ({body.get('apiVersion')}) "
                                 f"does not match the expected API version ({api_version})")
        meta = body.setdefault("metadata", {})
        if meta.get("namespace", ns) != ns:
            raise _ApiError(400, "the namespace of the provided object does not match the "
                                 "namespace sent on the request")
        name = meta.get("name")
        valid = DNS_LABEL if family in ("job", "service") else DNS_SUBDOMAIN
        if not name or len(name) > (63 if family == "job" else 253) or not valid.fullmatch(name):
            raise _ApiError(422, f'{kind} "{name}" is invalid: metadata.name: Invalid value',
                            name=name, group=group, kind=resource)
        if (family, ns, name) in self.objects:
            qualified = f"{resource}.{group}" if group else resource
            raise _ApiError(409, f'{qualified} "{name}" already exists', "AlreadyExists",
                            name=name, group=group, kind=resource)
        meta.update(namespace=ns, uid=str(uuid.uuid4()), resourceVersion=self._next_version(),
                    creationTimestamp=_now(), generation=1)
        return name

    def _get(self, family: str, ns: str, name: str) -> dict[str, Any]:
        obj = self.objects.get((family, ns, name))
        if obj is None:
            _, _, resource, group = KINDS[family]
            qualified = f"{resource}.{group}" if group else resource
            raise _ApiError(404, f'{qualified} "{name}" not found', name=name, group=group,
                            kind=resource)
        return obj

    def create_secret(self, req: Recorded, content_type: str, ns: str) -> Response:
        body = copy.deepcopy(req.body)
        name = self._check_new("secret", body, ns, content_type)
        data = dict(body.get("data") or {})
        for key, value in (body.pop("stringData", None) or {}).items():
            data[key] = base64.b64encode(value.encode()).decode()
        body["data"] = data
        body.setdefault("type", "Opaque")
        self._put("secret", ns, name, body, "ADDED")
        return Response(201, copy.deepcopy(body))

    def read_secret(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        return Response(200, copy.deepcopy(self._get("secret", ns, name)))

    def patch_secret(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        if content_type.split(";")[0].strip() not in PATCH_TYPES:
            raise _ApiError(415, f"the body of the request was in an unknown format - "
                                 f"accepted media types include: {', '.join(PATCH_TYPES)}")
        secret = self._get("secret", ns, name)
        patched = _merge(secret, req.body)
        if secret.get("immutable") and patched.get("data") != secret.get("data"):
            raise _ApiError(422, f'Secret "{name}" is invalid: data: Forbidden: field is '
                                 f"immutable when `immutable` is set")
        self._put("secret", ns, name, patched, "MODIFIED")
        return Response(200, copy.deepcopy(patched))

    def create_configmap(self, req: Recorded, content_type: str, ns: str) -> Response:
        body = copy.deepcopy(req.body)
        name = self._check_new("configmap", body, ns, content_type)
        self._put("configmap", ns, name, body, "ADDED")
        return Response(201, copy.deepcopy(body))

    def patch_configmap(self, req: Recorded, content_type: str, ns: str,
                        name: str) -> Response:
        if content_type.split(";")[0].strip() not in PATCH_TYPES:
            raise _ApiError(415, "the body of the request was in an unknown format")
        patched = _merge(self._get("configmap", ns, name), req.body)
        self._put("configmap", ns, name, patched, "MODIFIED")
        return Response(200, copy.deepcopy(patched))

    def delete_configmap(self, req: Recorded, content_type: str, ns: str,
                         name: str) -> Response:
        self._get("configmap", ns, name)
        self._remove(("configmap", ns, name))
        return _deleted(name)

    def create_job(self, req: Recorded, content_type: str, ns: str) -> Response:
        body = copy.deepcopy(req.body)
        name = self._check_new("job", body, ns, content_type)
        self._store_job(body, ns, name)
        return Response(201, copy.deepcopy(body))

    def _store_job(self, body: dict[str, Any], ns: str, name: str) -> None:
        """What the server adds to a new Job: defaults, its selector and pod labels."""
        uid = body["metadata"]["uid"]
        spec = body.setdefault("spec", {})
        _check_job_spec(name, spec)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
        template_meta.setdefault("labels", {}).update({
            "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
            "batch.kubernetes.io/job-name": name, "job-name": name})
        body["status"] = {}
        self._put("job", ns, name, body, "ADDED")

    def read_job(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        return Response(200, copy.deepcopy(self._get("job", ns, name)))

    def delete_job(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        job = self._get("job", ns, name)
        self._remove(("job", ns, name))
        if propagation(req) in ("Foreground", "Background"):
            uid = job["metadata"]["uid"]
            for key in [k for k, obj in self.objects.items() if _owned_by(obj, uid)]:
                self._remove(key)
        return _deleted(name)

    def create_service(self, req: Recorded, content_type: str, ns: str) -> Response:
        body = copy.deepcopy(req.body)
        name = self._check_new("service", body, ns, content_type)
        spec = body.setdefault("spec", {})
        if spec.get("clusterIP") != "None":  # a headless Service allocates no address
            spec["clusterIP"] = f"10.96.0.{len(self.objects) % 250 + 2}"
        spec.setdefault("type", "ClusterIP")
        self._put("service", ns, name, body, "ADDED")
        return Response(201, copy.deepcopy(body))

    def read_service(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        return Response(200, copy.deepcopy(self._get("service", ns, name)))

    def patch_service(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        return self._patch("service", req, content_type, ns, name)

    def delete_service(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        self._get("service", ns, name)
        self._remove(("service", ns, name))
        return _deleted(name)

    def create_network_policy(self, req: Recorded, content_type: str, ns: str) -> Response:
        body = copy.deepcopy(req.body)
        name = self._check_new("networkpolicy", body, ns, content_type)
        if "podSelector" not in (body.get("spec") or {}):
            raise _ApiError(422, f'NetworkPolicy.networking.k8s.io "{name}" is invalid: '
                                 "spec.podSelector: Required value", name=name,
                            group="networking.k8s.io", kind="networkpolicies")
        self._put("networkpolicy", ns, name, body, "ADDED")
        return Response(201, copy.deepcopy(body))

    def read_network_policy(self, req: Recorded, content_type: str, ns: str,
                            name: str) -> Response:
        return Response(200, copy.deepcopy(self._get("networkpolicy", ns, name)))

    def patch_network_policy(self, req: Recorded, content_type: str, ns: str,
                             name: str) -> Response:
        return self._patch("networkpolicy", req, content_type, ns, name)

    def delete_network_policy(self, req: Recorded, content_type: str, ns: str,
                              name: str) -> Response:
        self._get("networkpolicy", ns, name)
        self._remove(("networkpolicy", ns, name))
        return _deleted(name)

    def _patch(self, family: str, req: Recorded, content_type: str, ns: str,
               name: str) -> Response:
        if content_type.split(";")[0].strip() not in PATCH_TYPES:
            raise _ApiError(415, f"the body of the request was in an unknown format - "
                                 f"accepted media types include: {', '.join(PATCH_TYPES)}")
        patched = _merge(self._get(family, ns, name), req.body)
        self._put(family, ns, name, patched, "MODIFIED")
        return Response(200, copy.deepcopy(patched))

    def delete_secret(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        self._get("secret", ns, name)
        self._remove(("secret", ns, name))
        return _deleted(name)

    def list_jobs(self, req: Recorded, content_type: str, ns: str) -> Response:
        return self._list("job", "JobList", "batch/v1", req, ns)

    def list_pods(self, req: Recorded, content_type: str, ns: str) -> Response:
        return self._list("pod", "PodList", "v1", req, ns)

    def _list(self, family: str, kind: str, api_version: str, req: Recorded,
              ns: str) -> Response:
        """Every object of ``family`` the ``labelSelector`` matches, as of now."""
        selector = _parse_selector((req.query.get("labelSelector") or [""])[0])
        items = [copy.deepcopy(obj) for (k, pns, _), obj in self.objects.items()
                 if k == family and pns == ns and _selects(selector, obj)]
        return Response(200, {"kind": kind, "apiVersion": api_version,
                              "metadata": {"resourceVersion": str(self._version)},
                              "items": items})

    def read_log(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        pod = self._get("pod", ns, name)
        statuses = pod["status"]["containerStatuses"]
        wanted = (req.query.get("container") or [statuses[0]["name"]])[0]
        status = next((s for s in statuses if s["name"] == wanted), None)
        if status is None:
            raise _ApiError(400, f"container {wanted} is not valid for pod {name}")
        if "waiting" in status["state"]:
            reason = status["state"]["waiting"].get("reason", "")
            raise _ApiError(400, f'container "{wanted}" in pod "{name}" is waiting to start: '
                                 f"{reason}")
        lines = list(self.pod_logs.get((ns, name), []))
        since = req.query.get("sinceTime")
        if since:  # to the second, as the kubelet gets it
            start = datetime.fromisoformat(since[0].replace("Z", "+00:00")).replace(
                microsecond=0)
            lines = [(at, line) for at, line in lines if at.replace(microsecond=0) >= start]
        stamped = (req.query.get("timestamps") or ["false"])[0] == "true"
        data = "".join((_stamp(at) + " " if stamped else "") + line
                       for at, line in lines).encode()
        limit = req.query.get("limitBytes")
        if limit:  # the API server sends at most this many bytes of the log
            data = data[:int(limit[0])]
        return Response(200, data)


def _check_job_spec(name: str, spec: dict[str, Any]) -> None:
    """What the API server's validation refuses of the Job fields the launcher uses."""
    problems = []
    pod = (spec.get("template") or {}).get("spec") or {}
    if spec.get("completionMode", "NonIndexed") not in ("Indexed", "NonIndexed"):
        problems.append("spec.completionMode: Unsupported value")
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        problems.append("spec.completions: Required value: when completion mode is Indexed")
    if spec.get("podFailurePolicy") is not None and pod.get("restartPolicy") != "Never":
        problems.append("spec.podFailurePolicy: Invalid value: only allowed when "
                        "restartPolicy is Never")
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        codes = rule.get("onExitCodes") or {}
        if codes.get("operator") == "In" and 0 in (codes.get("values") or []):
            problems.append("spec.podFailurePolicy.rules.onExitCodes.values: Invalid value: "
                            "0 is not allowed for the In operator")
    if problems:
        raise _ApiError(422, f'Job.batch "{name}" is invalid: ' + ", ".join(problems),
                        name=name, group="batch", kind="jobs")


def _deleted(name: str) -> Response:
    return Response(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                          "status": "Success", "details": {"name": name}})


def propagation(req: Recorded) -> str | None:
    """A DELETE's ``propagationPolicy``: from its DeleteOptions body, else its query."""
    if isinstance(req.body, dict) and req.body.get("propagationPolicy"):
        return str(req.body["propagationPolicy"])
    return (req.query.get("propagationPolicy") or [None])[0]


def _owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def _verb(req: Recorded) -> str:
    """The Kubernetes verb of a request: a GET of a collection lists it (or watches it)."""
    if req.method != "GET":
        return {"POST": "create", "PATCH": "patch", "PUT": "update",
                "DELETE": "delete"}.get(req.method, req.method.lower())
    if (req.query.get("watch") or [""])[0] in ("true", "1"):
        return "watch"
    return "list" if any(p.fullmatch(req.path) for p in WATCHABLE) else "get"


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _parse_selector(text: str) -> list[tuple[str, str, str]]:
    out = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        for op in ("!=", "==", "="):
            if op in term:
                key, value = term.split(op, 1)
                out.append((key.strip(), "!=" if op == "!=" else "=", value.strip()))
                break
        else:
            out.append((term, "exists", ""))
    return out


def _selects(selector: list[tuple[str, str, str]], obj: dict[str, Any]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for key, op, value in selector:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle's algorithm and
        # delayed ACKs hold each keep-alive answer ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        pass  # quiet: tests read self.server.api.requests instead

    def _serve(self) -> None:
        api: FakeKubeApi = self.server.api
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {k.lower(): v for k, v in self.headers.items()}  # case-insensitive
        req = api._record(self.command, self.path, body, headers)
        script = api._scripted(req.method, req.path)
        if script is not None and script.delay:
            time.sleep(script.delay)
        if script is not None and script.drop:
            self.close_connection = True
            return
        if _verb(req) == "watch" and (script is None or script.response is None):
            self._watch(api, req)
            return
        response = script.response if script and script.response else None
        if response is None:
            response = api.handle(req, self.headers.get("Content-Type") or "")
        self._send(response)

    def _send(self, response: Response) -> None:
        if isinstance(response.body, bytes):  # a log cut by limitBytes: inside a character
            payload, ctype = response.body, "text/plain"
        elif isinstance(response.body, str):
            payload, ctype = response.body.encode(), "text/plain"
        else:
            payload, ctype = json.dumps(response.body).encode(), "application/json"
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            for key, value in response.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a timeout test)

    def _watch(self, api: FakeKubeApi, req: Recorded) -> None:
        """Stream the events after ``resourceVersion``, one JSON line per chunk."""
        family, ns = next((f, m["ns"]) for p, f in WATCHABLE.items()
                          if (m := p.fullmatch(req.path)))
        query = {k: v[0] for k, v in req.query.items()}
        timeout = float(query.get("timeoutSeconds") or 30)
        drop_after = api._watch_drop()
        events = api.events_after(family, ns, int(query.get("resourceVersion") or 0),
                                  query.get("labelSelector", ""), time.monotonic() + timeout,
                                  bookmark=query.get("allowWatchBookmarks") in ("true", "1"))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for sent, event in enumerate(events):
                if sent == drop_after:
                    break
                self._chunk(json.dumps(event).encode() + b"\n")
            if drop_after is not None:  # the connection is lost: no final chunk
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

