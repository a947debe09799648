"""Where users meet the policy: per-day counters, written as things happen.

Two small Redis hashes per UTC day and scope (every task, and each project's tasks):
how many revisions entered each state, and how many rejected revisions each
``(rule, variable)`` pair refused.  States entered are counted by the task store's
scripts, in the write of the change itself (the same keys, the same expiry); here
each write is a few ``HINCRBY`` in one round trip
and each read a handful of ``HGETALL`` (one per day asked for), so the console's
insights page costs the same however many tasks there are.  The keys expire after
:data:`KEEP_SECONDS`, so the store never grows past a week and a day of counters.

Only rule names and variable names are counted, never a value.  A counter must not
undo what it counts: a Redis error here is logged and swallowed.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import redis

from shared.keys import Keys

log = logging.getLogger(__name__)

DAY = 86400
KEEP_SECONDS = 8 * DAY  # a week of whole days, plus the day in progress
NAME_CAP = 128  # a rejected name may be anything a user typed: count its beginning only


NEAR_MISS_RULES = ("doctor.near_miss", "rule.documented")
_DID_YOU_MEAN = re.compile(r"did you mean ([A-Za-z_][A-Za-z0-9_]*)")


def _likely(problem: Mapping[str, Any]) -> str:
    found = _DID_YOU_MEAN.search(str(problem.get("message") or ""))
    return found.group(1)[:NAME_CAP] if found else ""


def day_of(now: float) -> int:
    """The UTC day number of a timestamp (days since the epoch)."""
    return int(now // DAY)


class Insights:
    def __init__(self, client: redis.Redis, prefix: str = "taskenv") -> None:
        self.r = client
        self.keys = Keys(prefix)

    # --- counting ------------------------------------------------------------------------

    def entered(self, state: str, project: str | None, now: float | None = None) -> None:
        """A revision entered ``state`` (every transition, creation included)."""
        self._bump(self.keys.insights_states, [state], project, now)

    def rejected(self, problems: Iterable[Mapping[str, Any]], project: str | None,
                 now: float | None = None) -> None:
        """A revision was rejected: each distinct (rule, variable) it broke counts once."""
        pairs = {json.dumps([str(p.get("rule") or ""), str(p.get("variable") or "")[:NAME_CAP]])
                 for p in problems}
        self._bump(self.keys.insights_rejections, sorted(pairs), project, now)

    def near_misses(self, problems: Iterable[Mapping[str, Any]], project: str | None,
                    now: float | None = None) -> None:
        """The doctor's near-misses of one revision: each (typed, likely) pair counts once.
        The likely name is the variable the message names first after "did you mean"."""
        pairs = {json.dumps([str(p.get("variable") or "")[:NAME_CAP], _likely(p)])
                 for p in problems if p.get("rule") in NEAR_MISS_RULES}
        if pairs:
            self._bump(self.keys.insights_near_misses, sorted(pairs), project, now)

    def _bump(self, key_of: Any, fields: list[str], project: str | None,
              now: float | None) -> None:
        day = day_of(time.time() if now is None else now)
        scopes: list[str | None] = [None] if project is None else [None, project]
        try:
            pipe = self.r.pipeline(transaction=False)
            for scope in scopes:
                key = key_of(day, scope)
                for field in fields:
                    pipe.hincrby(key, field, 1)
                pipe.expire(key, KEEP_SECONDS)
            pipe.execute()
        except redis.RedisError:
            log.debug("could not count %s", fields, exc_info=True)

    # --- reading -------------------------------------------------------------------------

    def states(self, days: int, project: str | None = None,
               now: float | None = None) -> dict[str, int]:
        """Revisions that entered each state over the last ``days`` UTC days (today too)."""
        return dict(self._sum(self.keys.insights_states, days, project, now))

    def rejections(self, days: int, project: str | None = None, now: float | None = None,
                   limit: int = 10) -> list[dict[str, Any]]:
        """The (rule, variable) pairs that rejected the most revisions, most first."""
        found = self._sum(self.keys.insights_rejections, days, project, now)
        top = sorted(found.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return [{"rule": rule, "variable": variable or None, "count": count}
                for (rule, variable), count in ((json.loads(f), c) for f, c in top)]

    def top_near_misses(self, days: int, project: str | None = None,
                        now: float | None = None, limit: int = 10) -> list[dict[str, Any]]:
        """The names most often taken for typos, most first, with the likely name."""
        found = self._sum(self.keys.insights_near_misses, days, project, now)
        top = sorted(found.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return [{"typed": typed, "likely": likely or None, "count": count}
                for (typed, likely), count in ((json.loads(f), c) for f, c in top)]

    def _sum(self, key_of: Any, days: int, project: str | None,
             now: float | None) -> Counter[str]:
        today = day_of(time.time() if now is None else now)
        pipe = self.r.pipeline(transaction=False)
        for day in range(today - days + 1, today + 1):
            pipe.hgetall(key_of(day, project))
        total: Counter[str] = Counter()
        for counts in pipe.execute():
            total.update({str(k if isinstance(k, str) else k.decode()): int(v)
                          for k, v in counts.items()})
        return total
