"""Liveness and readiness, outside the versioned API and without authentication.

``/healthz`` is liveness: the process answers.  It asks nothing of Redis, so a Redis
outage does not make an orchestrator restart every API process at once.

``/readyz`` is readiness: 200 only when Redis answers, every stage's queue has at
least one live consumer (workers publish themselves, see ``workers.liveness``) and
a reconciler finished a pass recently (``workers.reconcile``).  Otherwise 503 in
the API's one error shape, one entry per thing missing.  Behind sentinels, "no
primary is reachable" is said apart from "Redis does not answer" (during a failover,
until the sentinels promote a replica).
"""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint
from redis.sentinel import MasterNotFoundError

from api.context import svc
from api.errors import body
from shared.errors import Problem
from workers.queues import QUEUES
from workers.services import Services

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> tuple[dict[str, str], int]:
    return {"status": "ok"}, 200


@bp.get("/readyz")
def readyz() -> tuple[dict[str, Any], int]:
    problems = missing(svc(), time.time())
    if problems:
        return body("not_ready", "taskenv is not ready: "
                    + "; ".join(p.message for p in problems), problems), 503
    return {"status": "ok", "queues": list(QUEUES)}, 200


def missing(services: Services, now: float) -> list[Problem]:
    """What keeps the service from doing its work, empty when it is ready."""
    try:
        pipe = services.redis.pipeline(transaction=False)
        for queue in QUEUES:
            pipe.zcount(services.keys.consumers(queue), now, "+inf")
        pipe.exists(services.keys.reconciler_last_pass())
        *consumers, reconciled = pipe.execute()
    except MasterNotFoundError:  # the sentinels answer, and name no primary that does
        return [Problem(rule="redis", field="redis",
                        message="no Redis primary is reachable (the sentinels name none "
                                "that answers: a failover may be under way)")]
    except Exception:  # any failure to reach Redis: nothing else can be known
        return [Problem(rule="redis", field="redis", message="Redis does not answer")]
    problems = [Problem(rule="consumer", field=f"queues.{queue}",
                        message=f"no live worker consumes the {queue} queue")
                for queue, count in zip(QUEUES, consumers, strict=True) if not count]
    if not reconciled:
        problems.append(Problem(rule="reconciler", field="reconciler",
                                message="no reconciler has finished a pass recently"))
    return problems
