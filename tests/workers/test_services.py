"""One builder for every process's services: what it builds, and what it leaves for later."""

from __future__ import annotations

import fakeredis
import pytest

from shared.config import Settings
from shared.secrets import new_key
from workers.celery_app import celery_for
from workers.services import build_services


def test_the_api_gets_its_services_without_a_launcher_it_never_uses():
    svc = build_services(Settings(launcher="no-such-backend"), fakeredis.FakeRedis())
    assert svc.tasks.keys.prefix == svc.policies.keys.prefix == "taskenv"
    with pytest.raises(ValueError, match="no-such-backend"):
        svc.launcher  # built on first use only


def test_stores_share_the_configured_prefix_and_cipher():
    svc = build_services(Settings(key_prefix="tenant-a", secret_keys=new_key()),
                         fakeredis.FakeRedis())
    assert {svc.keys.prefix, svc.tasks.keys.prefix, svc.tokens.keys.prefix} == {"tenant-a"}
    assert svc.tasks.cipher is not None and svc.policies.cipher is not None


def test_an_enqueue_handed_in_replaces_celery():
    sent: list[tuple[str, int]] = []
    svc = build_services(Settings(), fakeredis.FakeRedis(),
                         enqueue=lambda task_id, revision: sent.append((task_id, revision)))
    svc.enqueue("t1", 1)
    assert sent == [("t1", 1)]


def test_one_celery_app_sends_and_runs_for_the_same_settings():
    settings = Settings(key_prefix="tenant-a")
    assert celery_for(settings) is celery_for(Settings(key_prefix="tenant-a"))
    assert celery_for(settings) is not celery_for(Settings(key_prefix="tenant-b"))
