"""Bearer API tokens, stored only as SHA-256 hashes.

A token is shown once, when it is created.  Redis holds its identity (owner,
role, id) under the token's hash and an id -> hash map, so an admin can list and
revoke by id without ever seeing a token again (keys: :mod:`shared.keys`).
Console sessions live here too (:class:`SessionStore`), since revoking a token
ends them.  Failed authentications are counted per address and per token
beginning, one budget for the API and the pages alike; a valid token is never
refused for others' failures.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import asdict, dataclass

import redis

from shared.errors import NotFound
from shared.keys import Keys
from shared.redis_conn import as_text

ROLES = ("user", "admin")
PREFIX = "tke_"
MIN_CONFIGURED_LENGTH = 32  # a generated token has 47 characters


@dataclass(frozen=True)
class Identity:
    id: str
    owner: str
    role: str
    created_at: float = 0.0
    created_by: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def check_configured(token: str) -> None:
    """Refuse a configured token too short to withstand guessing (the message never
    shows the token)."""
    if len(token) < MIN_CONFIGURED_LENGTH:
        raise ValueError(
            f"TASKENV_ADMIN_TOKEN is {len(token)} characters long; a bootstrap admin token "
            f"must have at least {MIN_CONFIGURED_LENGTH} (for instance "
            f"{PREFIX}$(openssl rand -hex 32))")


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    def __init__(self, client: redis.Redis, prefix: str = "taskenv") -> None:
        self.r = client
        self.keys = Keys(prefix)

    def create(self, owner: str, role: str, created_by: str | None,
               token: str | None = None) -> tuple[str, Identity]:
        """A new token (or the given one), returned in clear this once."""
        token = token or PREFIX + secrets.token_urlsafe(32)
        ident = Identity(id=secrets.token_hex(8), owner=owner, role=role,
                         created_at=time.time(), created_by=created_by)
        pipe = self.r.pipeline()
        pipe.set(self.keys.token(digest(token)), json.dumps(asdict(ident)))
        pipe.hset(self.keys.token_ids(), ident.id, digest(token))
        pipe.execute()
        return token, ident

    def ensure(self, token: str, owner: str, role: str) -> Identity:
        """Register a configured token (the bootstrap admin's) if it is not yet known."""
        check_configured(token)
        found = self.identify(token)
        return found if found else self.create(owner, role, "settings", token)[1]

    def identify(self, token: str) -> Identity | None:
        return self.by_digest(digest(token))

    def by_digest(self, hashed: str) -> Identity | None:
        """The identity behind a token's digest (what a page session keeps)."""
        raw = self.r.get(self.keys.token(hashed))
        return Identity(**json.loads(raw)) if raw else None

    def revoke(self, token_id: str) -> None:
        """Forget the token, and end every console session opened with it."""
        hashed = self.r.hget(self.keys.token_ids(), token_id)
        if hashed is None:
            raise NotFound(f"no token {token_id}")
        sessions = [self.keys.session(as_text(s))
                    for s in self.r.smembers(self.keys.token_sessions(token_id))]  # type: ignore[union-attr]
        pipe = self.r.pipeline()
        pipe.delete(self.keys.token(as_text(hashed)), self.keys.token_sessions(token_id),
                    *sessions)
        pipe.hdel(self.keys.token_ids(), token_id)
        pipe.execute()

    def list(self) -> list[Identity]:
        hashes = list(self.r.hvals(self.keys.token_ids()))
        raws = self.r.mget([self.keys.token(as_text(h)) for h in hashes]) if hashes else []
        return sorted((Identity(**json.loads(r)) for r in raws if r),
                      key=lambda i: i.created_at)


class AuthFailures:
    """Failed authentications per address and per token beginning, in one-minute windows.

    Only failures are counted, and only a failing caller is refused: the caller looks
    a token up first, and a known token is accepted whatever failed before it.  The
    beginning of a token (its first :data:`TOKEN_BEGINNING` characters) slows down a
    guesser working on one token from many addresses; it is kept as a digest only.
    """

    WINDOW = 60  # seconds
    TOKEN_BEGINNING = len(PREFIX) + 8

    def __init__(self, client: redis.Redis, prefix: str = "taskenv",
                 per_minute: int = 20) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self.per_minute = per_minute

    def fail(self, address: str, token: str) -> int:
        """Count one failure; the seconds to wait before failing again, 0 if within budget."""
        keys = self._counters(address, token)
        pipe = self.r.pipeline()
        for key in keys:
            pipe.incr(key)
            pipe.expire(key, self.WINDOW)  # a window that slides while failures go on
        counts = pipe.execute()[::2]
        return self.WINDOW if max(int(c) for c in counts) > self.per_minute else 0

    def _counters(self, address: str, token: str) -> list[str]:
        keys = [self.keys.auth_failures(address)]
        if token:  # a missing token is counted per address only
            keys.append(self.keys.auth_failures_of_token(
                digest(token[:self.TOKEN_BEGINNING])))
        return keys


class SessionStore:
    """Console sessions in Redis: the browser's cookie holds only a random id.

    A session is a hash under the id's digest: its data (the page's session: who is
    logged in, the CSRF secret, flashed messages), ``created_at`` and ``last_seen``.
    It ends after ``idle_seconds`` without a request, at logout, or when the token it
    was opened with is revoked (each token keeps the set of its sessions).
    """

    IDLE_SECONDS = 8 * 3600
    ANONYMOUS_SECONDS = 15 * 60  # before login: only a CSRF secret, kept briefly

    def __init__(self, client: redis.Redis, prefix: str = "taskenv",
                 idle_seconds: int = IDLE_SECONDS) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self.idle = idle_seconds

    @staticmethod
    def new_id() -> str:
        return secrets.token_urlsafe(32)

    def load(self, session_id: str) -> str | None:
        """The session's data, and one more idle period for it; None if it has ended."""
        key = self.keys.session(digest(session_id))
        data, ttl_kind = self.r.hmget(key, ["data", "ttl"])  # type: ignore[misc]
        if data is None:
            return None
        pipe = self.r.pipeline()
        pipe.hset(key, "last_seen", time.time())
        pipe.expire(key, int(ttl_kind or self.idle))
        pipe.execute()
        return as_text(data)

    def save(self, session_id: str, data: str, token_id: str | None) -> None:
        """Store the data; a session with a token is listed under it, so revoking ends it."""
        hashed = digest(session_id)
        key, ttl = self.keys.session(hashed), self.idle if token_id else self.ANONYMOUS_SECONDS
        now = time.time()
        pipe = self.r.pipeline()
        pipe.hsetnx(key, "created_at", now)
        pipe.hset(key, mapping={"data": data, "last_seen": now, "ttl": ttl})
        pipe.expire(key, ttl)
        if token_id:
            pipe.sadd(self.keys.token_sessions(token_id), hashed)
            pipe.expire(self.keys.token_sessions(token_id), self.idle)
        pipe.execute()

    def end(self, session_id: str) -> None:
        self.r.delete(self.keys.session(digest(session_id)))
