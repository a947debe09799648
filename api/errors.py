"""One error body everywhere: ``{code, message, errors: [{variable?, field?, rule, message}]}``.

The domain's errors (``shared.errors``) know nothing of HTTP: :data:`STATUS` says
which status each answers, for the JSON API and the pages alike.
"""

from __future__ import annotations

from typing import Any

import redis
from flask import jsonify, request
from flask_smorest import Api
from werkzeug.exceptions import HTTPException

from api.schemas import Error
from shared.env.envlist import capped
from shared.errors import (
    BadRequest,
    EnvInvalid,
    Forbidden,
    LaunchFailed,
    NotFound,
    PolicyConflict,
    PolicyInvalid,
    PreconditionFailed,
    Problem,
    QuotaExceeded,
    ResourcesInvalid,
    SecretsUnavailable,
    StateConflict,
    StoreFull,
    TaskenvError,
    TooManyRequests,
    TransientError,
    Unauthorized,
)
from shared.store.room import RETRY_AFTER, full

# Most specific class first; an error answers the status of the nearest class listed.
STATUS: dict[type[TaskenvError], int] = {
    EnvInvalid: 422,
    PolicyConflict: 422,
    PolicyInvalid: 422,
    SecretsUnavailable: 422,
    ResourcesInvalid: 422,
    BadRequest: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    QuotaExceeded: 409,
    StateConflict: 409,
    PreconditionFailed: 412,
    TooManyRequests: 429,
    LaunchFailed: 500,
    StoreFull: 503,
    TransientError: 503,
    TaskenvError: 500,
}


def status_for(error: TaskenvError) -> int:
    """The HTTP status a domain error answers."""
    return next(STATUS[cls] for cls in type(error).__mro__ if cls in STATUS)


def body(code: str, message: str, problems: list[Problem] | None = None) -> dict[str, Any]:
    """The one error shape; however many problems there are, at most a capped list."""
    return {"code": code, "message": message,
            "errors": [p.to_dict() for p in capped(problems or [])]}


def headers_for(error: TaskenvError) -> dict[str, str]:
    """``Retry-After`` on a 429 whose wait is known, and on a full store."""
    if isinstance(error, TooManyRequests) and error.retry_after is not None:
        return {"Retry-After": str(error.retry_after)}
    if isinstance(error, StoreFull):
        return {"Retry-After": str(RETRY_AFTER)}
    return {}


def _schema_problems(messages: Any, path: str = "") -> list[Problem]:
    """Flatten marshmallow's nested ``{field: [msg]}`` into one problem per message."""
    if isinstance(messages, dict):
        out: list[Problem] = []
        for key, sub in messages.items():
            if key in ("json", "query", "headers") and not path:
                out += _schema_problems(sub, "")
            else:
                out += _schema_problems(sub, f"{path}.{key}" if path else str(key))
        return out
    if isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        return [Problem(rule="schema", field=path or None, message=f"{path}: {m}" if path else m)
                for m in messages]
    if isinstance(messages, list):
        return [p for m in messages for p in _schema_problems(m, path)]
    return [Problem(rule="schema", field=path or None, message=str(messages))]


def refuse_a_change_without_a_body() -> None:
    """A PUT or PATCH of the JSON API says what to change: without a body it is a 400, not
    a change of nothing (a schema whose fields are all optional would take it as {})."""
    if (request.method in ("PUT", "PATCH") and request.path.startswith("/api/")
            and request.routing_exception is None  # a method the route lacks stays a 405
            and not request.get_data(cache=True)):
        raise BadRequest(f"{request.method} {request.path} needs a JSON body saying what "
                         "to change")


class TaskenvApi(Api):
    ERROR_SCHEMA = Error

    def __init__(self, app: Any) -> None:
        self._undocumented: list[tuple[Any, str, Any]] = []
        self._components_registered = False
        super().__init__(app)
        app.register_error_handler(TaskenvError, self.handle_taskenv_error)
        app.register_error_handler(redis.RedisError, self.handle_redis_error)
        # json.loads recurses once per level: a body nested deeper than Python's stack
        # ends there.  Nothing else in a request recurses without bound.
        app.register_error_handler(RecursionError, self.handle_too_deep)
        app.before_request(refuse_a_change_without_a_body)

    def register_blueprint(self, blp: Any, *, parameters: Any = None, **options: Any) -> None:
        """Serve the blueprint now and document it when the OpenAPI document is first
        read: building the document is most of an app's start-up, and most app instances
        (each test's, each worker process's) are never asked for it."""
        name = options.get("name", blp.name)
        self._app.extensions["flask-smorest"]["blp_name_to_api"][name] = self
        self._app.register_blueprint(blp, **options)
        self._undocumented.append((blp, name, parameters))

    # flask-smorest registers its components (a response per HTTP status, the ETag and
    # pagination headers) at start-up: half of what is left of an app's start-up once
    # the blueprints are documented lazily.  The same components, in the same order, are
    # registered when the document is first read, before any path.
    def _register_responses(self) -> None:
        pass

    def _register_etag_headers(self) -> None:
        pass

    def _register_pagination_header(self) -> None:
        pass

    def _document(self) -> None:
        if not self._components_registered:
            self._components_registered = True
            super()._register_responses()
            super()._register_etag_headers()
            super()._register_pagination_header()
        while self._undocumented:  # in registration order, as the tags are listed
            blp, name, parameters = self._undocumented.pop(0)
            blp.register_views_in_doc(self, self._app, self.spec, name=name,
                                      parameters=parameters)
            self.spec.tag({"name": name, "description": blp.description})

    def _openapi_json(self) -> Any:
        self._document()
        return super()._openapi_json()

    def handle_taskenv_error(self, error: TaskenvError) -> Any:
        payload = body(error.code, error.message, error.problems)
        if isinstance(error, PreconditionFailed):  # what to send If-Match next time
            payload["revision"] = error.current_revision
            return jsonify(payload), 412
        return jsonify(payload), status_for(error), headers_for(error)

    def handle_redis_error(self, error: redis.RedisError) -> Any:
        # Safe to retry: with the same Idempotency-Key a retry never makes a second task.
        if isinstance(error, redis.exceptions.OutOfMemoryError):
            return self.handle_taskenv_error(full(None, 0))
        return (jsonify(body("unavailable", "the task store is unavailable; retry shortly")),
                503, {"Retry-After": "1"})

    def handle_too_deep(self, error: RecursionError) -> Any:
        return jsonify(body("bad_request", "the JSON body is nested too deeply")), 400

    def handle_http_exception(self, error: HTTPException) -> Any:
        data = getattr(error, "data", None) or {}
        problems = _schema_problems(data["messages"]) if "messages" in data else []
        code = (error.name or "error").lower().replace(" ", "_")
        message = data.get("message") or error.description or error.name
        if problems:
            message = "the request does not have the expected shape"
        # Keep what werkzeug adds (Allow on a 405, say), but not its HTML content type.
        headers = {k: v for k, v in error.get_headers() if k.lower() != "content-type"}
        headers.update(data.get("headers") or {})
        return jsonify(body(code, message, problems)), error.code or 500, headers
