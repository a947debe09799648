"""One way to connect to Redis, for a plain URL or a Sentinel-managed one.

``redis://:PASSWORD@host:6379/0`` connects directly.
``sentinel://:PASSWORD@s1:26379;sentinel://:PASSWORD@s2:26379/0`` (the form Celery's
broker understands too) asks the sentinels for the current master named by
``TASKENV_REDIS_MASTER_NAME``, so a failover needs no change of configuration.  As
in Celery's broker, the URL's password is the master's (``requirepass``); the
sentinels' own, if they require one, is ``TASKENV_REDIS_SENTINEL_PASSWORD``.

After a failover every call finds the new primary by itself: a connection that
fails is dropped, and the retry connects again, asking the sentinels where the
primary is now; a ``READONLY`` reply (a connection still on the demoted primary), or a
``NOREPLICAS`` one (a primary the sentinels replaced while it lived on, which refuses
writes once no replica follows it), drops the connection the same way.  Every call is bounded
(``TASKENV_REDIS_TIMEOUT_SECONDS``, a few retries): an error, never a hang.

:func:`pinned` and :func:`acknowledged` are how the API makes "accepted" mean
"on the primary and on n replicas" (``TASKENV_REDIS_MIN_REPLICAS``): the writes of
one request go through one connection, and ``WAIT`` is asked on that connection.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

if TYPE_CHECKING:
    from shared.config import Settings

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


RETRIES = 3  # a failed call is tried again this often, each time on a new connection


def _settled_master(sentinel: Sentinel, state: dict[str, Any], service_name: str) -> bool:
    """redis-py's check, and no answer from a sentinel still failing the primary over.

    The sentinel leading a failover names the old primary until the failover ends, a
    second or more after the replica was promoted and the other sentinels moved on.  A
    primary killed and started again (without its data: it comes back as an empty
    primary until the sentinels make it a replica, ~10 s later) is up again in that
    window, so redis-py, which takes the first sentinel that answers, connects to it: a
    Celery consumer then BRPOPs an empty list there and consumes nothing.  An answer
    flagged ``failover_in_progress`` is passed over; the next sentinel names the new one."""
    flags = state.get("flags", ())
    flags = set(flags.split(",")) if isinstance(flags, str) else set(flags)
    if not (isinstance(state.get("ip"), str) and type(state.get("port")) is int):
        return False  # an answer naming no address (see _masters_or_refusal)
    try:
        return "failover_in_progress" not in flags and bool(_redis_check_master_state(
            sentinel, state, service_name))
    except (KeyError, TypeError, ValueError):  # a field missing or of another type
        return False


def _masters_or_refusal(client: redis.Redis) -> Any:
    """One sentinel's ``SENTINEL MASTERS``; a malformed answer raised as a refusal.

    redis-py parses the answer as it reads it (``flags`` split on commas, the other
    fields typed) and asks the next sentinel only after a connection error, a timeout
    or an error reply: a sentinel answering ``flags`` as an int or a list (a bug, a
    proxy, something else on that port) raised ``AttributeError`` out of the lookup,
    and a healthy second sentinel was never asked.  Raised as a ``ResponseError``, a
    malformed answer is passed over as an unreachable sentinel is, and named in the
    ``MasterNotFoundError`` if no sentinel answers well."""
    try:
        masters = _redis_sentinel_masters(client)
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise redis.ResponseError(f"a malformed SENTINEL MASTERS answer ({exc!r})") from exc
    if not isinstance(masters, dict):
        raise redis.ResponseError(f"a malformed SENTINEL MASTERS answer ({masters!r:.80})")
    return masters


def _discover_master(sentinel: Sentinel, service_name: str) -> Any:
    """redis-py's lookup, each sentinel's answer read through :func:`_masters_or_refusal`."""
    for client in sentinel.sentinels:
        client.__dict__.setdefault("sentinel_masters",
                                   functools.partial(_masters_or_refusal, client))
    return _redis_discover_master(sentinel, service_name)


# For every Sentinel of this process, kombu's (the workers' broker) as well as ours.
_redis_check_master_state = Sentinel.check_master_state
Sentinel.check_master_state = _settled_master  # type: ignore[method-assign]
_redis_discover_master = Sentinel.discover_master
Sentinel.discover_master = _discover_master  # type: ignore[method-assign, assignment]
_redis_sentinel_masters = redis.Redis.sentinel_masters


def _follow_the_primary(self: SentinelManagedConnection, *args: Any, **kwargs: Any) -> Any:
    """redis-py's read, and a ``NOREPLICAS`` refusal taken as its ``READONLY`` is: a primary
    that no replica follows any more (``min-replicas-to-write``: the sentinels promoted one
    and moved the others while it lived on) refuses writes that a failover would drop.  The
    connection is dropped and the call tried again, through the sentinels, on the new
    primary.  Nothing of the refused command ran (a script is refused at its first write,
    a transaction as a whole), so the retry cannot apply it twice."""
    try:
        return _redis_read_response(self, *args, **kwargs)
    except redis.ResponseError as exc:
        if not (self.connection_pool.is_master and str(exc).startswith("NOREPLICAS")):
            raise
        self.disconnect()
        raise redis.ConnectionError("the primary has no replica that follows it") from exc


# kombu's connections (the workers' broker) are redis-py's SentinelManagedConnection too.
_redis_read_response = SentinelManagedConnection.read_response
SentinelManagedConnection.read_response = _follow_the_primary  # type: ignore[method-assign]


class _Pin(threading.local):
    """The connection this thread's calls share, while :func:`pinned` holds one."""

    active = False
    conn: Any = None
    sock: Any = None  # the socket the pinned connection had when it was pinned


