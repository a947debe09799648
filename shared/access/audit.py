"""The audit log: who changed what, in a capped Redis stream.

Entries name variables, never their values, so a secret cannot leak through it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from shared.keys import Keys
from shared.redis_conn import as_text

MAX_ENTRIES = 100_000


class AuditLog:
    def __init__(self, client: redis.Redis, prefix: str = "taskenv") -> None:
        self.r = client
        self.key = Keys(prefix).audit()

    def record(self, actor: str, action: str, target: str, **detail: Any) -> None:
        _, entry, length = self.entry(actor, action, target, **detail)
        self.r.xadd(self.key, entry, maxlen=length, approximate=True)  # type: ignore[arg-type]

    def entry(self, actor: str, action: str, target: str,
              **detail: Any) -> tuple[str, dict[str, Any], int]:
        """The stream, an entry's fields and the stream's length: for a write that appends
        the entry in its own script (a task's creation), in the same round trip."""
        fields = {"at": time.time(), "actor": actor, "action": action, "target": target,
                  "detail": json.dumps(detail, sort_keys=True)}
        return self.key, fields, MAX_ENTRIES

    def list(self, limit: int = 100, before: str | None = None) -> list[dict[str, Any]]:
        top = f"({before}" if before else "+"
        out = []
        entries: Any = self.r.xrevrange(self.key, max=top, min="-", count=limit)
        for entry_id, fields in entries:
            f = {as_text(k): as_text(v) for k, v in fields.items()}
            out.append({"id": as_text(entry_id), "at": float(f["at"]), "actor": f["actor"],
                        "action": f["action"], "target": f["target"],
                        "detail": json.loads(f["detail"])})
        return out
