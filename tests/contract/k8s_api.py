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
  its pod template, and ``status: {}``;
* pods are listed by ``labelSelector`` (``k=v``, ``k==v``, ``k!=v``, comma-separated);
  a pod log is ``text/plain``; asking for the log of a container that is still
  waiting answers 400, as the real server does;
* ``PATCH`` takes a strategic-merge or merge patch (applied as a JSON merge
  patch, RFC 7386: enough for the launcher's ``metadata.ownerReferences``);
* ``DELETE`` of a Job reads ``propagationPolicy`` from the ``DeleteOptions`` body
  or the query: ``Foreground`` or ``Background`` deletes the pods it owns (and a
  Secret it owns) with it, while none (or ``Orphan``) leaves them behind, as a
  batch/v1 Job's default does.  Deletion is immediate (no finalizers modelled).

Tests script answers (``script("POST", path, 429, headers={"Retry-After": "1"})``,
a delay, a dropped connection), set a Job's status and add its pods, and read
every request back (method, path, query, monotonic time, parsed body).

Not modelled: authentication, watches, resourceVersion conflicts, field
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
    ("POST", re.compile(rf"/apis/batch/v1/namespaces/{_NS}/jobs"), "create_job"),
    ("GET", re.compile(rf"/apis/batch/v1/namespaces/{_NS}/jobs/{_NAME}"), "read_job"),
    ("DELETE", re.compile(rf"/apis/batch/v1/namespaces/{_NS}/jobs/{_NAME}"), "delete_job"),
    ("DELETE", re.compile(rf"/api/v1/namespaces/{_NS}/secrets/{_NAME}"), "delete_secret"),
    ("GET", re.compile(rf"/api/v1/namespaces/{_NS}/pods"), "list_pods"),
    ("GET", re.compile(rf"/api/v1/namespaces/{_NS}/pods/{_NAME}/log"), "read_log"),
]
KINDS = {  # route family → (kind, apiVersion, resource, group)
    "secret": ("Secret", "v1", "secrets", ""),
    "job": ("Job", "batch/v1", "jobs", "batch"),
    "pod": ("Pod", "v1", "pods", ""),
}


@dataclass
class Response:
    status: int
    body: Any = None  # dict → JSON; str → text/plain
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
        self.pod_logs: dict[tuple[str, str], str] = {}
        self.requests: list[Recorded] = []
        self.scripts: list[Script] = []
        self._version = 1000
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
            self.objects[("job", namespace, name)]["status"] = copy.deepcopy(status)

    def add_pod(self, job: str, *, state: dict[str, Any], namespace: str = "default",
                name: str | None = None, phase: str = "Running", log: str = "",
                created: datetime | None = None) -> str:
        """A pod of ``job`` as the Job controller would make it, its one container in ``state``."""
        with self.lock:
            owner = self.objects[("job", namespace, job)]
            name = name or f"{job}-{uuid.uuid4().hex[:5]}"
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
            self.objects[("pod", namespace, name)] = pod
            self.pod_logs[(namespace, name)] = log
        return name

    # -- what tests read -------------------------------------------------------------------

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
        valid = DNS_LABEL if family == "job" else DNS_SUBDOMAIN
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
        self.objects[("secret", ns, name)] = body
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
        patched["metadata"]["resourceVersion"] = self._next_version()
        self.objects[("secret", ns, name)] = patched
        return Response(200, copy.deepcopy(patched))

    def create_job(self, req: Recorded, content_type: str, ns: str) -> Response:
        body = copy.deepcopy(req.body)
        name = self._check_new("job", body, ns, content_type)
        uid = body["metadata"]["uid"]
        spec = body.setdefault("spec", {})
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
        template_meta.setdefault("labels", {}).update({
            "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
            "batch.kubernetes.io/job-name": name, "job-name": name})
        body["status"] = {}
        self.objects[("job", ns, name)] = body
        return Response(201, copy.deepcopy(body))

    def read_job(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        return Response(200, copy.deepcopy(self._get("job", ns, name)))

    def delete_job(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        job = self._get("job", ns, name)
        del self.objects[("job", ns, name)]
        if propagation(req) in ("Foreground", "Background"):
            uid = job["metadata"]["uid"]
            for key in [k for k, obj in self.objects.items() if _owned_by(obj, uid)]:
                del self.objects[key]
        return _deleted(name)

    def delete_secret(self, req: Recorded, content_type: str, ns: str, name: str) -> Response:
        self._get("secret", ns, name)
        del self.objects[("secret", ns, name)]
        return _deleted(name)

    def list_pods(self, req: Recorded, content_type: str, ns: str) -> Response:
        selector = _parse_selector((req.query.get("labelSelector") or [""])[0])
        items = [copy.deepcopy(obj) for (k, pns, _), obj in self.objects.items()
                 if k == "pod" and pns == ns and _selects(selector, obj)]
        return Response(200, {"kind": "PodList", "apiVersion": "v1",
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
        return Response(200, self.pod_logs.get((ns, name), ""))


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
        response = script.response if script and script.response else None
        if response is None:
            response = api.handle(req, self.headers.get("Content-Type") or "")
        self._send(response)

    def _send(self, response: Response) -> None:
        if isinstance(response.body, str):
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

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