class _Pinning:
    """A pool mixin: while a thread holds a pin, its calls all get the same connection."""

    pin: _Pin

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        pin = self.pin
        if not pin.active:
            return super().get_connection(*args, **kwargs)  # type: ignore[misc]
        if pin.conn is None:
            pin.conn = super().get_connection(*args, **kwargs)  # type: ignore[misc]
            pin.sock = pin.conn._sock
        return pin.conn

    def release(self, connection: Any) -> None:
        if self.pin.active and connection is self.pin.conn:
            return  # kept until the pin ends
        super().release(connection)  # type: ignore[misc]


class PinningConnectionPool(_Pinning, redis.ConnectionPool):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pin = _Pin()


class PinningSentinelPool(_Pinning, SentinelConnectionPool):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pin = _Pin()


@contextmanager
def pinned(client: redis.Redis) -> Iterator[None]:
    """This thread's calls on ``client`` share one connection until the block ends.

    A client whose pool cannot pin (a test's fakeredis) is used as it is."""
    pool = client.connection_pool
    pin = getattr(pool, "pin", None)
    if pin is None or pin.active:
        yield
        return
    pin.active = True
    try:
        yield
    finally:
        conn, pin.active, pin.conn, pin.sock = pin.conn, False, None, None
        if conn is not None:
            pool.release(conn)


def acknowledged(client: redis.Redis, replicas: int, timeout_ms: int) -> bool:
    """Whether ``replicas`` replicas hold every write made on the pinned connection.

    ``WAIT`` on the connection that wrote, with no retry: a connection that was dropped
    and made again since it was pinned is another client to Redis, whose ``WAIT`` would
    vouch for nothing of the earlier writes; that, and any error, is False."""
    pin = getattr(client.connection_pool, "pin", None)
    if pin is None or not pin.active:
        raise RuntimeError("acknowledged() needs the writes' connection: use pinned()")
    if pin.conn is None:
        return True  # nothing was sent on it: nothing to wait for
    conn = pin.conn
    if conn._sock is None or conn._sock is not pin.sock:
        return False
    try:
        conn.send_command("WAIT", replicas, timeout_ms)
        answer = conn.read_response(timeout=timeout_ms / 1000 + 5)
    except (redis.RedisError, OSError):
        conn.disconnect()
        return False
    return int(answer) >= replicas


def connect_for(settings: Settings, **kwargs: Any) -> redis.Redis:
    """The client a taskenv process uses, from its settings."""
    return connect(settings.redis_url, settings.redis_master_name,
                   sentinel_password=settings.redis_sentinel_password or None,
                   timeout=settings.redis_timeout_seconds, **kwargs)


def connect(url: str, master_name: str = "mymaster", sentinel_password: str | None = None,
            timeout: float = 5.0, **kwargs: Any) -> redis.Redis:
    kwargs.setdefault("decode_responses", True)
    kwargs.setdefault("socket_timeout", timeout)
    kwargs.setdefault("socket_connect_timeout", min(timeout, 2.0))
    # Each retry connects again; behind sentinels, that asks them for the primary anew.
    kwargs.setdefault("retry", Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.1), RETRIES))
    if not url.startswith("sentinel://"):
        pool = PinningConnectionPool.from_url(url, **kwargs)
        return redis.Redis(connection_pool=pool)
    hosts, db, password = parse_sentinel_url(url)
    # Each sentinel is asked once per lookup (the lookup goes on to the next): a dead one
    # costs a refused connection, not redis-py's default ten retries.
    sentinel = Sentinel(hosts, sentinel_kwargs={
        "password": sentinel_password, "socket_timeout": kwargs["socket_timeout"],
        "socket_connect_timeout": kwargs["socket_connect_timeout"],
        "retry": Retry(NoBackoff(), 0)})
    return sentinel.master_for(master_name, db=db, password=password,
                               connection_pool_class=PinningSentinelPool, **kwargs)


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
