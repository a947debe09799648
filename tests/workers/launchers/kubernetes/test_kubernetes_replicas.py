"""A task of several replicas on Kubernetes, against the contract server: an Indexed Job,
its headless Service and NetworkPolicy, owned by the Job and deleted with it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests.contract.k8s_api import FakeKubeApi, condition, terminated
from tests.workers.conftest import RecordingHooks
from tests.workers.launchers.kubernetes.test_kubernetes_launcher import (
    NS,
    FakeClock,
    api,
    clock,
    make,
    workload,
)
from workers.launchers.kubernetes.launcher import KubernetesLauncher

__all__ = ["api", "clock"]

SERVICES = f"/api/v1/namespaces/{NS}/services"
POLICIES = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"


@pytest.fixture
def launcher(api: FakeKubeApi, clock: FakeClock) -> Iterator[KubernetesLauncher]:
    launcher = make(api, clock)
    yield launcher
    launcher.api.close()


def three():
    return replace(workload(), replicas=3)


def owners(obj: dict) -> list[str]:
    return [ref["uid"] for ref in obj["metadata"].get("ownerReferences") or []]


def test_launch_makes_an_indexed_job_a_service_and_a_policy_all_owned_by_the_job(
        api: FakeKubeApi, launcher: KubernetesLauncher) -> None:
    launcher.launch(three(), RecordingHooks().hooks)
    (job,) = api.stored("job", NS)
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 3
    (service,) = api.stored("service", NS)
    (policy,) = api.stored("networkpolicy", NS)
    (secret,) = api.stored("secret", NS)
    uid = job["metadata"]["uid"]
    assert owners(service) == owners(policy) == owners(secret) == [uid]
    assert service["spec"]["clusterIP"] == "None"
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]


def test_a_redelivered_launch_finishes_what_a_crash_left_half_made(
        api: FakeKubeApi, launcher: KubernetesLauncher) -> None:
    w = three()
    from shared.task.manifest import build, to_dict
    api.add_job(to_dict(build(w, launcher.manifest_settings).job), NS)  # then the worker died

    launcher.launch(w, RecordingHooks().hooks)

    (job,) = api.stored("job", NS)
    assert [owners(o) for o in (*api.stored("service", NS), *api.stored("networkpolicy", NS))] \
        == [[job["metadata"]["uid"]]] * 2
    launcher.launch(w, RecordingHooks().hooks)  # and once more: nothing new, nothing fails
    assert len(api.stored("service", NS)) == len(api.stored("networkpolicy", NS)) == 1


def test_cancel_deletes_the_job_its_pods_service_and_policy(
        api: FakeKubeApi, launcher: KubernetesLauncher) -> None:
    w = three()
    launcher.launch(w, RecordingHooks().hooks)
    name = api.stored("job", NS)[0]["metadata"]["name"]
    for k in range(3):
        api.add_pod(name, state={"running": {}}, namespace=NS, index=k)

    launcher.cancel(w)

    assert all(api.stored(kind, NS) == [] for kind in
               ("job", "pod", "service", "networkpolicy", "secret"))
    deletes = [r for r in api.requests if r.method == "DELETE" and "/jobs/" in r.path]
    assert deletes[0].body["propagationPolicy"] == "Foreground"


def test_each_replicas_log_is_prefixed_with_its_index_and_redacted(
        api: FakeKubeApi, launcher: KubernetesLauncher) -> None:
    from tests.workers.launchers.kubernetes.test_kubernetes_launcher import SECRET_VALUE
    w = three()
    launcher.launch(w, RecordingHooks().hooks)
    name = api.stored("job", NS)[0]["metadata"]["name"]
    for k in (2, 0, 1):
        api.add_pod(name, state=terminated(0, "Completed"), namespace=NS, index=k,
                    log=f"rank {k} done {SECRET_VALUE}\n")

    text = launcher.logs(w)

    assert text == "".join(f"[replica {k}] rank {k} done [secret]\n" for k in range(3))


def test_the_first_failed_index_fails_the_task_naming_its_pod(
        api: FakeKubeApi, launcher: KubernetesLauncher) -> None:
    w = three()
    launcher.launch(w, RecordingHooks().hooks)
    name = api.stored("job", NS)[0]["metadata"]["name"]
    pod = api.add_pod(name, state=terminated(3, "Error"), namespace=NS, index=1,
                      phase="Failed")
    message = (f"Container task for pod {NS}/{pod} failed with exit code 3 matching "
               "FailJob rule at index 0")
    api.set_job_status(name, {"failed": 1, "conditions": [
        condition("Failed", "PodFailurePolicy", message)]}, NS)

    outcome = launcher.observe(w)

    assert outcome is not None and (outcome.state, outcome.exit_code) == ("failed", 3)
    assert outcome.reason == message and f"{name}-1-" in outcome.reason


def test_the_server_refuses_an_indexed_job_without_completions(api: FakeKubeApi) -> None:
    import requests
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
            "spec": {"completionMode": "Indexed", "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}
    answer = requests.post(f"{api.url}/apis/batch/v1/namespaces/{NS}/jobs", json=body,
                           timeout=5)
    assert answer.status_code == 422 and "spec.completions" in answer.json()["message"]


def test_replicas_a_quota_would_not_admit_fail_the_task_visibly_once_stuck(tasks, api) -> None:
    from kubernetes.client import Configuration

    from shared.config import Settings
    from shared.store.tasks import TaskStore
    from shared.task import records, states
    from shared.task.manifest import ManifestSettings, build, job_name, to_dict
    from shared.task.workload import Workload
    from tests.workers.launchers.kubernetes.test_kubernetes_watch import STUCK, one_pass
    from workers.launchers.kubernetes.launcher import make_api_client

    launcher = KubernetesLauncher(Settings(launcher="kubernetes", kube_namespace="default"),
                                  make_api_client(Configuration(host=api.url)),
                                  rate=10_000, burst=10_000)
    store: TaskStore = tasks
    docs = [{**records.new_task({"name": "ddp", "steps": [["true"]], "env": [],
                                 "replicas": 3}, "u"),
             "state": states.RUNNING, "resolved": [], "policy_version": 0} for _ in range(2)]
    store.load_many(docs)
    short, whole = (Workload.from_doc(d) for d in docs)
    for w in (short, whole):
        api.add_job(to_dict(build(w, ManifestSettings()).job))
    for k in range(2):  # the quota let two of three pods be created
        api.add_pod(job_name(short), state={"running": {}}, index=k)
    for k in range(3):
        api.add_pod(job_name(whole), state={"running": {}}, index=k)
    now = store.get(short.task_id)["updated_at"] + 1

    one_pass(store, launcher, now)
    assert store.get(short.task_id)["state"] == states.RUNNING  # the quota may free up
    one_pass(store, launcher, now + STUCK + 1)

    failed = store.get(short.task_id)
    assert failed["state"] == states.FAILED and "ReplicasNotAdmitted" in failed["reason"]
    assert store.get(whole.task_id)["state"] == states.RUNNING
    launcher.api.close()


def test_per_node_defaults_are_named_as_not_applied(launcher: KubernetesLauncher,
                                                    api: FakeKubeApi) -> None:
    hooks = RecordingHooks()
    launcher.launch(replace(three(), per_node=(("NCCL_SOCKET_IFNAME", "ib0", "gpu-*"),)),
                    hooks.hooks)
    assert "per-node defaults (NCCL_SOCKET_IFNAME) are not applied" in hooks.text
    (job,) = api.stored("job", NS)
    env = job["spec"]["template"]["spec"]["containers"][0].get("env") or []
    assert "NCCL_SOCKET_IFNAME" not in {e["name"] for e in env}
