"""The thin HTTP API: it checks the request's shape, writes the record to
Redis, enqueues the task id and answers.  Everything else happens in workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
from flask import Flask

from api import auth, errors, health, metrics, replication
from api.console import app as console
from api.rest import admin, catalog, policy, preview, projects, revisions, tasks
from shared.config import process_settings, read_settings
from workers.services import Enqueue, build_services


def create_app(test_config: Mapping[str, Any] | None = None,
               redis_client: redis.Redis | None = None,
               enqueue: Enqueue | None = None) -> Flask:
    """Build the API; tests hand in settings, a Redis client (fakeredis) and an enqueue spy.

    Without ``test_config``, the process's own settings (``read_settings``, as every
    taskenv process reads them); with it, the environment and those, never ``var/``."""
    settings = process_settings() if test_config is None else read_settings(
        var=None, **test_config)
    app = Flask(__name__, template_folder="console/templates", static_folder="console/static")
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
    services = build_services(settings, redis_client, enqueue)
    if settings.admin_token:
        services.tokens.ensure(settings.admin_token, owner="admin", role="admin")
    app.extensions["taskenv"] = services
    metrics.init_app(app)  # first: a request refused by auth still has an id and is counted
    replication.init_app(app)  # before auth, whose writes are a request's writes too
    auth.init_app(app)
    console.init_app(app)  # the web console: its sessions and its blueprint
    api = errors.TaskenvApi(app)
    for module in (tasks, revisions, policy, projects, preview, admin, catalog):
        api.register_blueprint(module.blp)
    app.register_blueprint(health.bp)
    return app
