"""Status by watching: the reconciler and the Kubernetes launcher on the contract server.

One LIST of the Jobs and one of their pods, then a WATCH of each per pass: the
number of API calls per pass does not depend on how many Jobs run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import Configuration

from shared.config import Settings
from shared.store.tasks import TaskStore
from shared.task import states
from shared.task.manifest import (
    job_name,
)
from shared.task.workload import Workload
from tests.contract.jobs import running_jobs
from tests.contract.k8s_api import FakeKubeApi, condition, terminated, waiting
from workers.launchers.kubernetes.launcher import KubernetesLauncher, make_api_client
from workers.launchers.kubernetes.watch import JOB_DELETED
from workers.reconcile import reconcile_once

STUCK = 10.0
TTL = 3.0
JOBS = "/apis/batch/v1/namespaces/default/jobs"


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as server:
        yield server


@pytest.fixture
def launcher(api: FakeKubeApi) -> KubernetesLauncher:
    settings = Settings(launcher="kubernetes", kube_namespace="default", kube_backoff_limit=0)
    return KubernetesLauncher(settings, make_api_client(Configuration(host=api.url)),
                              rate=10_000, burst=10_000)


def finish(api: FakeKubeApi, workload: Workload, exit_code: int) -> None:
    """What the Job controller does when the pod's container ends."""
    name = job_name(workload)
    reason = "Completed" if exit_code == 0 else "Error"
    api.add_pod(name, state=terminated(exit_code, reason), phase="Succeeded", log="done\n")
    if exit_code == 0:
        api.set_job_status(name, {"succeeded": 1, "conditions": [condition("Complete")]})
    else:
        api.set_job_status(name, {"failed": 1, "conditions": [
            condition("Failed", "BackoffLimitExceeded")]})


def one_pass(tasks: TaskStore, launcher: KubernetesLauncher, now: float,
             sweep_running: bool = True) -> Any:
    return reconcile_once(tasks, launcher, lambda *a: None, STUCK, now=now, heartbeat_ttl=TTL,
                          sweep_running=sweep_running)


def state_of(tasks: TaskStore, workload: Workload) -> tuple[str, int | None, str | None]:
    doc = tasks.get(workload.task_id)
    return doc["state"], doc.get("exit_code"), doc.get("reason")


@pytest.mark.slow
def test_fifty_changes_among_5000_jobs_are_recorded_in_one_pass_with_few_calls(
        tasks, api, launcher):
    workloads = running_jobs(tasks, api, 5_000)
    now = tasks.get(workloads[0].task_id)["updated_at"] + 1
    one_pass(tasks, launcher, now, sweep_running=False)  # changes only, as between sweeps
    first_pass = api.count()
    changed = workloads[::100]  # 50 of them
    for i, workload in enumerate(changed):
        finish(api, workload, exit_code=i % 2)
    before = {verb: api.count(verb) for verb in ("list", "watch", "get")}

    counts = one_pass(tasks, launcher, now + 1, sweep_running=False)

    assert counts["finished"] == 50
    for i, workload in enumerate(changed):
        expected = (states.SUCCEEDED, 0) if i % 2 == 0 else (states.FAILED, 1)
        assert state_of(tasks, workload)[:2] == expected
        assert tasks.read_log(workload.task_id, 1) == "done\n"
    assert state_of(tasks, workloads[1])[0] == states.RUNNING
    assert first_pass == 2  # one LIST of the Jobs, one of their pods
    status_calls = (api.count("list") - before["list"]) + (api.count("watch") - before["watch"])
    assert status_calls <= 5  # two WATCHes, whatever the number of Jobs
    assert api.count("get") - before["get"] == 50  # one log read per finished Job


def test_a_dropped_watch_resumes_from_the_last_resource_version(tasks, api, launcher):
    first, second = running_jobs(tasks, api, 2)
    now = tasks.get(first.task_id)["updated_at"] + 1
    one_pass(tasks, launcher, now)
    api.drop_next_watch(after_events=1)
    api.set_job_status(job_name(first), {"succeeded": 1, "conditions": [condition("Complete")]})
    api.set_job_status(job_name(second), {"succeeded": 1, "conditions": [condition("Complete")]})

    one_pass(tasks, launcher, now + 1)
    assert state_of(tasks, first)[0] == states.SUCCEEDED
    assert state_of(tasks, second)[0] == states.RUNNING  # its event was lost with the link
    seen_up_to = launcher.status.jobs.version
    one_pass(tasks, launcher, now + 2)

    assert state_of(tasks, second)[0] == states.SUCCEEDED
    watches = [r for r in api.requests_to("GET", JOBS) if r.query.get("watch") == ["true"]]
    assert watches[-1].query["resourceVersion"] == [seen_up_to]
    assert len(watches) == 2 and len(api.requests_to("GET", JOBS)) == 3  # one LIST, ever


def test_a_410_gone_lists_again_and_catches_up(tasks, api, launcher):
    (workload,) = running_jobs(tasks, api, 1)
    now = tasks.get(workload.task_id)["updated_at"] + 1
    one_pass(tasks, launcher, now)
    api.set_job_status(job_name(workload), {"failed": 1, "conditions": [
        condition("Failed", "DeadlineExceeded")]})
    api.expire_history()

    one_pass(tasks, launcher, now + 1)

    assert state_of(tasks, workload) == (states.FAILED, None, "DeadlineExceeded")
    lists = [r for r in api.requests_to("GET", JOBS) if r.query.get("watch") != ["true"]]
    assert len(lists) == 2  # the first, and the one after 410


@pytest.mark.parametrize("relisted", [False, True], ids=["deleted-event", "missing-on-relist"])
def test_a_deleted_job_fails_its_running_task_with_the_reason(tasks, api, launcher, relisted):
    deleted, kept = running_jobs(tasks, api, 2)
    now = tasks.get(deleted.task_id)["updated_at"] + 1
    one_pass(tasks, launcher, now)
    api.delete("job", job_name(deleted))
    if relisted:
        api.expire_history()

    counts = one_pass(tasks, launcher, now + 1)

    assert counts["vanished"] == 1
    assert state_of(tasks, deleted) == (states.FAILED, None, JOB_DELETED)
    assert state_of(tasks, kept)[0] == states.RUNNING


def test_a_pod_that_cannot_pull_its_image_fails_the_task_once_stuck(tasks, api, launcher):
    (workload,) = running_jobs(tasks, api, 1)
    now = tasks.get(workload.task_id)["updated_at"] + 1
    one_pass(tasks, launcher, now)
    api.add_pod(job_name(workload), state=waiting("ImagePullBackOff"), phase="Pending")

    one_pass(tasks, launcher, now + 1)
    assert state_of(tasks, workload)[0] == states.RUNNING  # may still pull
    calls = api.count()
    one_pass(tasks, launcher, now + STUCK + 1)  # nothing changed: the cache decides

    state, _, reason = state_of(tasks, workload)
    assert state == states.FAILED and reason is not None and "ImagePullBackOff" in reason
    assert api.count() - calls == 2
