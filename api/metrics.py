"""Request ids, request metrics, access log lines and ``GET /metrics``.

Every request gets an id: the client's ``X-Request-ID`` if it is a sane token
(1-64 characters of ``[A-Za-z0-9._-]``), else a new one.  It is bound to every log
line written while the request is answered and returned in the response's
``X-Request-ID`` header, so a user's report can be matched to the API's log.

``/metrics`` needs no token, as ``/healthz`` does not: it shows counts and timings
by route, state, stage and queue, never a task id, a user, a project or a value; the
counters the operations guide alerts on are listed at 0 until their first event.  With
an admin's bearer token the same scrape also splits task transitions by project (a
tenant's name is not for anyone who can reach the port).  It is served on the API's
own address; put it behind the same network policy as the API.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from flask import Blueprint, Flask, Response, g, request

from api import auth
from api.context import services_of, svc
from shared import logs, metrics
from workers.queues import QUEUES

log = logging.getLogger("taskenv.api.access")
bp = Blueprint("metrics", __name__)

REQUEST_ID_HEADER = "X-Request-ID"
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
UNMATCHED = "unmatched"  # a path no route serves: one label, however many paths are tried
# Any token is a method to the HTTP parser: one label for the rest, however many are tried.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def request_id(offered: str | None) -> str:
    """The client's id if it is a sane token, else a new one."""
    if offered and SANE_REQUEST_ID.fullmatch(offered):
        return offered
    return uuid.uuid4().hex


def _begin() -> None:
    g.request_id = request_id(request.headers.get(REQUEST_ID_HEADER))
    g.started = time.perf_counter()
    g.log_token = logs.bind(request_id=g.request_id)


def _end(response: Response) -> Response:
    route = request.endpoint or UNMATCHED
    method = request.method if request.method in METHODS else "other"
    took = time.perf_counter() - g.get("started", time.perf_counter())
    metrics.HTTP_REQUESTS.labels(route=route, method=method,
                                 status=str(response.status_code)).inc()
    metrics.HTTP_DURATION.labels(route=route, method=method).observe(took)
    response.headers[REQUEST_ID_HEADER] = g.get("request_id", "")
    # The route, not the path: a path may hold a task id, a query string anything.
    log.info("%s %s %s %.1fms", method, route, response.status_code, took * 1000)
    return response


def _unbind(_: BaseException | None) -> None:
    token = g.pop("log_token", None)
    if token is not None:
        logs.unbind(token)


def init_app(app: Flask) -> None:
    # The series the operations guide alerts on, at 0 before their first event.
    metrics.start_at_zero(services_of(app).settings.launcher, QUEUES)
    app.before_request(_begin)
    app.after_request(_end)
    app.teardown_request(_unbind)
    app.register_blueprint(bp)


@bp.get("/metrics")
def scrape() -> Response:
    services = svc()
    depth = metrics.QueueDepth(services.redis, services.keys, QUEUES)
    return Response(metrics.exposition(depth, tenants=_by_an_admin()),
                    mimetype="text/plain; version=0.0.4")


def _by_an_admin() -> bool:
    """An admin's bearer token came with the scrape; without one it is anonymous.  A wrong
    token counts as a failed authentication, as anywhere else (so this is no way around
    the guessing budget), and the scrape gets the anonymous view."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    found = auth.identify(token.strip())
    return bool(found is not None and found.is_admin)
