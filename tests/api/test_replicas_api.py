"""Distributed tasks at the API: replicas are bounded, counted replica by replica in the
owner's quotas (by the store's own scripts), and shown; identity variables are refused."""

from __future__ import annotations

from collections.abc import Callable

import fakeredis
import pytest
from flask import Flask

from shared.store.tasks import TaskStore
from shared.task import states
from shared.task.resolution import decide_policy, decide_validation
from tests.api.conftest import ADMIN_TOKEN, EnqueueSpy, build_app, client_with
from tests.api.test_quotas_api import WINDOW_START, body, rules, user

TASKS = "/api/v1/tasks"
PREVIEW = "/api/v1/env/preview"


@pytest.fixture
def app_with(redis_client: fakeredis.FakeRedis,
             enqueued: EnqueueSpy) -> Callable[..., Flask]:
    def make(**overrides: object) -> Flask:
        app = build_app(redis_client, enqueued, **overrides)
        app.extensions["taskenv"].quotas.clock = lambda: WINDOW_START + 1
        return app

    return make


def test_a_task_gets_its_replicas_and_one_by_default(app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(), "ann")
    one = ann.post(TASKS, json=body()).get_json()["id"]
    three = ann.post(TASKS, json=body(replicas=3, procs_per_replica=2)).get_json()["id"]
    assert (ann.get(f"{TASKS}/{one}").get_json()["replicas"]) == 1
    shown = ann.get(f"{TASKS}/{three}").get_json()
    assert (shown["replicas"], shown["procs_per_replica"]) == (3, 2)


def test_more_replicas_than_the_setting_allows_are_refused_naming_it(
        app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(max_replicas=4, local_max_running=0), "ann")
    refused = ann.post(TASKS, json=body(replicas=5))
    assert refused.status_code == 400
    assert rules(refused) == [("replicas.max", 4)]
    assert "TASKENV_MAX_REPLICAS" in refused.get_json()["errors"][0]["message"]
    assert ann.post(TASKS, json=body(replicas=0)).status_code == 422
    assert ann.get(TASKS).get_json()["items"] == []  # nothing stored


def test_on_the_local_launcher_more_replicas_than_a_host_runs_at_once_are_refused(
        app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(launcher="local", local_max_running=2), "ann")
    refused = ann.post(TASKS, json=body(replicas=3))
    assert refused.status_code == 400
    assert rules(refused) == [("replicas.host_slots", 2)]
    assert "TASKENV_LOCAL_MAX_RUNNING" in refused.get_json()["errors"][0]["message"]
    assert ann.post(TASKS, json=body(replicas=2)).status_code == 202  # fits whole
    elsewhere = user(app_with(launcher="kubernetes", local_max_running=2), "bob")
    assert elsewhere.post(TASKS, json=body(replicas=3)).status_code == 202  # no host cap


def test_a_task_larger_than_a_quota_alone_is_refused_at_creation(
        app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(quota_unfinished_tasks=3, quota_creates_per_minute=2), "ann")
    refused = ann.post(TASKS, json=body(replicas=4))
    assert refused.status_code == 400
    assert sorted(rules(refused)) == [("quota.creates_per_minute", 2),
                                      ("quota.unfinished_tasks", 3)]
    assert "can never run" in refused.get_json()["errors"][0]["message"]


def test_unfinished_replicas_count_against_the_quota_and_come_back_when_a_task_ends(
        app_with: Callable[..., Flask], redis_client: fakeredis.FakeRedis) -> None:
    app = app_with(quota_unfinished_tasks=5)
    ann = user(app, "ann")
    big = ann.post(TASKS, json=body(replicas=4)).get_json()["id"]
    assert ann.post(TASKS, json=body()).status_code == 202  # 4 + 1 = 5
    refused = ann.post(TASKS, json=body(replicas=2))
    assert refused.status_code == 409 and rules(refused) == [("quota.unfinished_tasks", 5)]
    assert "task replicas" in refused.get_json()["errors"][0]["message"]
    assert ann.post(TASKS, json=body()).status_code == 409  # not even one more
    tasks: TaskStore = app.extensions["taskenv"].tasks
    assert tasks.move(big, 1, states.PENDING, states.CANCELLED)  # the script gives 3 back
    assert app.extensions["taskenv"].quotas.unfinished("ann") == 1
    assert ann.post(TASKS, json=body(replicas=4)).status_code == 202


