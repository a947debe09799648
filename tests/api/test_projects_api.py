"""Projects and layered policies through the API, with the stages run in-process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.env.envlist import Limits
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from shared.task import states
from tests.api.conftest import Browser, task_body
from workers import stages

PLATFORM = {"defaults": [{"name": "LR", "value": "0.1"}],
            "protected": [{"name": "NCCL_P2P_DISABLE", "value": "1",
                           "reason": "no peer-to-peer on this fabric"}]}


@pytest.fixture
def users(client_for: Callable[..., FlaskClient]) -> dict[str, FlaskClient]:
    return {name: client_for(name) for name in ("alice", "bob", "carol", "dave")}


@pytest.fixture
def projects(client: FlaskClient) -> None:
    """vision: alice a member, carol its maintainer; speech: bob a member, dave its
    maintainer; alice and bob both in shared."""
    for name, members, maintainers in (("vision", ["alice"], ["carol"]),
                                       ("speech", ["bob"], ["dave"])):
        made = client.post("/api/v1/projects", json={"name": name, "members": members,
                                                     "maintainers": maintainers})
        assert made.status_code == 201, made.get_json()


def put_policy(client: FlaskClient, path: str, **policy: Any) -> Any:
    return client.put(path, json={"defaults": [], "protected": [], **policy})


def run_stages(tasks: TaskStore, policies: PolicyStore, task_id: str) -> dict[str, Any]:
    revision = tasks.get(task_id)["revision"]
    if stages.validate(tasks, Limits(), task_id, revision):
        stages.apply_policy(tasks, policies, task_id, revision)
    return tasks.get(task_id)


def create(user: FlaskClient, **changes: Any) -> Any:
    return user.post("/api/v1/tasks", json=task_body(**changes))


def resolved(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in doc["resolved"]}


# --- the layers --------------------------------------------------------------------------

@pytest.mark.usefixtures("projects")
def test_a_project_policy_cannot_set_or_unprotect_a_platform_protected_variable(
        client: FlaskClient, error_shape: Callable[..., None]) -> None:
    assert put_policy(client, "/api/v1/policy", **PLATFORM).status_code == 200
    attempts = [
        {"defaults": [{"name": "NCCL_P2P_DISABLE", "value": "0"}]},
        {"protected": [{"name": "NCCL_P2P_DISABLE", "reason": "ours now"}]},
        {"protected": [{"name": "NCCL_P2P_DISABLE", "value": "0", "reason": "ours now"}]},
    ]
    for attempt in attempts:
        refused = put_policy(client, "/api/v1/projects/vision/policy", **attempt)
        assert refused.status_code == 422, refused.get_json()
        body = refused.get_json()
        error_shape(body, "policy_invalid")
        problem = next(p for p in body["errors"] if p["rule"] == "layer.platform_protected")
        assert problem["variable"] == "NCCL_P2P_DISABLE"
        assert "platform's protected entry NCCL_P2P_DISABLE" in problem["message"]
    versions = client.get("/api/v1/projects/vision/policy/versions").get_json()
    assert versions == {"current": 0, "versions": []}


@pytest.mark.usefixtures("projects")
def test_a_task_in_project_a_gets_as_defaults_and_not_bs(
        client: FlaskClient, users: dict[str, FlaskClient], tasks: TaskStore,
        policies: PolicyStore) -> None:
    put_policy(client, "/api/v1/projects/vision/policy",
               defaults=[{"name": "DATA_DIR", "value": "/data/vision"}])
    put_policy(client, "/api/v1/projects/speech/policy",
               defaults=[{"name": "DATA_DIR", "value": "/data/speech"},
                         {"name": "SAMPLE_RATE", "value": "16000"}])
    made = create(users["alice"])
    assert made.status_code == 202, made.get_json()
    doc = run_stages(tasks, policies, made.get_json()["id"])
    assert doc["state"] == states.RESOLVED and doc["project"] == "vision"
    env = resolved(doc)
    assert env["DATA_DIR"]["value"] == "/data/vision" and "SAMPLE_RATE" not in env
    assert doc["policy_versions"] == {"platform": 0, "project:vision": 1}


@pytest.mark.usefixtures("projects")
def test_a_project_default_overrides_a_platform_default_and_says_so_with_both_scopes(
        client: FlaskClient, users: dict[str, FlaskClient], tasks: TaskStore,
        policies: PolicyStore) -> None:
    put_policy(client, "/api/v1/policy", **PLATFORM)
    put_policy(client, "/api/v1/projects/vision/policy",
               defaults=[{"name": "LR", "value": "0.2"}])
    task_id = create(users["alice"], env=[]).get_json()["id"]
    run_stages(tasks, policies, task_id)
    shown = users["alice"].get(f"/api/v1/tasks/{task_id}").get_json()
    lr = next(v for v in shown["resolved_env"] if v["name"] == "LR")
    assert lr["value"] == "0.2" and lr["source"] == "default"
    assert lr["scope"] == "project:vision" and lr["policy_version"] == 1
    assert lr["shadowed"] == [{"source": "default", "scope": "platform", "value": "0.1"}]
    assert shown["project"] == "vision" and shown["policy_version"] == 1
    assert shown["policy_versions"] == {"platform": 1, "project:vision": 1}


@pytest.fixture
def gpu_backend(app: Any) -> None:
    """The app as it runs on a backend that gives GPUs (the local one refuses them)."""
    from api.context import services_of
    from workers.launchers.registry import traits

    services_of(app).backend = traits("slurm")


@pytest.mark.usefixtures("projects", "gpu_backend")
def test_a_gpu_default_reaches_a_gpu_task_and_not_a_cpu_one_and_preview_says_why(
        client: FlaskClient, users: dict[str, FlaskClient], tasks: TaskStore,
        policies: PolicyStore) -> None:
    saved = put_policy(client, "/api/v1/projects/vision/policy",
                       defaults=[{"name": "NCCL_DEBUG", "value": "INFO",
                                  "when": {"gpus": ">=1"}}])
    assert saved.status_code == 200, saved.get_json()
    assert saved.get_json()["defaults"][0]["when"] == {"gpus": ">=1"}
    gpu = create(users["alice"], resources={"gpus": 2}).get_json()["id"]
    cpu = create(users["alice"]).get_json()["id"]
    assert resolved(run_stages(tasks, policies, gpu))["NCCL_DEBUG"]["when"] == "gpus>=1"
    assert "NCCL_DEBUG" not in resolved(run_stages(tasks, policies, cpu))

    def preview(gpus: int) -> dict[str, Any]:
        answer = users["alice"].post("/api/v1/env/preview",
                                     json={"env": [], "resources": {"gpus": gpus}})
        assert answer.status_code == 200, answer.get_json()
        return answer.get_json()

    with_gpu = next(v for v in preview(1)["variables"] if v["name"] == "NCCL_DEBUG")
    assert (with_gpu["scope"], with_gpu["when"]) == ("project:vision", "gpus>=1")
    without = preview(0)
    assert "NCCL_DEBUG" not in {v["name"] for v in without["variables"]}
    assert without["not_applied"] == [{"name": "NCCL_DEBUG", "kind": "default",
                                       "scope": "project:vision", "when": "gpus>=1"}]
    assert without["policy_versions"] == {"platform": 0, "project:vision": 1}


# --- membership --------------------------------------------------------------------------

@pytest.mark.usefixtures("projects")
def test_the_project_of_a_new_task(client: FlaskClient, users: dict[str, FlaskClient],
                                   client_for: Callable[..., FlaskClient],
                                   tasks: TaskStore, error_shape: Callable[..., None]) -> None:
    only = create(users["alice"])  # alice's only project is the default
    assert tasks.get(only.get_json()["id"])["project"] == "vision"
    outsider = create(client_for("erin"))  # in no project: as before projects existed
    assert outsider.status_code == 202 and "project" not in tasks.get(outsider.get_json()["id"])
    client.patch("/api/v1/projects/speech", json={"members": ["bob", "alice"]})
    ambiguous = create(users["alice"])
    assert ambiguous.status_code == 400
    error_shape(ambiguous.get_json(), "bad_request")
    assert "speech, vision" in ambiguous.get_json()["message"]
    assert create(users["alice"], project="speech").status_code == 202
    refused, unknown = (create(users["bob"], project=p) for p in ("vision", "nowhere"))
    assert refused.status_code == unknown.status_code == 404  # not bob's: no such project
    assert refused.get_json()["message"] == "no project vision"


@pytest.mark.usefixtures("projects")
def test_a_maintainer_reads_the_projects_tasks_but_cannot_change_them(
        users: dict[str, FlaskClient]) -> None:
    task_id = create(users["alice"]).get_json()["id"]
    carol, dave, bob = users["carol"], users["dave"], users["bob"]
    assert carol.get(f"/api/v1/tasks/{task_id}").status_code == 200
    patched = carol.patch(f"/api/v1/tasks/{task_id}/env",
                          json={"set": [{"name": "LR", "value": "9"}]})
    assert patched.status_code == 403  # may read, not change
    assert dave.get(f"/api/v1/tasks/{task_id}").status_code == 404  # another project's
    assert bob.get(f"/api/v1/tasks/{task_id}").status_code == 404
    assert carol.get("/api/v1/tasks").get_json()["items"] == []  # listings stay one's own


@pytest.mark.usefixtures("projects")
def test_only_maintainers_and_admins_touch_a_project_policy(
        client: FlaskClient, users: dict[str, FlaskClient]) -> None:
    path = "/api/v1/projects/vision/policy"
    assert put_policy(users["alice"], path).status_code == 403  # a member
    assert put_policy(users["dave"], path).status_code == 404  # not in it: no such project
    assert users["alice"].get(path).status_code == 403
    saved = put_policy(users["carol"], path, defaults=[{"name": "X", "value": "1"}])
    assert saved.status_code == 200 and saved.get_json()["scope"] == "project:vision"
    assert users["carol"].get(f"{path}/versions/1").get_json()["author"] == "carol"
    assert client.get(path).get_json()["version"] == 1
    assert put_policy(client, "/api/v1/projects/nowhere/policy").status_code == 404


@pytest.mark.usefixtures("projects")
def test_admins_manage_projects_and_others_list_their_own(
        client: FlaskClient, users: dict[str, FlaskClient],
        error_shape: Callable[..., None]) -> None:
    alice = users["alice"]
    assert alice.post("/api/v1/projects", json={"name": "mine"}).status_code == 403
    assert alice.delete("/api/v1/projects/vision").status_code == 403
    assert [p["name"] for p in alice.get("/api/v1/projects").get_json()["items"]] == ["vision"]
    everything = client.get("/api/v1/projects").get_json()["items"]
    assert [p["name"] for p in everything] == ["speech", "vision"]
    bad = client.post("/api/v1/projects", json={"name": "Not_OK"})
    assert bad.status_code == 400
    error_shape(bad.get_json(), "bad_request")
    assert client.post("/api/v1/projects", json={"name": "vision"}).status_code == 409
    assert client.delete("/api/v1/projects/vision").status_code == 204
    assert client.get("/api/v1/projects/vision").status_code == 404
    assert alice.get("/api/v1/projects").get_json()["items"] == []


# --- impact ------------------------------------------------------------------------------

@pytest.mark.usefixtures("projects")
def test_a_drafts_impact_names_rejections_and_changes_and_saves_nothing(
        client: FlaskClient, users: dict[str, FlaskClient], tasks: TaskStore,
        policies: PolicyStore) -> None:
    alice_task = create(users["alice"], env=[{"name": "MODE", "value": "fast"}]).get_json()["id"]
    bob_task = create(users["bob"], env=[{"name": "MODE", "value": "slow"}]).get_json()["id"]
    for task_id in (alice_task, bob_task):
        run_stages(tasks, policies, task_id)
    draft = {"defaults": [{"name": "LR", "value": "0.3"}], "protected": [],
             "rules": [{"name": "MODE", "allowed": ["fast"], "description": "fast only"}]}
    found = client.post("/api/v1/policy/impact", json=draft).get_json()
    assert (found["considered"], found["rejected"], found["changed"]) == (2, 1, 1)
    assert [(r["variable"], r["rule"], r["tasks"], r["owners"]) for r in found["rejections"]] \
        == [("MODE", "rule.allowed", 1, 1)]
    assert [(c["name"], c["old"], c["new"], c["tasks"]) for c in found["changes"]] \
        == [("LR", None, "0.3", 1)]
    project = client.post("/api/v1/projects/vision/policy/impact", json=draft).get_json()
    assert (project["considered"], project["rejected"], project["changed"]) == (1, 0, 1)
    assert client.get("/api/v1/policy").get_json()["version"] == 0
    assert users["carol"].post("/api/v1/projects/speech/policy/impact",
                               json=draft).status_code == 404  # not carol's project


# --- console -----------------------------------------------------------------------------



@pytest.mark.usefixtures("projects")
def test_console_admins_manage_projects_and_maintainers_preview_then_save(
        browser: Callable[..., Browser], users: dict[str, FlaskClient],
        policies: PolicyStore, tasks: TaskStore) -> None:
    admin = browser()
    assert admin.post("/ui/projects", {"name": "audio", "members": "alice, bob",
                                       "maintainers": "carol"}).status_code == 302
    assert "audio" in admin.get("/ui/projects").text
    admin.post("/ui/projects/audio", {"members": "bob", "maintainers": "carol"})
    carol = browser("carol")
    task_id = create(users["alice"], env=[]).get_json()["id"]
    run_stages(tasks, policies, task_id)
    draft = {"defaults-0-name": "LR", "defaults-0-value": "0.5",
             "defaults-0-when": '{"gpus": "0"}', "on_conflict": "reject",
             "rules": '[{"name": "LR", "max": 1, "description": "keep it small"}]'}
    shown = carol.post("/ui/projects/vision/policy", {**draft, "impact": "1"})
    assert shown.status_code == 200 and "If this draft is saved" in shown.text
    assert "Confirm and save" in shown.text and "0.5" in shown.text
    assert policies.scoped("project:vision").current().version == 0  # a preview saves nothing
    assert carol.post("/ui/projects/vision/policy", draft).status_code == 302
    saved = policies.scoped("project:vision").current()
    assert saved.version == 1 and saved.defaults[0].when is not None
    assert [r.description for r in saved.rules] == ["keep it small"]
    assert browser("alice").get("/ui/projects/vision/policy").status_code == 403


@pytest.mark.usefixtures("projects")
def test_console_task_form_offers_the_owners_projects(
        browser: Callable[..., Browser], client: FlaskClient, tasks: TaskStore) -> None:
    client.patch("/api/v1/projects/speech", json={"members": ["bob", "alice"]})
    alice = browser("alice")
    form = alice.get("/ui/tasks/new").text
    assert '<option value="speech"' in form and '<option value="vision"' in form
    task_id = alice.create(name="t", steps="python3 train.py", project="speech")
    assert tasks.get(task_id)["project"] == "speech"


@pytest.mark.usefixtures("projects")
def test_impact_separates_what_the_draft_newly_rejects_from_what_is_rejected_already(
        client: FlaskClient, users: dict[str, FlaskClient], tasks: TaskStore,
        policies: PolicyStore, browser: Callable[..., Browser]) -> None:
    """Three tasks rejected today for LR > 3, two accepted with LR 2 and 2.5: a draft
    capping LR at 1 rejects five, of which only two are its doing."""
    client.put("/api/v1/policy", json={"defaults": [], "protected": [],
                                       "rules": [{"name": "LR", "max": 3}]})
    made = [create(users["alice"], env=[{"name": "LR", "value": value}]).get_json()["id"]
            for value in ("8", "9", "10", "2", "2.5", "0.5")]
    for task_id in made:
        run_stages(tasks, policies, task_id)
    assert [tasks.get(t)["state"] for t in made].count(states.REJECTED) == 3
    draft = {"defaults": [], "protected": [], "rules": [{"name": "LR", "max": 1}]}

    found = client.post("/api/v1/policy/impact", json=draft).get_json()

    assert (found["rejected"], found["newly_rejected"], found["already_rejected"]) == (5, 2, 3)
    [rejection] = found["rejections"]
    assert (rejection["tasks"], rejection["newly_rejected"],
            rejection["already_rejected"]) == (5, 2, 3)
    assert set(rejection["examples"][:2]) == set(made[3:5])
    page = browser().post("/ui/policy", {"rules": '[{"name": "LR", "max": 1}]',
                                          "on_conflict": "reject", "impact": "1"})
    assert page.status_code == 200, page.text
    assert "would be rejected: 2 newly (3 rejected today already)" in " ".join(page.text.split())
