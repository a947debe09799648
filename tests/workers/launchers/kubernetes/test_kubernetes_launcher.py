"""The Kubernetes launcher against a local server playing the API server's contract.

No cluster runs here: ``tests/contract/k8s_api.py`` answers the same paths, verbs
and bodies (Status objects, 409 AlreadyExists, 429 with Retry-After, 5xx).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client import Configuration
from kubernetes.config import ConfigException

from shared.config import DEFAULT_IMAGE, Settings
from shared.env.identity import IDENTITY_NAMES
from shared.errors import LaunchFailed, TransientError
from shared.policy.model import Resolved
from shared.store.tasks import TaskStore
from shared.task.manifest import job_name, secret_name
from shared.task.workload import Resources, Workload
from tests.contract.k8s_api import (
    FakeKubeApi,
    condition,
    running,
    status_body,
    terminated,
    waiting,
)
from tests.workers.conftest import RecordingHooks
from workers.launchers.kubernetes.launcher import KubernetesLauncher, make_api_client
from workers.launchers.kubernetes.ratelimit import TokenBucket
from workers.launchers.registry import make_launcher

NS = "training"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
SECRET_VALUE = "hf_s3cr3t_value"


class FakeClock:
    """Time that moves only when someone sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make(api: FakeKubeApi, clock: FakeClock | None = None, **kwargs: Any) -> KubernetesLauncher:
    settings = Settings(launcher="kubernetes", kube_namespace=NS, kube_backoff_limit=0)
    if clock is not None:
        kwargs.update(clock=clock, sleep=clock.sleep)
    client = make_api_client(Configuration(host=api.url))
    return KubernetesLauncher(settings, client, **kwargs)


@pytest.fixture
def launcher(api: FakeKubeApi, clock: FakeClock) -> Iterator[KubernetesLauncher]:
    launcher = make(api, clock)
    yield launcher
    launcher.api.close()


def workload(revision: int = 1, task_id: str = "3f2b8c1e9d4a4b7fa0c1d2e3f4a5b6c7",
             secret: bool = True) -> Workload:
    env = [Resolved("TASK_ID", task_id, "platform"), Resolved("LR", "0.01", "user"),
           Resolved("DATA", "/data/$(TASK_ID)", "user")]
    if secret:
        env.append(Resolved("HF_TOKEN", SECRET_VALUE, "protected", (), True))
    return Workload(task_id=task_id, revision=revision, name="train", policy_version=3,
                    steps=(("python", "train.py"),), env=tuple(env), image="train:1",
                    resources=Resources(cpu="1", memory="1Gi", gpus=1))


