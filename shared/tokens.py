"""Bearer API tokens, stored only as SHA-256 hashes.

A token is shown once, when it is created.  Redis holds its identity (owner,
role, id) under the token's hash and an id -> hash map, so an admin can list and
revoke by id without ever seeing a token again (keys: :mod:`shared.keys`).
Failed authentications are counted per address, one budget for the API and the
pages alike.
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
        found = self.identify(token)
        return found if found else self.create(owner, role, "settings", token)[1]

    def identify(self, token: str) -> Identity | None:
        return self.by_digest(digest(token))

    def by_digest(self, hashed: str) -> Identity | None:
        """The identity behind a token's digest (what a page session keeps)."""
        raw = self.r.get(self.keys.token(hashed))
        return Identity(**json.loads(raw)) if raw else None

    def revoke(self, token_id: str) -> None:
        hashed = self.r.hget(self.keys.token_ids(), token_id)
        if hashed is None:
            raise NotFound(f"no token {token_id}")
        pipe = self.r.pipeline()
        pipe.delete(self.keys.token(as_text(hashed)))
        pipe.hdel(self.keys.token_ids(), token_id)
        pipe.execute()

    def list(self) -> list[Identity]:
        hashes = list(self.r.hvals(self.keys.token_ids()))
        raws = self.r.mget([self.keys.token(as_text(h)) for h in hashes]) if hashes else []
        return sorted((Identity(**json.loads(r)) for r in raws if r),
                      key=lambda i: i.created_at)


class AuthFailures:
    """Failed authentications per address, counted in one-minute windows."""

    WINDOW = 60  # seconds

    def __init__(self, client: redis.Redis, prefix: str = "taskenv",
                 per_minute: int = 20) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self.per_minute = per_minute

    def blocked(self, address: str) -> bool:
        """True once the address has used up this minute's budget of failures."""
        failures = self.r.get(self.keys.auth_failures(address))
        return int(failures or 0) >= self.per_minute  # type: ignore[arg-type]

    def record(self, address: str) -> None:
        key = self.keys.auth_failures(address)
        pipe = self.r.pipeline()
        pipe.incr(key)
        pipe.expire(key, self.WINDOW)
        pipe.execute()
