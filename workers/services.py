"""What every taskenv process runs on, built in one place from :class:`Settings`.

The API (``create_app``), the stage workers, the reconciler and the operator
commands all call :func:`build_services`, so a setting means the same thing in
every process.  The module lives in ``workers/`` rather than ``shared/`` because
it builds the launcher and the Celery sender, which are the workers' own:
``shared/`` stays the domain core and its stores, and imports nothing from here.

Nothing connects at import time, and the launcher and Celery are loaded only when
first used: the API never needs a launcher, and a tool that only reads records
never loads Celery.  In a worker, :func:`current` builds the services once per
process, so each prefork child has its own connections.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from shared.access.audit import AuditLog
from shared.access.projects import ProjectStore
from shared.access.quotas import QuotaCounter, Quotas
from shared.access.tokens import AuthFailures, TokenStore
from shared.config import Settings, process_settings
from shared.doctor.store import CatalogStore
from shared.env.envlist import Limits
from shared.keys import Keys
from shared.policy.hooks import StartupHooks
from shared.policy.store import PolicyStore
from shared.redis_conn import connect_for, warn_if_evicting
from shared.secrets import Cipher
from shared.store.room import Room
from shared.store.tasks import TaskStore
from shared.task.backend_traits import BackendTraits

if TYPE_CHECKING:
    from workers.launchers.base import Launcher

RedisClient = redis.Redis  # the field below is named ``redis`` too
Enqueue = Callable[[str, int], None]  # task id, revision: a new revision's first stage
SendToStage = Callable[[str, str, int], None]  # stage, task id, revision


@dataclass
class Services:
    settings: Settings
    # For the workers' own coordination (the reconciler's lock, queue lengths); the API
    # reaches Redis only through the stores.
    redis: RedisClient
    keys: Keys
    tasks: TaskStore
    policies: PolicyStore  # the platform's; .scoped("project:<name>") for a project's
    projects: ProjectStore
    tokens: TokenStore
    audit: AuditLog
    auth_failures: AuthFailures
    limits: Limits
    quotas: QuotaCounter
    catalog: CatalogStore  # the doctor's edited catalog layers
    send: SendToStage
    enqueue: Enqueue

    @functools.cached_property
    def room(self) -> Room:
        """Whether Redis has room for new work (its maxmemory less the reserve)."""
        return Room(self.redis, self.settings.redis_reserve_percent)

    @functools.cached_property
    def hooks(self) -> StartupHooks:
        """The start-up hook names only the platform's policy may give a value, with the
        endpoint variables (which it may allow one project)."""
        return StartupHooks.from_setting(self.settings.startup_hooks,
                                         self.settings.endpoint_variables)

    @functools.cached_property
    def launcher(self) -> Launcher:
        from workers.launchers.registry import make_launcher

        return make_launcher(self.settings)

    @functools.cached_property
    def backend(self) -> BackendTraits:
        """What the API and the domain core know of the configured backend (plain data:
        loads its traits, never its launcher)."""
        from workers.launchers.registry import traits

        return traits(self.settings.launcher)

    @functools.cached_property
    def reserved_prefixes(self) -> tuple[str, ...]:
        """The variable prefixes a project policy may not set (any backend's own)."""
        from workers.launchers.registry import reserved_prefixes

        return reserved_prefixes()


def build_services(settings: Settings, redis_client: RedisClient | None = None,
                   enqueue: Enqueue | None = None, patient: bool = False) -> Services:
    """Tests hand in a Redis client (fakeredis) and an enqueue spy.

    ``patient``: a worker's, whose state writes wait for room when Redis is full (an
    outcome must land); the API's answer at once instead (503 ``store_full``)."""
    client = redis_client
    if client is None:
        client = connect_for(settings)
        warn_if_evicting(client)
    cipher = Cipher.from_setting(settings.secret_keys)
    prefix = settings.key_prefix
    send = stage_sender(settings)
    return Services(
        settings=settings, redis=client, keys=Keys(prefix),
        tasks=TaskStore(client, prefix, cipher, settings.retention_days * 86400,
                        patience=settings.redis_full_patience_seconds if patient else 0),
        policies=PolicyStore(client, prefix, cipher),
        projects=ProjectStore(client, prefix),
        tokens=TokenStore(client, prefix),
        audit=AuditLog(client, prefix),
        auth_failures=AuthFailures(client, prefix, settings.auth_failures_per_minute),
        limits=Limits.from_settings(settings),
        quotas=QuotaCounter(client, prefix, Quotas.from_settings(settings)),
        catalog=CatalogStore(client, prefix),
        send=send,
        enqueue=enqueue or functools.partial(send, "validate"),
    )


def stage_sender(settings: Settings) -> SendToStage:
    """``send(stage, task_id, revision)``, loading Celery on the first message only."""

    def send(stage: str, task_id: str, revision: int) -> None:
        from kombu.exceptions import OperationalError

        from workers.celery_app import send_to_stage

        try:
            send_to_stage(settings, stage, task_id, revision)
        except OperationalError as exc:
            # The broker is Redis: its failure is a Redis error, which the API answers
            # 503 unavailable (the record is written: an Idempotency-Key retry finds it,
            # and the reconciler sends the message again), never a 500.
            raise redis.ConnectionError(f"the broker is unreachable: {exc}") from exc

    return send


@functools.cache
def current() -> Services:
    """This worker process's services, built on first use."""
    return build_services(process_settings(), patient=True)