def test_make_launcher_loads_the_kubeconfig(monkeypatch, api, tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(json.dumps({  # JSON is YAML
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
        "users": [{"name": "fake", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    launcher = make_launcher(Settings(launcher="kubernetes", kube_namespace=NS))
    assert isinstance(launcher, KubernetesLauncher)
    assert launcher.api.configuration.retries is False  # the launcher's retries are the only ones
    launcher.launch(workload(), RecordingHooks().hooks)
    (request,) = api.requests_to("POST", JOBS)
    assert request.headers["authorization"] == "Bearer t0ken"
    launcher.api.close()


def test_without_any_cluster_config_the_launcher_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigException):
        make_launcher(Settings(launcher="kubernetes"))


def test_launch_creates_the_secret_then_the_job(api, launcher):
    w, hooks = workload(), RecordingHooks()
    outcome = launcher.launch(w, hooks.hooks)
    assert outcome.state == "running"
    assert hooks.started == 1
    posts = [(r.method, r.path) for r in api.requests if r.method == "POST"]
    assert posts == [("POST", SECRETS), ("POST", JOBS)]

    (secret,) = api.stored("secret", NS)
    assert secret["metadata"]["name"] == secret_name(w)
    assert base64.b64decode(secret["data"]["HF_TOKEN"]).decode() == SECRET_VALUE

    (job,) = api.stored("job", NS)
    assert job["metadata"]["name"] == job_name(w)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert [e["name"] for e in container["env"]][:4] == ["TASK_ID", "LR", "DATA", "HF_TOKEN"]
    assert [e["name"] for e in container["env"]][4:] == list(IDENTITY_NAMES)
    assert container["env"][2]["value"] == "/data/$$(TASK_ID)"  # escaped: arrives literally
    assert container["env"][3]["valueFrom"]["secretKeyRef"] == {
        "name": secret_name(w), "key": "HF_TOKEN", "optional": False}
    job_request = api.requests_to("POST", JOBS)[0]
    assert SECRET_VALUE not in json.dumps(job_request.body)
    assert base64.b64encode(SECRET_VALUE.encode()).decode() not in json.dumps(job_request.body)


def test_the_secret_is_owned_by_its_job(api, launcher):
    launcher.launch(workload(), RecordingHooks().hooks)
    (job,) = api.stored("job", NS)
    (secret,) = api.stored("secret", NS)
    assert secret["metadata"]["ownerReferences"] == [{
        "apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"], "blockOwnerDeletion": False}]


def test_no_secret_is_created_without_secret_variables(api, launcher):
    launcher.launch(workload(secret=False), RecordingHooks().hooks)
    assert api.requests_to("POST", SECRETS) == []
    assert len(api.stored("job", NS)) == 1


def test_a_redelivered_launch_adopts_the_existing_job(api, launcher):
    w = workload()
    launcher.launch(w, RecordingHooks().hooks)
    hooks = RecordingHooks()
    outcome = launcher.launch(w, hooks.hooks)
    assert outcome.state == "running" and hooks.started == 1
    assert any("adopted" in line for line in hooks.lines)
    assert len(api.requests_to("POST", JOBS)) == 2  # the second met 409 AlreadyExists
    assert len(api.stored("job", NS)) == 1
    assert len(api.stored("secret", NS)) == 1


def test_revision_two_is_a_new_job(api, launcher):
    launcher.launch(workload(1), RecordingHooks().hooks)
    launcher.launch(workload(2), RecordingHooks().hooks)
    assert len(api.stored("job", NS)) == 2


def test_a_same_named_job_of_another_task_is_not_adopted(api, launcher):
    w = workload()
    launcher.launch(w, RecordingHooks().hooks)
    api.objects[("job", NS, job_name(w))]["metadata"]["annotations"][
        "taskenv.io/task-id"] = "someone-else"
    with pytest.raises(LaunchFailed, match="another task"):
        launcher.launch(w, RecordingHooks().hooks)


def test_429_waits_for_retry_after_then_succeeds(api, launcher, clock):
    api.script("POST", JOBS, 429, headers={"Retry-After": "3"})
    assert launcher.launch(workload(), RecordingHooks().hooks).state == "running"
    assert len(api.requests_to("POST", JOBS)) == 2
    assert clock.sleeps and max(clock.sleeps) >= 3
    assert len(api.stored("job", NS)) == 1


def test_500_once_then_success(api, launcher, clock):
    api.script("POST", SECRETS, 500)
    assert launcher.launch(workload(), RecordingHooks().hooks).state == "running"
    assert len(api.requests_to("POST", SECRETS)) == 2
    assert clock.sleeps == [0.5]  # backoff_base for the first retry


def test_403_fails_with_the_api_servers_message(api, launcher):
    message = 'jobs.batch is forbidden: User "system:serviceaccount:taskenv:worker" cannot ' \
              'create resource "jobs" in API group "batch" in the namespace "training"'
    api.script("POST", JOBS, 403, body=status_body(403, message))
    hooks = RecordingHooks()
    with pytest.raises(LaunchFailed) as caught:
        launcher.launch(workload(), hooks.hooks)
    assert message in caught.value.message
    assert len(api.requests_to("POST", JOBS)) == 1  # never retried
    assert hooks.started == 0


def test_an_invalid_object_is_a_launch_failure_not_a_retry(api, launcher):
    api.script("POST", JOBS, 422, body=status_body(422, 'Job "x" is invalid: spec: Required'))
    with pytest.raises(LaunchFailed, match="is invalid"):
        launcher.launch(workload(), RecordingHooks().hooks)


def test_persistent_503_is_transient_after_max_retries(api, clock):
    launcher = make(api, clock, max_retries=3, backoff_base=1, backoff_cap=5)
    api.script("POST", JOBS, 503, times=None)
    with pytest.raises(TransientError, match="after 4 attempts"):
        launcher.launch(workload(secret=False), RecordingHooks().hooks)
    assert len(api.requests_to("POST", JOBS)) == 4  # 1 + max_retries
    assert clock.sleeps == [1, 2, 4]  # capped exponential backoff
    launcher.api.close()


def test_retry_after_beyond_the_cap_gives_up_at_once(api, clock):
    launcher = make(api, clock, backoff_cap=10)
    api.script("POST", JOBS, 429, headers={"Retry-After": "60"})
    with pytest.raises(TransientError, match="Retry-After"):
        launcher.launch(workload(secret=False), RecordingHooks().hooks)
    assert clock.sleeps == []
    launcher.api.close()


def test_backoff_is_capped(api, launcher):
    assert [launcher.backoff(n) for n in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert launcher.backoff(0, retry_after=2) == 2
    assert launcher.backoff(5, retry_after=2) == 16


def test_a_dropped_connection_is_retried(api, launcher):
    api.script("POST", JOBS, drop=True)
    assert launcher.launch(workload(), RecordingHooks().hooks).state == "running"
    assert len(api.requests_to("POST", JOBS)) == 2


def test_a_timed_out_create_is_retried_and_adopted(api, clock):
    # The server creates the Job but answers too late: the retry meets the Job (or makes it).
    launcher = make(api, clock, request_timeout=0.3)
    api.script("POST", JOBS, delay=0.6)
    assert launcher.launch(workload(), RecordingHooks().hooks).state == "running"
    time.sleep(0.5)  # let the slow handler finish
    assert len(api.stored("job", NS)) == 1
    launcher.api.close()


def test_connection_refused_is_transient(clock):
    with FakeKubeApi() as gone:
        url = gone.url
    settings = Settings(kube_namespace=NS)
    client = make_api_client(Configuration(host=url))
    launcher = KubernetesLauncher(settings, client, max_retries=2, clock=clock,
                                  sleep=clock.sleep)
    with pytest.raises(TransientError, match="after 3 attempts"):
        launcher.launch(workload(), RecordingHooks().hooks)
    client.close()


# -- observe ------------------------------------------------------------------------------


def launched(api: FakeKubeApi, launcher: KubernetesLauncher) -> tuple[Workload, str]:
    w = workload()
    launcher.launch(w, RecordingHooks().hooks)
    return w, job_name(w)


def test_observe_knows_nothing_of_a_job_never_launched(api, launcher):
    assert launcher.observe(workload()) is None


def test_observe_running(api, launcher):
    w, name = launched(api, launcher)
    assert launcher.observe(w).state == "running"  # no pod yet
    api.set_job_status(name, {"active": 1}, NS)
    api.add_pod(name, state=running(), namespace=NS)
    assert launcher.observe(w).state == "running"


def test_observe_reports_why_a_pod_is_stuck(api, launcher):
    w, name = launched(api, launcher)
    api.add_pod(name, state=waiting("ImagePullBackOff"), namespace=NS, phase="Pending")
    outcome = launcher.observe(w)
    assert (outcome.state, outcome.reason) == ("running", "ImagePullBackOff")


def test_observe_succeeded(api, launcher):
    w, name = launched(api, launcher)
    api.add_pod(name, state=terminated(0, "Completed"), namespace=NS, phase="Succeeded")
    api.set_job_status(name, {"succeeded": 1, "conditions": [condition("Complete")]}, NS)
    outcome = launcher.observe(w)
    assert (outcome.state, outcome.exit_code) == ("succeeded", 0)


def test_observe_failed_oom_killed(api, launcher):
    w, name = launched(api, launcher)
    api.add_pod(name, state=terminated(137, "OOMKilled"), namespace=NS, phase="Failed")
    api.set_job_status(name, {"failed": 1, "conditions": [
        condition("FailureTarget", "BackoffLimitExceeded"),
        condition("Failed", "BackoffLimitExceeded", "Job has reached the backoff limit")]}, NS)
    outcome = launcher.observe(w)
    assert (outcome.state, outcome.exit_code, outcome.reason) == ("failed", 137, "OOMKilled")


def test_observe_failed_by_count_before_the_condition_lands(api, launcher):
    w, name = launched(api, launcher)
    api.add_pod(name, state=terminated(2, "Error"), namespace=NS, phase="Failed")
    api.set_job_status(name, {"failed": 1}, NS)  # backoffLimit 0: one failure is final
    outcome = launcher.observe(w)
    assert (outcome.state, outcome.exit_code, outcome.reason) == ("failed", 2, "Error")


def test_observe_failed_without_a_pod_uses_the_condition(api, launcher):
    w, name = launched(api, launcher)
    api.set_job_status(name, {"failed": 1, "conditions": [
        condition("Failed", "DeadlineExceeded")]}, NS)
    outcome = launcher.observe(w)
    assert (outcome.state, outcome.exit_code, outcome.reason) == (
        "failed", None, "DeadlineExceeded")


def test_observe_reads_the_latest_pod(api, launcher):
    w, name = launched(api, launcher)
    then = datetime.now(UTC) - timedelta(minutes=5)
    api.add_pod(name, state=terminated(1, "Error"), namespace=NS, created=then)
    api.add_pod(name, state=terminated(137, "OOMKilled"), namespace=NS)
    api.set_job_status(name, {"failed": 2, "conditions": [condition("Failed")]}, NS)
    assert launcher.observe(w).reason == "OOMKilled"


def test_observe_only_sees_pods_of_its_job(api, launcher):
    w, name = launched(api, launcher)
    other = workload(2)
    launcher.launch(other, RecordingHooks().hooks)
    api.add_pod(job_name(other), state=terminated(137, "OOMKilled"), namespace=NS)
    assert launcher.observe(w).state == "running"
    assert api.requests_to("GET", f"/api/v1/namespaces/{NS}/pods")[-1].query == {
        "labelSelector": [f"job-name={name}"]}


# -- logs ----------------------------------------------------------------------------------


def test_logs_returns_the_pod_log(api, launcher):
    w, name = launched(api, launcher)
    text = 'epoch 1 loss 0.3\n{"json": "looking line"}\n$(HOME) stays\n'
    pod = api.add_pod(name, state=terminated(0, "Completed"), namespace=NS, log=text)
    assert launcher.logs(w) == text
    (request,) = api.requests_to("GET", f"/api/v1/namespaces/{NS}/pods/{pod}/log")
    assert request.query["container"] == ["task"]


def test_a_huge_log_is_read_only_up_to_the_budget_and_says_so(api, launcher):
    w, name = launched(api, launcher)
    budget = launcher.log_budget
    # One line far past the budget, a secret straddling the cut.
    text = "x" * (budget - 5) + SECRET_VALUE + "y" * (3 * budget)
    pod = api.add_pod(name, state=terminated(0, "Completed"), namespace=NS, log=text)
    got = launcher.logs(w)
    asked = api.requests_to("GET", f"/api/v1/namespaces/{NS}/pods/{pod}/log")
    # The server sends no more than the budget and a byte (the line's time counts too),
    # then, asked again from the same second, what was taken and the rest of the budget.
    assert [r.query["limitBytes"] for r in asked][0] == [str(budget + 1)]
    assert len(asked) == 2 and int(asked[1].query["limitBytes"][0]) < 2 * budget + 64
    assert got is not None and got.startswith("x" * 1000)
    assert SECRET_VALUE[:5] not in got and "output cut" in got and "not read" in got
    assert len(got.encode()) < TaskStore.LOG_LIMIT


def test_logs_of_a_job_without_pods_or_a_waiting_container_are_none(api, launcher):
    w, name = launched(api, launcher)
    assert launcher.logs(w) is None
    api.add_pod(name, state=waiting("ContainerCreating"), namespace=NS, phase="Pending")
    assert launcher.logs(w) is None


# -- rate limit ----------------------------------------------------------------------------


def test_bucket_allows_a_burst_then_the_rate():
    clock = FakeClock()
    bucket = TokenBucket(rate=20, burst=30, clock=clock, sleep=clock.sleep)
    assert sum(bucket.try_acquire() for _ in range(60)) == 30
    clock.now += 0.5
    assert sum(bucket.try_acquire() for _ in range(60)) == 10
    clock.now += 100
    assert sum(bucket.try_acquire() for _ in range(60)) == 30  # never more than the burst


def test_bucket_holds_under_a_burst_of_blocking_calls():
    clock = FakeClock()
    start = clock.now
    bucket = TokenBucket(rate=20, burst=30, clock=clock, sleep=clock.sleep)
    allowed_at = []
    for _ in range(60):
        bucket.acquire()
        allowed_at.append(clock.now)
    elapsed = clock.now - start
    assert elapsed == pytest.approx((60 - 30) / 20)
    for i, at in enumerate(allowed_at, start=1):  # the i-th call went through at `at`
        assert i <= 30 + 20 * (at - start) + 1e-9


def test_bucket_is_thread_safe():
    import threading

    bucket = TokenBucket(rate=1e-6, burst=50)
    got: list[bool] = []
    threads = [threading.Thread(target=lambda: got.extend(
        bucket.try_acquire() for _ in range(20))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(got) == 50


def test_bucket_rejects_nonsense():
    with pytest.raises(ValueError):
        TokenBucket(rate=0, burst=1)


def test_every_api_call_takes_a_token(api, launcher):
    before = launcher.bucket._tokens
    launcher.launch(workload(), RecordingHooks().hooks)  # secret, job, patch
    assert before - launcher.bucket._tokens == pytest.approx(3, abs=0.1)


def test_rate_limit_holds_against_the_server_in_real_time(api):
    launcher = make(api)  # real clock, real sleep; defaults: 20/s, burst 30
    started = time.monotonic()
    for _ in range(40):
        launcher.launch(workload(task_id=uuid.uuid4().hex, secret=False),
                        RecordingHooks().hooks)
    elapsed = time.monotonic() - started
    launcher.api.close()
    assert elapsed >= (40 - 30) / 20
    times = sorted(r.time for r in api.requests_to("POST", JOBS))
    assert len(times) == 40
    for i, t in enumerate(times):  # seen by the server: never more than burst + rate * time
        assert i + 1 <= 30 + 20 * (t - started) + 1


# --- cancel ------------------------------------------------------------------------------------

def test_cancel_deletes_the_job_with_propagation_so_its_pods_and_secret_go(api, launcher):
    job = workload()
    launcher.launch(job, RecordingHooks().hooks)
    name = job_name(job)
    api.add_pod(name, state=running(), namespace=NS)
    launcher.cancel(job)
    (delete,) = api.requests_to("DELETE", f"{JOBS}/{name}")
    assert delete.body["propagationPolicy"] == "Foreground"
    assert api.requests_to("DELETE", f"{SECRETS}/{secret_name(job)}")
    assert api.stored("job", NS) == [] and api.stored("pod", NS) == []
    assert api.stored("secret", NS) == []
    assert launcher.observe(job) is None


def test_the_contract_server_orphans_pods_without_propagation(api, launcher):
    """Why the launcher names a propagation: a batch/v1 Job's default leaves its pods."""
    job = workload(secret=False)
    launcher.launch(job, RecordingHooks().hooks)
    api.add_pod(job_name(job), state=running(), namespace=NS)
    launcher.batch.delete_namespaced_job(job_name(job), NS)
    assert api.stored("job", NS) == [] and len(api.stored("pod", NS)) == 1


def test_cancel_of_a_job_already_gone_is_quiet_and_twice_is_fine(api, launcher):
    job = workload()
    launcher.cancel(job)
    launcher.cancel(job)
    assert len(api.requests_to("DELETE", f"{JOBS}/{job_name(job)}")) == 2


def test_cancel_while_the_job_is_still_there_is_transient(api, launcher):
    """Foreground deletion keeps the Job until its pods are gone: not stopped yet."""
    job = workload(secret=False)
    launcher.launch(job, RecordingHooks().hooks)
    api.script("DELETE", f"{JOBS}/{job_name(job)}", 200, body={"kind": "Status"})
    with pytest.raises(TransientError, match="still being deleted"):
        launcher.cancel(job)


def test_cancel_retries_a_busy_api_server(api, launcher, clock):
    job = workload(secret=False)
    launcher.launch(job, RecordingHooks().hooks)
    api.script("DELETE", f"{JOBS}/{job_name(job)}", 503, times=2)
    launcher.cancel(job)
    assert len(api.requests_to("DELETE", f"{JOBS}/{job_name(job)}")) == 3
    assert api.stored("job", NS) == []


CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"


def test_a_task_s_files_go_in_a_configmap_its_job_owns_and_cancel_deletes(api, launcher):
    from dataclasses import replace

    from shared.task.files import TaskFile
    from shared.task.manifest import files_name
    job = replace(workload(secret=False), files=(TaskFile("prepare.sh", "echo $(HOME)\n", 0o755),
                                                 TaskFile("conf/a.yaml", "lr: 1\n")))
    launcher.launch(job, RecordingHooks().hooks)
    assert [r.path for r in api.requests if r.method == "POST"] == [CONFIGMAPS, JOBS]
    (files,) = api.stored("configmap", NS)
    assert files["metadata"]["name"] == files_name(job)
    assert files["data"] == {"file-0": "echo $(HOME)\n", "file-1": "lr: 1\n"}  # literal
    (stored_job,) = api.stored("job", NS)
    assert files["metadata"]["ownerReferences"][0]["uid"] == stored_job["metadata"]["uid"]
    spec = stored_job["spec"]["template"]["spec"]
    assert spec["initContainers"][0]["name"] == "files"
    launcher.cancel(job)
    assert api.requests_to("DELETE", f"{CONFIGMAPS}/{files_name(job)}")
    assert api.stored("configmap", NS) == []


def test_a_task_that_names_no_image_gets_the_kubernetes_default_image(api):
    """Never the local runtime image (localhost/...), which no cluster can pull."""
    settings = Settings(launcher="kubernetes", kube_namespace=NS,
                        kube_image="registry.example.com/train/base:2.1")
    launcher = KubernetesLauncher(settings, make_api_client(Configuration(host=api.url)))
    try:
        unnamed = dataclasses.replace(workload(task_id="a" * 32, secret=False),
                                      image=DEFAULT_IMAGE)
        named = workload(task_id="b" * 32, secret=False)
        for w in (unnamed, named):
            launcher.launch(w, RecordingHooks().hooks)
    finally:
        launcher.api.close()

    images = {job["metadata"]["name"]: job["spec"]["template"]["spec"]["containers"][0]["image"]
              for job in api.stored("job", NS)}
    assert images == {job_name(unnamed): "registry.example.com/train/base:2.1",
                      job_name(named): "train:1"}


def test_the_kubernetes_default_image_is_one_a_cluster_can_pull():
    assert not Settings().kube_image.startswith("localhost/")
    assert Settings.from_env({"TASKENV_KUBE_IMAGE": "r.example/x:1"}).kube_image == "r.example/x:1"
