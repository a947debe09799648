"""Who is calling: bearer tokens on every route but health, metrics and the OpenAPI document.

A missing or unknown token answers 401; past a budget of failures per address
(or per token beginning) in a minute, a failing caller gets 429 with Retry-After.
A valid token is always accepted: it is looked up before any failure is counted.
Views ask :func:`scope` whose tasks they may touch and the admin-only blueprints
are listed in ``ADMIN_BLUEPRINTS``.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Flask, g, request

from api.context import svc
from shared.access.tokens import Identity
from shared.errors import Forbidden, NotFound, TooManyRequests, Unauthorized

# The OpenAPI document describes the API, not anyone's data: a client generator or a
# person reading it needs no token first.
PUBLIC_ENDPOINTS = {"health.healthz", "health.readyz", "metrics.scrape", "static",
                    "api-docs.openapi_json"}
# The web pages (api/console/pages.py) authenticate by session cookie, not bearer token.
SESSION_BLUEPRINTS = {"pages"}
# Whole blueprints only admins reach; checked before the body is even parsed, so a
# user learns nothing about these routes beyond 403.
ADMIN_BLUEPRINTS = {"policy", "admin"}
TASK_ID = re.compile(r"[0-9a-f]{32}")  # what TaskStore.create makes: uuid4().hex


def init_app(app: Flask) -> None:
    app.before_request(authenticate)
    app.after_request(security_headers)


def authenticate() -> None:
    if request.endpoint in PUBLIC_ENDPOINTS or request.blueprint in SESSION_BLUEPRINTS:
        return
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    found = identify(token.strip() if scheme.lower() == "bearer" else "")
    if found is None:
        raise Unauthorized("a valid bearer token is required: Authorization: Bearer <token>")
    g.identity = found
    if request.blueprint in ADMIN_BLUEPRINTS and not found.is_admin:
        raise Forbidden("only an admin may do this")
    check_task_id()


def check_task_id() -> None:
    """A route's task id that no task could have is a missing task, answered before
    Redis is asked (the API here, the pages once their session is known)."""
    task_id = (request.view_args or {}).get("task_id")
    if task_id is not None and not TASK_ID.fullmatch(str(task_id)):
        raise NotFound(f"no task {task_id}")


def identify(token: str) -> Identity | None:
    """The identity behind a token (API header or login form); None counts a failure.

    A known token is accepted at once, however many failures came before it from the
    same address.  An unknown one counts a failure (per address and per token
    beginning, one budget for the API and the pages); past the budget this raises
    :class:`TooManyRequests`, answered with ``Retry-After``.
    """
    services = svc()
    found = services.tokens.identify(token) if token else None
    if found is not None:
        return found
    wait = services.auth_failures.fail(str(request.remote_addr), token)
    if wait:
        g.retry_after = wait
        raise TooManyRequests(f"too many failed authentications; try again in {wait} s")
    return None


def identity() -> Identity:
    return g.identity  # type: ignore[no-any-return]


def actor() -> str:
    return identity().owner


def require_admin(doing: str) -> None:
    """403 unless the caller is an admin: ``doing`` says what only an admin may do."""
    if not identity().is_admin:
        raise Forbidden(f"Only an admin may {doing}.")


def scope() -> str | None:
    """The owner whose tasks this caller may see: everyone's for admins."""
    return None if identity().is_admin else identity().owner


def security_headers(response: Any) -> Any:
    headers = response.headers
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("Referrer-Policy", "no-referrer")
    headers.setdefault("Cache-Control", "no-store")
    headers.setdefault("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
    if response.status_code == 401:
        headers.setdefault("WWW-Authenticate", 'Bearer realm="taskenv"')
    if response.status_code == 429 and "retry_after" in g:
        headers.setdefault("Retry-After", str(g.retry_after))
    return response
