"""A project's maintainers read its members' tasks and never change them, through the API
and the console; anyone else finds no such task at all."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.policy.store import PolicyStore
from shared.secrets import MASK
from shared.store.tasks import TaskStore
from tests.api.conftest import Browser, EnqueueSpy, task_body
from tests.api.test_revisions_api import finish, resolve

CHANGES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("patch", "/env", {"set": [{"name": "LR", "value": "9"}]}),
    ("patch", "/env", {"set": [{"name": "LR", "value": "9"}], "apply": "next-run"}),
    ("patch", "/env", {"unset": ["LEARNING_RATE"]}),
    ("patch", "/env", {"files": [{"path": "train.py", "content": "print('hijacked')"}]}),
    ("post", "/cancel", None),
    ("post", "/rerun", None),
    ("post", "/rerun", {"pin": True}),
]
PAGE_CHANGES = [("/env", {"env-0-name": "LEARNING_RATE", "env-0-value": "0.5",
                          "apply": "restart"}),
                ("/cancel", {}), ("/rerun", {})]
CHANGE_FORM = re.compile(r'<form[^>]+action="/ui/tasks/[0-9a-f]+/(env|cancel|rerun)"')
SECRET = "hunter2-not-for-maintainers"
READS = ["", "/env", "/env?format=dotenv", "/env?format=dotenv&resolved=true", "/revisions",
         "/revisions/1", "/revisions/2", "/revisions/1/diff/2", "/revisions/1/diff/2?of=env",
         "/manifest", "/logs", "/logs?revision=1"]


@pytest.fixture
def users(client: FlaskClient, client_for: Callable[..., FlaskClient]) -> dict[str, FlaskClient]:
    """vision: alice and erin members, carol its maintainer; speech: bob a member, dave its
    maintainer."""
    for name, members, maintainers in (("vision", ["alice", "erin"], ["carol"]),
                                       ("speech", ["bob"], ["dave"])):
        made = client.post("/api/v1/projects", json={"name": name, "members": members,
                                                     "maintainers": maintainers})
        assert made.status_code == 201, made.get_json()
    return {name: client_for(name) for name in ("alice", "erin", "carol", "bob", "dave")}


@pytest.fixture
def alices_task(users: dict[str, FlaskClient]) -> str:
    made = users["alice"].post("/api/v1/tasks", json=task_body())
    assert made.status_code == 202, made.get_json()
    return str(made.get_json()["id"])


def change(user: FlaskClient, task_id: str, method: str, path: str,
           body: dict[str, Any] | None) -> Any:
    return getattr(user, method)(f"/api/v1/tasks/{task_id}{path}", json=body)


def untouched(tasks: TaskStore, enqueued: EnqueueSpy, task_id: str) -> None:
    doc = tasks.get(task_id)
    assert (doc["revision"], doc["state"], doc.get("next_env")) == (1, "pending", None)
    assert [e["name"] for e in doc["env"]] == ["LEARNING_RATE"]
    assert enqueued.calls == [(task_id, 1)]  # only its creation


# --- the API -----------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path", "body"), CHANGES)
def test_a_maintainer_reads_a_members_task_but_each_change_is_403_and_changes_nothing(
        users: dict[str, FlaskClient], alices_task: str, tasks: TaskStore,
        enqueued: EnqueueSpy, error_shape: Callable[..., None], method: str, path: str,
        body: dict[str, Any] | None) -> None:
    carol = users["carol"]
    assert carol.get(f"/api/v1/tasks/{alices_task}").status_code == 200
    refused = change(carol, alices_task, method, path, body)
    assert refused.status_code == 403, refused.get_json()
    error_shape(refused.get_json(), "forbidden")
    message = refused.get_json()["message"]
    assert "maintainers of project vision may read a member's task but not change it" \
        in message
    untouched(tasks, enqueued, alices_task)


@pytest.mark.parametrize(("method", "path", "body"), CHANGES)
def test_whoever_may_not_read_a_task_finds_none_whatever_they_try(
        users: dict[str, FlaskClient], alices_task: str, tasks: TaskStore,
        enqueued: EnqueueSpy, error_shape: Callable[..., None], method: str, path: str,
        body: dict[str, Any] | None) -> None:
    """A fellow member, another project's maintainer and an outsider: 404, as for a task
    that does not exist, so that a 403 never tells them it does."""
    for name in ("erin", "dave", "bob"):
        user = users[name]
        assert user.get(f"/api/v1/tasks/{alices_task}").status_code == 404
        refused = change(user, alices_task, method, path, body)
        assert refused.status_code == 404, (name, refused.get_json())
        error_shape(refused.get_json(), "not_found")
        assert refused.get_json() == change(user, "0" * 32, method, path, body).get_json() \
            | {"message": refused.get_json()["message"]}
    untouched(tasks, enqueued, alices_task)


@pytest.fixture
def alices_revised_task(users: dict[str, FlaskClient], tasks: TaskStore,
                        policies: PolicyStore) -> str:
    """Alice's task in vision with a secret: revision 1 ran (and logged), revision 2 changed
    the secret and LR; both resolved."""
    alice = users["alice"]
    made = alice.post("/api/v1/tasks", json=task_body(project="vision", env=[
        {"name": "LR", "value": "0.01"}, {"name": "TOKEN", "value": SECRET, "secret": True}]))
    assert made.status_code == 202, made.get_json()
    task_id = str(made.get_json()["id"])
    resolve(tasks, policies, task_id, 1)
    finish(tasks, task_id, 1)
    tasks.append_log(task_id, 1, "epoch 1 done\n")
    changed = alice.patch(f"/api/v1/tasks/{task_id}/env", json={"set": [
        {"name": "LR", "value": "0.02"},
        {"name": "TOKEN", "value": SECRET + "-rotated", "secret": True}]})
    assert changed.status_code == 202, changed.get_json()
    resolve(tasks, policies, task_id, 2)
    return task_id


@pytest.mark.parametrize("path", READS)
def test_a_maintainer_reads_all_of_a_members_task_exactly_as_its_owner_does(
        users: dict[str, FlaskClient], alices_revised_task: str, path: str) -> None:
    """Every read answers the maintainer what it answers the owner, byte for byte: secrets
    masked or left out for both, never a value in clear."""
    url = f"/api/v1/tasks/{alices_revised_task}{path}"
    owners, maintainers = users["alice"].get(url), users["carol"].get(url)
    assert maintainers.status_code == 200, maintainers.get_data(as_text=True)
    assert maintainers.get_data() == owners.get_data()
    assert maintainers.headers.get("ETag") == owners.headers.get("ETag")
    assert SECRET not in maintainers.get_data(as_text=True)


def test_what_a_maintainer_reads_holds_the_task_with_its_secrets_masked(
        users: dict[str, FlaskClient], alices_revised_task: str) -> None:
    url = f"/api/v1/tasks/{alices_revised_task}"
    carol = users["carol"]
    env = carol.get(f"{url}/env").get_json()
    assert {e["name"]: e["value"] for e in env["env"]} == {"LR": "0.02", "TOKEN": MASK}
    assert [r["revision"] for r in carol.get(f"{url}/revisions").get_json()["items"]] == [1, 2]
    diff = carol.get(f"{url}/revisions/1/diff/2?of=env").get_json()
    assert {c["name"] for c in diff["changed"]} == {"LR", "TOKEN"}
    assert carol.get(f"{url}/logs?revision=1").get_data(as_text=True) == "epoch 1 done\n"
    assert carol.get(f"{url}/manifest").get_json()["resolved"] is True


@pytest.mark.parametrize("path", READS)
def test_a_fellow_member_and_another_projects_maintainer_read_nothing(
        users: dict[str, FlaskClient], alices_revised_task: str,
        error_shape: Callable[..., None], path: str) -> None:
    for name in ("erin", "dave"):
        refused = users[name].get(f"/api/v1/tasks/{alices_revised_task}{path}")
        assert refused.status_code == 404, (name, refused.get_data(as_text=True))
        error_shape(refused.get_json(), "not_found")
        assert SECRET not in refused.get_data(as_text=True)


def test_the_owner_a_maintainers_own_task_and_the_admin_still_change_tasks(
        users: dict[str, FlaskClient], client: FlaskClient, alices_task: str) -> None:
    patch = {"set": [{"name": "LR", "value": "9"}]}
    assert change(users["alice"], alices_task, "patch", "/env", patch).status_code == 202
    assert change(client, alices_task, "patch", "/env", patch).status_code == 202
    own = users["carol"].post("/api/v1/tasks", json=task_body()).get_json()["id"]
    assert change(users["carol"], own, "patch", "/env", patch).status_code == 202


def test_a_maintainer_removed_or_a_project_deleted_reads_nothing_more(
        users: dict[str, FlaskClient], client: FlaskClient, alices_task: str) -> None:
    carol = users["carol"]
    assert client.patch("/api/v1/projects/vision", json={"maintainers": []}).status_code == 200
    assert carol.get(f"/api/v1/tasks/{alices_task}").status_code == 404
    assert client.patch("/api/v1/projects/vision",
                        json={"maintainers": ["carol"]}).status_code == 200
    assert carol.get(f"/api/v1/tasks/{alices_task}").status_code == 200
    assert client.delete("/api/v1/projects/vision").status_code in (200, 204)
    assert carol.get(f"/api/v1/tasks/{alices_task}").status_code == 404
    assert change(carol, alices_task, "post", "/cancel", None).status_code == 404


# --- the console -------------------------------------------------------------------------

def test_a_maintainer_sees_a_members_task_page_without_any_control_to_change_it(
        users: dict[str, FlaskClient], alices_task: str,
        browser: Callable[..., Browser]) -> None:
    shown = browser("carol").get(f"/ui/tasks/{alices_task}")
    assert shown.status_code == 200
    assert 'id="read-only"' in shown.text and "<dd>vision</dd>" in shown.text
    assert CHANGE_FORM.findall(shown.text) == []
    assert browser("carol").get(f"/ui/tasks/{alices_task}/live").status_code == 200
    owner = browser("alice").get(f"/ui/tasks/{alices_task}")
    # Not ended yet: cancel, not rerun (offered once it has ended).
    assert sorted(CHANGE_FORM.findall(owner.text)) == ["cancel", "env"]
    assert 'id="read-only"' not in owner.text
    for name in ("erin", "dave"):
        assert browser(name).get(f"/ui/tasks/{alices_task}").status_code == 404
        assert browser(name).get(f"/ui/tasks/{alices_task}/live").status_code == 404


def test_a_maintainer_compares_a_members_revisions_on_the_console(
        users: dict[str, FlaskClient], alices_revised_task: str,
        browser: Callable[..., Browser]) -> None:
    carol = browser("carol")
    task_page = carol.get(f"/ui/tasks/{alices_revised_task}")
    assert 'id="read-only"' in task_page.text and 'class="diff-form"' in task_page.text
    diff_url = f"/ui/tasks/{alices_revised_task}/diff?from=1&to=2&of=env"
    shown = carol.get(diff_url)
    assert shown.status_code == 200
    assert main(shown.text) == main(browser("alice").get(diff_url).text)  # the owner's, no more
    assert '<code class="name">LR</code>' in shown.text
    assert '<code class="name">TOKEN</code>' in shown.text
    assert SECRET not in shown.text
    for name in ("erin", "dave"):
        assert browser(name).get(diff_url).status_code == 404


def test_the_env_editors_preview_is_for_those_who_may_change_the_task(
        users: dict[str, FlaskClient], alices_task: str,
        browser: Callable[..., Browser]) -> None:
    """A read-only page has no editor to preview: its maintainer is told why, others find
    no task."""
    form = {"env-0-name": "LEARNING_RATE", "env-0-value": "0.5"}
    url = f"/ui/tasks/{alices_task}/preview"
    assert browser("alice").post(url, form).status_code == 200
    refused = browser("carol").post(url, form)
    assert refused.status_code == 403
    assert "may read a member&#39;s task but not change it" in refused.text
    assert browser("dave").post(url, form).status_code == 404


@pytest.mark.parametrize(("path", "form"), PAGE_CHANGES)
def test_a_forged_change_from_the_console_is_403_for_a_maintainer_and_404_for_others(
        users: dict[str, FlaskClient], alices_task: str, tasks: TaskStore,
        enqueued: EnqueueSpy, browser: Callable[..., Browser], path: str,
        form: dict[str, str]) -> None:
    forged = browser("carol").post(f"/ui/tasks/{alices_task}{path}", form)
    assert forged.status_code == 403
    assert "may read a member&#39;s task but not change it" in forged.text
    assert browser("dave").post(f"/ui/tasks/{alices_task}{path}", form).status_code == 404
    untouched(tasks, enqueued, alices_task)


def test_the_task_list_offers_a_maintainer_the_projects_tasks_a_page_at_a_time(
        users: dict[str, FlaskClient], browser: Callable[..., Browser]) -> None:
    made = [users[name].post("/api/v1/tasks", json=task_body(name=f"t{i}")).get_json()["id"]
            for i, name in enumerate(["alice", "erin", "bob", "alice"])]
    carol = browser("carol")
    own = carol.get("/ui/tasks")
    assert 'href="/ui/tasks?project=vision"' in own.text
    assert "speech" not in own.text and made[0] not in own.text  # one's own, as before
    first = carol.get("/ui/tasks?project=vision&limit=2")
    assert first.status_code == 200 and "Tasks of project vision" in first.text
    assert listed(first.text) == [made[3], made[1]]
    assert re.search(r"<td[^>]*>erin</td>", first.text)  # whose each task is
    cursor = re.search(r'rel="next" href="[^"]*cursor=([^&"]+)', first.text)
    assert cursor is not None
    rest = carol.get(f"/ui/tasks?project=vision&limit=2&cursor={cursor.group(1)}")
    assert listed(rest.text) == [made[0]] and 'rel="next"' not in rest.text
    live = carol.get("/ui/tasks/live?project=vision").get_json()
    assert [i["id"] for i in live["items"]] == [made[3], made[1], made[0]]


def test_only_a_projects_maintainers_and_admins_list_its_tasks(
        users: dict[str, FlaskClient], alices_task: str,
        browser: Callable[..., Browser]) -> None:
    assert 'href="/ui/tasks?project=' not in browser("alice").get("/ui/tasks").text
    for name, status in (("alice", 403), ("dave", 404)):  # a member; not in the project
        assert browser(name).get("/ui/tasks?project=vision").status_code == status
        assert browser(name).get("/ui/tasks/live?project=vision").status_code == status
    assert browser("carol").get("/ui/tasks?project=nowhere").status_code == 404
    assert browser("carol").get("/ui/tasks?project=vision&status=pending").status_code == 400
    admin = browser().get("/ui/tasks?project=vision")
    assert admin.status_code == 200 and listed(admin.text) == [alices_task]


def listed(html: str) -> list[str]:
    return re.findall(r'<tr data-task="([0-9a-f]+)">', html)


def main(html: str) -> str:
    """The page's own content, without the navigation (which differs by role)."""
    found = re.search(r'<main id="content">.*</main>', html, re.S)
    assert found is not None
    return found.group(0)


