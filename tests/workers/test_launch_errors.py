"""``taskenv_launch_errors_total`` counts every launch that fails, the backend's failures
and those before the backend is called (a revision whose secrets this worker cannot
open), each once."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from shared.errors import LaunchFailed, SecretsUnavailable
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from tests.workers.test_stages import FakeLauncher, resolve_only, submit
from workers import stages
from workers.observe import CountingLauncher


def launch_errors(reason: str) -> float:
    return REGISTRY.get_sample_value("taskenv_launch_errors_total",
                                     {"launcher": "fake", "reason": reason}) or 0.0


def test_a_launch_whose_secrets_do_not_open_counts_as_a_launch_error(
        tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks, [{"name": "HF_TOKEN", "value": "hf_0123456789", "secret": True}])
    resolve_only(tasks, policies, task_id)
    keyless = TaskStore(tasks.r)  # a launch worker started without the platform's keys
    launcher = FakeLauncher()
    before = launch_errors("secrets_unavailable")
    with pytest.raises(SecretsUnavailable):
        stages.launch(keyless, CountingLauncher(launcher), task_id, 1)  # type: ignore[arg-type]
    assert launch_errors("secrets_unavailable") - before == 1
    assert launcher.launched == []  # it failed before the backend was called


def test_a_backend_failure_counts_once(tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks)
    resolve_only(tasks, policies, task_id)
    before = launch_errors("launch_failed")
    counting = CountingLauncher(FakeLauncher(error=LaunchFailed("no such image")))  # type: ignore[arg-type]
    stages.launch(tasks, counting, task_id, 1)  # type: ignore[arg-type]
    assert launch_errors("launch_failed") - before == 1
