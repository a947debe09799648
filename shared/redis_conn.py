"""One way to connect to Redis, for a plain URL or a Sentinel-managed one.

``redis://:PASSWORD@host:6379/0`` connects directly.
``sentinel://:PASSWORD@s1:26379;sentinel://:PASSWORD@s2:26379/0`` (the form Celery's
broker understands too) asks the sentinels for the current master named by
``TASKENV_REDIS_MASTER_NAME``, so a failover needs no change of configuration.  As
in Celery's broker, the password is the master's (``requirepass``): the sentinels
themselves are asked without one.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote, urlsplit

import redis
from redis.sentinel import Sentinel

log = logging.getLogger(__name__)


def as_text(value: object) -> str:
    """A Redis reply as text, whether or not the client decodes responses."""
    return value.decode() if isinstance(value, bytes) else str(value)


def warn_if_evicting(client: redis.Redis) -> str | None:
    """Warn when Redis may evict keys: queue messages and task records would vanish."""
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy")
    except redis.RedisError:
        return None  # CONFIG is disabled on some managed services: nothing to check
    if policy and policy != "noeviction":
        log.warning("Redis maxmemory-policy is %r: under memory pressure it may evict queued "
                    "messages and task records; set it to 'noeviction'", policy)
    return policy


def connect(url: str, master_name: str = "mymaster", **kwargs: object) -> redis.Redis:
    kwargs.setdefault("decode_responses", True)
    if not url.startswith("sentinel://"):
        return redis.Redis.from_url(url, **kwargs)  # type: ignore[arg-type]
    hosts, db, password = parse_sentinel_url(url)
    sentinel = Sentinel(hosts)
    return sentinel.master_for(master_name, db=db, password=password, **kwargs)


def parse_sentinel_url(url: str) -> tuple[list[tuple[str, int]], int, str | None]:
    hosts: list[tuple[str, int]] = []
    db, password = 0, None
    for part in url.split(";"):
        parsed = urlsplit(part.strip())
        hosts.append((parsed.hostname or "127.0.0.1", parsed.port or 26379))
        password = unquote(parsed.password) if parsed.password else password
        if parsed.path.strip("/"):
            db = int(parsed.path.strip("/"))
    return hosts, db, password