def test_a_rejected_and_reopened_task_gives_back_and_takes_its_replicas(
        app_with: Callable[..., Flask]) -> None:
    app = app_with(quota_unfinished_tasks=4)
    ann = user(app, "ann")
    big = ann.post(TASKS, json=body(replicas=3)).get_json()["id"]
    tasks: TaskStore = app.extensions["taskenv"].tasks
    quotas = app.extensions["taskenv"].quotas
    assert tasks.transition(big, 1, states.PENDING, states.REJECTED) is not None
    assert quotas.unfinished("ann") == 0
    patched = ann.patch(f"{TASKS}/{big}/env", json={"set": [{"name": "A", "value": "1"}]})
    assert patched.status_code == 202
    assert quotas.unfinished("ann") == 3
    assert ann.post(TASKS, json=body(replicas=2)).status_code == 409


def test_a_creation_counts_each_replica_in_the_rate(app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(quota_creates_per_minute=5), "ann")
    assert ann.post(TASKS, json=body(replicas=4)).status_code == 202
    refused = ann.post(TASKS, json=body(replicas=2))
    assert refused.status_code == 429 and rules(refused) == [("quota.creates_per_minute", 5)]


def test_an_identity_variable_from_the_user_is_refused_naming_each(
        app_with: Callable[..., Flask]) -> None:
    app = app_with()
    ann = user(app, "ann")
    env = [{"name": "RANK", "value": "0"}, {"name": "MASTER_ADDR", "value": "h"}]
    answer = ann.post(PREVIEW, json={"env": env}).get_json()
    assert answer["ok"] is False
    assert [e["variable"] for e in answer["errors"]] == ["RANK", "MASTER_ADDR"]
    assert all("per replica" in e["message"] for e in answer["errors"])
    # A .env file is the same list: the policy stage refuses it as it refuses the preview.
    task = ann.post(TASKS, json=body(env=[], env_file="RANK=0\nMASTER_ADDR=h\n")).get_json()
    svc = app.extensions["taskenv"]
    doc = svc.tasks.get(task["id"])
    _, checked = decide_validation(doc, svc.limits)
    state, decided = decide_policy({**doc, **checked}, svc.policies.chain(doc))
    assert state == states.REJECTED
    assert [(e["rule"], e["variable"]) for e in decided["errors"]] == [
        ("platform.identity", "RANK"), ("platform.identity", "MASTER_ADDR")]


def test_preview_shows_replica_zero_and_what_differs(app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(max_replicas=4, local_max_running=0), "ann")
    got = ann.post(PREVIEW, json={"env": [], "replicas": 4}).get_json()
    env = {v["name"]: v["value"] for v in got["variables"]}
    assert (env["RANK"], env["WORLD_SIZE"], env["PET_NNODES"]) == ("0", "4", "4")
    assert got["replicas"] == 4 and "3 in replica 3" in got["differs"][1]["values"]
    over = ann.post(PREVIEW, json={"env": [], "replicas": 5}).get_json()
    assert over["ok"] is False and [e["rule"] for e in over["errors"]] == ["replicas.max"]


def test_an_admin_policy_naming_an_identity_variable_is_refused(
        app_with: Callable[..., Flask]) -> None:
    admin = client_with(app_with(), ADMIN_TOKEN)
    answer = admin.put("/api/v1/policy", json={
        "defaults": [{"name": "WORLD_SIZE", "value": "8"}],
        "protected": [{"name": "MASTER_ADDR", "value": "h", "reason": "ours"}],
        "rules": [{"name": "RANK", "max": 3}]})
    assert answer.status_code == 422
    found = [(e["rule"], e["variable"]) for e in answer.get_json()["errors"]
             if e["rule"] == "policy.platform_identity"]
    assert found == [("policy.platform_identity", "WORLD_SIZE"),
                     ("policy.platform_identity", "MASTER_ADDR"),
                     ("policy.platform_identity", "RANK")]


def test_on_kubernetes_the_preview_names_replica_zero_after_the_job(
        app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(launcher="kubernetes"), "ann")
    got = ann.post(PREVIEW, json={"env": [], "replicas": 2}).get_json()
    env = {v["name"]: v["value"] for v in got["variables"]}
    assert env["MASTER_ADDR"] == "<the task's job>-0.<the task's job>"
    assert env["PET_MASTER_ADDR"] == env["MASTER_ADDR"]


