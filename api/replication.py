"""What "accepted" means: with ``TASKENV_REDIS_MIN_REPLICAS=n``, on the primary and on n
replicas.

Redis replicates asynchronously: a write the primary acknowledged but had not yet sent
to a replica is gone when that replica is promoted.  So, with n > 0, every request that
may write (POST, PUT, PATCH, DELETE) makes its Redis calls on one connection, and before
a success is answered, ``WAIT n`` is asked on that connection, bounded by
``TASKENV_REDIS_REPLICA_WAIT_MS``.  Short of n acknowledgements the answer is ``503
unavailable`` with ``Retry-After`` instead: the write may stand or may be lost, and a
retry (with the same ``Idempotency-Key`` for a creation) completes it either way.

The queue message needs no ``WAIT``: the reconciler sends again what a stage never
received.  Reads are not pinned and wait for nothing.
"""

from __future__ import annotations

from contextlib import ExitStack

from flask import Flask, Response, g, jsonify, request

from api.context import services_of
from api.errors import body
from shared.redis_conn import acknowledged, pinned

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
RETRY_AFTER = "1"


def init_app(app: Flask) -> None:
    settings = services_of(app).settings
    if settings.redis_min_replicas <= 0:
        return  # acknowledged by the primary is accepted: nothing to add to a request

    @app.before_request
    def pin() -> None:
        if request.method in WRITES:
            g.pin = ExitStack()
            g.pin.enter_context(pinned(services_of(app).redis))

    @app.after_request
    def wait_for_replicas(response: Response) -> Response:
        if "pin" not in g or response.status_code >= 300:
            return response
        if acknowledged(services_of(app).redis, settings.redis_min_replicas,
                        settings.redis_replica_wait_ms):
            return response
        refused = jsonify(body("unavailable",
                               f"the write was not acknowledged by "
                               f"{settings.redis_min_replicas} Redis replica(s) in time; "
                               "retry shortly (with the same Idempotency-Key)"))
        refused.status_code = 503
        refused.headers["Retry-After"] = RETRY_AFTER
        return refused

    @app.teardown_request
    def unpin(_error: BaseException | None) -> None:
        stack = g.pop("pin", None)
        if stack is not None:
            stack.close()