def test_a_maintainer_reads_a_members_replica_log_and_an_outsider_finds_nothing(
        users: dict[str, FlaskClient], tasks: TaskStore) -> None:
    made = users["alice"].post("/api/v1/tasks", json={**task_body(), "replicas": 2})
    task_id = made.get_json()["id"]
    tasks.append_log(task_id, 1, "[replica 0] zero\n[replica 1] one\n")
    assert users["carol"].get(f"/api/v1/tasks/{task_id}/logs?replica=1").get_data(
        as_text=True) == "one\n"
    for outsider in ("erin", "bob", "dave"):
        assert users[outsider].get(f"/api/v1/tasks/{task_id}/logs?replica=1").status_code \
            == 404


def test_a_maintainer_cannot_put_an_identity_variable_in_the_projects_policy(
        users: dict[str, FlaskClient]) -> None:
    answer = users["carol"].put("/api/v1/projects/vision/policy", json={
        "defaults": [{"name": "MASTER_PORT", "value": "1234"}],
        "protected": [{"name": "PET_NNODES", "value": "2", "reason": "ours"}],
        "rules": [{"name": "WORLD_SIZE", "max": 2}]})
    assert answer.status_code == 422
    named = [(e["rule"], e["variable"]) for e in answer.get_json()["errors"]
             if e["rule"] == "policy.platform_identity"]
    assert named == [("policy.platform_identity", "MASTER_PORT"),
                     ("policy.platform_identity", "PET_NNODES"),
                     ("policy.platform_identity", "WORLD_SIZE")]


def test_a_maintainer_cannot_give_the_projects_tasks_per_node_values(
        users: dict[str, FlaskClient]) -> None:
    """Only the platform's policy may depend on the node (its values are resolved there by
    platform code and recorded in clear)."""
    answer = users["carol"].put("/api/v1/projects/vision/policy", json={
        "defaults": [{"name": "NCCL_SOCKET_IFNAME", "value": "ib0", "when": {"node": "gpu-*"}}],
        "protected": []})
    assert answer.status_code == 422, answer.get_json()
    assert [(e["rule"], e["field"]) for e in answer.get_json()["errors"]] == [
        ("when.node_scope", "defaults[0].when.node")]
