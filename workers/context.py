"""What a worker process needs, built once per process on first use.

Nothing connects at import time: the Celery app can be imported by the API,
tests and tools without a Redis server, and each prefork child gets its own
connection.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import redis

from shared.config import Settings
from shared.envlist import Limits
from shared.redis_conn import connect, warn_if_evicting
from shared.secrets import Cipher
from shared.store import PolicyStore, TaskStore
from workers.launchers import make_launcher
from workers.launchers.base import Launcher

RedisClient = redis.Redis  # the field below is named ``redis`` too


@dataclass
class Context:
    settings: Settings
    redis: RedisClient
    tasks: TaskStore
    policies: PolicyStore
    launcher: Launcher
    limits: Limits

    @classmethod
    def build(cls, settings: Settings, client: RedisClient | None = None) -> Context:
        if client is None:
            client = connect(settings.redis_url, settings.redis_master_name)
            warn_if_evicting(client)
        cipher = Cipher.from_setting(settings.secret_keys)
        return cls(settings, client, TaskStore(client, settings.key_prefix, cipher),
                   PolicyStore(client, settings.key_prefix, cipher), make_launcher(settings),
                   Limits.from_settings(settings))


@functools.cache
def current() -> Context:
    return Context.build(Settings.from_env())
