"""Delivery settings: at-least-once, and timeouts that fit each other."""

from __future__ import annotations

import pytest

from shared.config import Settings
from workers.celery_app import launch_time_limit, make_celery
from workers.queues import QUEUES


def test_every_stage_acknowledges_late_and_requeues_when_its_worker_dies():
    conf = make_celery(Settings()).conf
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    assert {r["queue"] for r in conf.task_routes.values()} == set(QUEUES)


def test_a_message_is_not_redelivered_while_its_first_delivery_may_still_run():
    settings = Settings()
    conf = make_celery(settings).conf
    from workers import tasks  # registers the stage tasks and their own limits

    limits = [conf.task_time_limit] + [
        t.time_limit for t in (tasks.validate, tasks.apply_policy, tasks.launch) if t.time_limit]
    assert conf.broker_transport_options["visibility_timeout"] > max(limits)
    assert conf.task_time_limit == launch_time_limit(settings)


def test_settings_whose_timeouts_do_not_fit_are_refused_at_startup():
    with pytest.raises(ValueError, match="VISIBILITY_TIMEOUT"):
        make_celery(Settings(step_timeout_seconds=7200, visibility_timeout_seconds=3600))


def test_a_consumer_is_stalled_only_when_messages_wait_and_nothing_runs_or_arrives():
    from workers.liveness import stalled

    assert stalled(waiting=5, active=0, idle_for=61, limit=60)
    assert not stalled(waiting=0, active=0, idle_for=600, limit=60)  # nothing to do
    assert not stalled(waiting=5, active=1, idle_for=600, limit=60)  # busy: a long step
    assert not stalled(waiting=5, active=0, idle_for=30, limit=60)   # just received one
