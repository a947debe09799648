"""The web console, put together: its sessions, every route module, its blueprint."""

from __future__ import annotations

from flask import Flask

from api.console.blueprint import bp
from api.console.sessions import RedisSessions
from shared.access.tokens import SessionStore


def init_app(app: Flask) -> None:
    """Server-side sessions in Redis (the cookie holds an id only) and the blueprint."""
    # Route modules join ``bp`` when imported: every one of them, here and nowhere else.
    from api.console import catalog, insights, live, pages, policy  # noqa: F401

    services = app.extensions["taskenv"]
    settings = services.settings
    app.config.update(SESSION_COOKIE_NAME="taskenv_session",
                      SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Lax",
                      SESSION_COOKIE_SECURE=bool(settings.session_cookie_secure))
    app.session_interface = RedisSessions(SessionStore(services.redis, settings.key_prefix))
    app.register_blueprint(bp)
