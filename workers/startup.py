"""What a taskenv process needs before it takes work, checked once as it starts.

The API, each queue's worker and the reconciler refuse to start, exiting with
:data:`EXIT_CODE` and a line naming what is missing, rather than start and fail users'
tasks later:

* Redis answers at ``TASKENV_REDIS_URL`` (tried for ``3 x TASKENV_REDIS_TIMEOUT_SECONDS``,
  so a process started with its Redis waits for it) and takes the password;
* a worker consumes only taskenv's queues; the launch queue's worker has the launcher's
  set-up (each backend's own check, ``ChecksSetup``: bwrap and cgroups, Slurm's clients);
* its secret keys match the platform's (:mod:`shared.keyring`): no key a stored secret
  may be sealed with is missing, so no task's secrets fail to open at its launch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import redis

from shared.config import Settings, shown_url
from shared.keyring import join, recorded
from shared.keys import Keys
from shared.redis_conn import connect_for
from shared.secrets import key_fingerprints
from workers.queues import QUEUES

log = logging.getLogger("taskenv.startup")
EXIT_CODE = 2
SHOWN_FINGERPRINT = 12  # hex digits of a fingerprint a message shows
SET_KEYS = ("set TASKENV_SECRET_KEYS to the platform's keys, all of them, comma-separated "
            "as its API has them (make run keeps them in var/secret.key, which a process "
            "started in its directory reads)")


def problems(settings: Settings, queues: Iterable[str] = (),
             client: redis.Redis | None = None) -> list[str]:
    """Each thing this process lacks to do its work, named; [] when it may start.

    ``queues``: the ones a worker consumes (none for the API).  Joins the platform's
    record of keys when nothing is missing (:func:`shared.keyring.join`)."""
    queues = list(queues)
    found = [f"{q!r} is no taskenv queue: a worker consumes {', '.join(QUEUES)}"
             for q in queues if q not in QUEUES]
    if "launch" in queues:
        from workers.launchers.registry import setup_problems

        found += [f"the {settings.launcher} launcher cannot run tasks here: {p}"
                  for p in setup_problems(settings)]
    if client is None:
        client = connect_for(settings)
    unreachable = redis_problem(client, settings)
    if unreachable:
        return [*found, unreachable]
    if found:
        return found  # the keys are recorded only by a process that starts
    return key_problems(client, Keys(settings.key_prefix), settings.secret_keys)


def redis_problem(client: redis.Redis, settings: Settings) -> str | None:
    """Why Redis cannot be used, or None once it answers."""
    where = f"Redis at {shown_url(settings.redis_url)}"
    deadline = time.monotonic() + 3 * settings.redis_timeout_seconds
    while True:
        try:
            client.ping()
            return None
        except redis.AuthenticationError:
            return (f"{where} refused the password: set TASKENV_REDIS_URL with the "
                    "platform's password")
        except redis.RedisError as exc:
            if time.monotonic() > deadline:
                return (f"{where} does not answer ({exc}): set TASKENV_REDIS_URL to the "
                        "platform's Redis (make run writes var/redis.url, which a process "
                        "started in its directory reads, while it runs)")
            time.sleep(0.2)


def key_problems(client: redis.Redis, keys: Keys, setting: str) -> list[str]:
    """Why this process's secret keys do not match the platform's; [] if they do."""
    held = key_fingerprints(setting)
    try:
        missing = join(client, keys, held)
    except redis.ResponseError:  # a full Redis refuses the new key's record: check only
        missing = sorted(recorded(client, keys) - set(held))
    if not missing:
        return []
    shown = ", ".join(m[:SHOWN_FINGERPRINT] for m in missing)
    sealed = (f"the platform's secrets may be sealed with {len(missing)} key(s) "
              f"(fingerprint {shown}) ")
    if not held:
        return [f"{sealed}and this process has no secret keys (TASKENV_SECRET_KEYS is "
                f"empty): {SET_KEYS}"]
    mine = ", ".join(h[:SHOWN_FINGERPRINT] for h in held)
    return [f"{sealed}that TASKENV_SECRET_KEYS lacks (it holds {mine}): {SET_KEYS}"]


def refuse_unless_ready(settings: Settings, who: str, queues: Iterable[str] = (),
                        client: redis.Redis | None = None) -> None:
    """Return if this process may start; else log why and exit with :data:`EXIT_CODE`."""
    found = problems(settings, queues, client)
    if found:
        log.error("%s refuses to start: %s", who, "; ".join(found))
        raise SystemExit(EXIT_CODE)
