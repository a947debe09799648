"""The thin HTTP API: it checks the request's shape, writes the record to
Redis, enqueues the task id and answers.  Everything else happens in workers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis
from flask import Flask

from shared.audit import AuditLog
from shared.config import Settings
from shared.envlist import Limits
from shared.redis_conn import connect, warn_if_evicting
from shared.secrets import Cipher
from shared.store import PolicyStore, TaskStore
from shared.tokens import AuthFailures, TokenStore

Enqueue = Callable[[str, int], None]


@dataclass
class Services:
    settings: Settings
    tasks: TaskStore
    policies: PolicyStore
    limits: Limits
    enqueue: Enqueue
    tokens: TokenStore
    audit: AuditLog
    auth_failures: AuthFailures


def celery_enqueue(settings: Settings) -> Enqueue:
    """New revisions start in the validation stage."""
    from workers.celery_app import stage_sender

    return functools.partial(stage_sender(settings), "validate")


def create_app(test_config: Mapping[str, Any] | None = None,
               redis_client: redis.Redis | None = None,
               enqueue: Enqueue | None = None) -> Flask:
    """Build the API; tests hand in a Redis client (fakeredis) and an enqueue spy."""
    overrides = dict(test_config or {})
    settings = Settings.from_env(**overrides)
    app = Flask(__name__)
    app.config.from_mapping(
        API_TITLE="taskenv",
        API_VERSION="v1",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/api/v1",
        OPENAPI_JSON_PATH="openapi.json",
        MAX_CONTENT_LENGTH=settings.max_request_bytes,
        API_SPEC_OPTIONS={
            "security": [{"bearerAuth": []}],
            "components": {"securitySchemes": {"bearerAuth": {
                "type": "http", "scheme": "bearer",
                "description": "An API token; admins create them at /api/v1/tokens."}}},
        },
    )
    client = redis_client
    if client is None:
        client = connect(settings.redis_url, settings.redis_master_name)
        warn_if_evicting(client)
    cipher = Cipher.from_setting(settings.secret_keys)
    services = Services(
        settings=settings,
        tasks=TaskStore(client, settings.key_prefix, cipher),
        policies=PolicyStore(client, settings.key_prefix, cipher),
        limits=Limits.from_settings(settings),
        enqueue=enqueue or celery_enqueue(settings),
        tokens=TokenStore(client, settings.key_prefix),
        audit=AuditLog(client, settings.key_prefix),
        auth_failures=AuthFailures(client, settings.key_prefix,
                                   settings.auth_failures_per_minute),
    )
    if settings.admin_token:
        services.tokens.ensure(settings.admin_token, owner="admin", role="admin")
    app.extensions["taskenv"] = services
    from api import admin, auth, errors, health, pages, policy, preview, tasks

    auth.init_app(app)
    pages.init_app(app)  # the web console: its session key (SECRET_KEY) and blueprint
    api = errors.TaskenvApi(app)
    for module in (tasks, policy, preview, admin):
        api.register_blueprint(module.blp)
    app.register_blueprint(health.bp)
    return app