def test_on_the_local_launcher_replicas_that_together_need_more_memory_than_a_host_are_refused(
        app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(launcher="local", local_max_running=4, local_host_memory="24Gi"), "ann")
    refused = ann.post(TASKS, json=body(replicas=4, resources={"memory": "20Gi"}))
    assert refused.status_code == 422, refused.get_json()
    assert refused.get_json()["code"] == "resources_invalid"
    (problem,) = refused.get_json()["errors"]
    assert (problem["rule"], problem["field"], problem["limit"]) == (
        "resource_limit", "resources.memory", 6 * 2**30)
    assert "4 replicas of 20Gi ask for 80Gi on one host, which has 24Gi" in problem["message"]
    assert ann.get(TASKS).get_json()["items"] == []  # nothing stored
    assert ann.post(TASKS, json=body(replicas=4, resources={"memory": "6Gi"})).status_code == 202
    elsewhere = user(app_with(launcher="kubernetes", local_host_memory="24Gi"), "bob")
    assert elsewhere.post(TASKS, json=body(replicas=4, resources={"memory": "20Gi"})
                          ).status_code == 202  # replicas on several nodes


# --- nodes: replicas spread over several, where the launcher places them (Slurm) ----------

def test_a_task_over_two_nodes_on_slurm_is_shown_and_meets_in_the_jobs_network(
        app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(launcher="slurm", max_replicas=8), "ann")
    created = ann.post(TASKS, json=body(replicas=4, nodes=2))
    assert created.status_code == 202, created.get_json()
    shown = ann.get(f"{TASKS}/{created.get_json()['id']}").get_json()
    assert (shown["replicas"], shown["nodes"]) == (4, 2)
    got = ann.post(PREVIEW, json={"env": [], "replicas": 2, "nodes": 2}).get_json()
    env = {v["name"]: v["value"] for v in got["variables"]}
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "10.254.0.1", got
    one = ann.post(PREVIEW, json={"env": [], "replicas": 2}).get_json()
    assert {v["name"]: v["value"] for v in one["variables"]}["MASTER_ADDR"] == "127.0.0.1"
    # The interface for gloo and NCCL is chosen on each node, unless the task sets it.
    chosen = {v["name"]: v for v in got["variables"] if v.get("source") == "node"}
    assert sorted(chosen) == ["GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"], got
    assert "chosen on each node" in chosen["GLOO_SOCKET_IFNAME"]["value"]
    own = ann.post(PREVIEW, json={"env": [{"name": "NCCL_SOCKET_IFNAME", "value": "ib0"}],
                                  "replicas": 2, "nodes": 2}).get_json()
    assert [(v["name"], v["value"], v["source"]) for v in own["variables"]
            if "SOCKET_IFNAME" in v["name"]] == [
        ("NCCL_SOCKET_IFNAME", "ib0", "user"), ("GLOO_SOCKET_IFNAME", chosen[
            "GLOO_SOCKET_IFNAME"]["value"], "node")], own
    alone = ann.post(PREVIEW, json={"env": [], "replicas": 1}).get_json()
    assert not [v for v in alone["variables"] if v.get("source") == "node"], alone


def test_nodes_that_cannot_hold_the_replicas_evenly_are_refused_every_reason_at_once(
        app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(launcher="slurm", max_replicas=8), "ann")
    assert rules(ann.post(TASKS, json=body(replicas=3, nodes=2))) == [("nodes.divides", 3)]
    assert rules(ann.post(TASKS, json=body(replicas=2, nodes=4))) == [("nodes.replicas", 2)]
    refused = ann.post(TASKS, json=body(replicas=9, nodes=2))
    assert rules(refused) == [("replicas.max", 8), ("nodes.divides", 9)]
    assert ann.post(TASKS, json=body(nodes=0)).status_code == 422
    assert ann.post(TASKS, json=body(nodes=254)).status_code == 422
    preview = ann.post(PREVIEW, json={"env": [], "replicas": 3, "nodes": 2}).get_json()
    assert [e["rule"] for e in preview["errors"]] == ["nodes.divides"], preview
    assert ann.get(TASKS).get_json()["items"] == []  # nothing stored


@pytest.mark.parametrize("launcher", ["local", "podman", "kubernetes", "dryrun"])
def test_nodes_are_refused_where_the_launcher_does_not_place_replicas_on_nodes(
        app_with: Callable[..., Flask], launcher: str) -> None:
    ann = user(app_with(launcher=launcher, local_max_running=0), "ann")
    refused = ann.post(TASKS, json=body(replicas=2, nodes=2))
    assert refused.status_code == 400
    assert rules(refused) == [("nodes.backend", 1)]
    assert f"the {launcher} launcher" in refused.get_json()["errors"][0]["message"]
    assert ann.post(TASKS, json=body(replicas=2, nodes=1)).status_code == 202
