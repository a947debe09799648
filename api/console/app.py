"""The web console, put together: its sessions, every route module, its blueprint."""

from __future__ import annotations

from typing import Any

from flask import Flask
from jinja2 import BytecodeCache
from jinja2.bccache import Bucket

from api.console.blueprint import bp
from api.console.sessions import RedisSessions
from shared.access.tokens import SessionStore


class CompiledTemplates(BytecodeCache):
    """The console's templates compiled once per process, whichever app renders them: a
    process usually builds one app, but the tests build one per test, and compiling the
    templates again each time was most of what rendering a page cost them.  A template
    whose source changes gets a new checksum, and Jinja compiles it again."""

    def __init__(self) -> None:
        self.code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        if bucket.key in self.code:
            bucket.bytecode_from_string(self.code[bucket.key])

    def dump_bytecode(self, bucket: Bucket) -> None:
        self.code[bucket.key] = bucket.bytecode_to_string()


COMPILED = CompiledTemplates()


def jinja_options(app: Flask) -> dict[str, Any]:
    """The app's Jinja options with the process's compiled templates shared."""
    return {**app.jinja_options, "bytecode_cache": COMPILED}


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
    app.jinja_options = jinja_options(app)  # before the first page builds the environment
    app.register_blueprint(bp)
