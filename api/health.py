"""Liveness and readiness, outside the versioned API and without authentication."""

from __future__ import annotations

from flask import Blueprint

from api import svc

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> tuple[dict[str, str], int]:
    try:
        svc().tasks.ping()
    except Exception:  # any failure to reach Redis means not ready
        return {"status": "unavailable", "redis": "unreachable"}, 503
    return {"status": "ok", "redis": "ok"}, 200
