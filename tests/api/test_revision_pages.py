"""The console's revisions: the list on the task page, the diff page, the drift of a rerun,
and a pasted or uploaded .env on the new-task form and the env editor."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from flask import Flask

from shared.env.envlist import EnvVar
from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from shared.task import states
from tests.api.conftest import ADMIN_TOKEN, FORM_ID, Browser
from tests.api.test_pages import resolve

SECRET = "hf_diff-page-secret-51a7"


@pytest.fixture
def admin(app: Flask) -> Browser:
    b = Browser(app.test_client())
    assert b.login(ADMIN_TOKEN).status_code == 302
    return b


def finish(tasks: TaskStore, task_id: str) -> None:
    revision = tasks.get(task_id)["revision"]
    for old, new in ((states.RESOLVED, states.LAUNCHING), (states.LAUNCHING, states.RUNNING),
                     (states.RUNNING, states.SUCCEEDED)):
        assert tasks.transition(task_id, revision, old, new)


def two_revisions(admin: Browser, tasks: TaskStore, policies: PolicyStore) -> str:
    task_id = admin.create(**{"name": "resnet", "steps": "python3 train.py",
                              "env-0-name": "LR", "env-0-value": "0.01",
                              "env-1-name": "TOKEN", "env-1-value": SECRET,
                              "env-1-secret": "on"})
    resolve(tasks, policies, task_id)
    finish(tasks, task_id)
    response = admin.post(f"/ui/tasks/{task_id}/env", {
        "env-0-name": "LR", "env-0-value": "0.02", "env-1-name": "TOKEN",
        "env-1-value": SECRET + "-rotated", "env-1-secret": "on",
        "new-0-name": "NEW", "new-0-value": "<b>1</b>"})
    assert response.status_code == 302, response.text
    resolve(tasks, policies, task_id)
    return task_id


def rows_of(html: str, table_id: str) -> list[str]:
    table = re.search(rf'<table[^>]*id="{table_id}".*?</table>', html, re.S)
    assert table, f"no table {table_id}"
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip()
            for row in re.findall(r"<tr.*?</tr>", table.group(0), re.S)[1:]]


def test_the_task_page_lists_every_revision_and_offers_a_diff(
        admin: Browser, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = two_revisions(admin, tasks, policies)

    html = admin.get(f"/ui/tasks/{task_id}").text

    rows = rows_of(html, "revisions")
    assert len(rows) == 2
    assert rows[0].startswith("1 succeeded create admin") and " 0 " in f"{rows[0]} "
    assert rows[1].startswith("2 resolved patch admin")
    assert f'action="/ui/tasks/{task_id}/diff"' in html and 'name="from"' in html
    assert SECRET not in html


def test_the_diff_page_shows_changes_and_a_secret_only_as_changed(
        admin: Browser, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = two_revisions(admin, tasks, policies)

    response = admin.get(f"/ui/tasks/{task_id}/diff?from=1&to=2")

    assert response.status_code == 200
    assert SECRET not in response.text and "<b>1</b>" not in response.text  # escaped
    rows = rows_of(response.text, "diff")
    assert "+ NEW — &lt;b&gt;1&lt;/b&gt; user" in rows
    assert "~ LR 0.01 0.02 user" in rows
    assert "~ TOKEN secret: changed user" in rows


def test_the_diff_page_compares_envs_as_set_and_explains_an_unresolved_revision(
        admin: Browser, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = admin.create(name="t", steps="true", **{"env-0-name": "A", "env-0-value": "1"})

    unresolved = admin.get(f"/ui/tasks/{task_id}/diff?from=1&to=1")
    as_set = admin.get(f"/ui/tasks/{task_id}/diff?from=1&to=1&of=env")

    assert unresolved.status_code == 409 and "?of=env" in unresolved.text
    assert as_set.status_code == 200 and 'id="no-differences"' in as_set.text
    assert admin.get(f"/ui/tasks/{task_id}/diff?from=1&to=7").status_code == 400


def test_someone_elses_diff_page_is_404(app: Flask, admin: Browser, tasks: TaskStore,
                                        policies: PolicyStore) -> None:
    task_id = two_revisions(admin, tasks, policies)
    bob = Browser(app.test_client())
    token = app.extensions["taskenv"].tokens.create("bob", "user", "tests")[0]
    assert bob.login(token).status_code == 302

    assert bob.get(f"/ui/tasks/{task_id}/diff?from=1&to=2").status_code == 404


def test_a_reruns_drift_shows_on_the_task_page(app: Flask, admin: Browser, tasks: TaskStore,
                                               policies: PolicyStore) -> None:
    policies.put(Policy(defaults=(EnvVar("NCCL_DEBUG", "WARN"),)))
    task_id = admin.create(name="t", steps="true")
    resolve(tasks, policies, task_id)
    finish(tasks, task_id)
    policies.put(Policy(defaults=(EnvVar("NCCL_DEBUG", "INFO"),)))
    api = app.test_client()
    api.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {ADMIN_TOKEN}"
    assert api.post(f"/api/v1/tasks/{task_id}/rerun", json={}).status_code == 202
    resolve(tasks, policies, task_id)

    html = admin.get(f"/ui/tasks/{task_id}").text

    assert rows_of(html, "drift") == [
        "NCCL_DEBUG WARN INFO default changed (policy v1 -&gt; v2)"]


def post_multipart(b: Browser, path: str, fields: dict[str, Any]) -> Any:
    return b.client.post(path, data={**fields, "csrf": b.csrf()},
                         content_type="multipart/form-data")


def test_a_pasted_and_an_uploaded_env_file_make_the_new_tasks_env(
        admin: Browser, tasks: TaskStore) -> None:
    form_id = FORM_ID.search(admin.get("/ui/tasks/new").text).group(1)
    upload = (io.BytesIO("DATA='/data/数据 $(x)'\n".encode()), "train.env")

    response = post_multipart(admin, "/ui/tasks/new", {
        "form_id": form_id, "name": "t", "steps": "true", "env-0-name": "LR",
        "env-0-value": "0.1", "env_file": "export EPOCHS=3\r\n# a comment\r\n",
        "env_file_upload": upload})

    assert response.status_code == 302, response.text
    task_id = response.location.rsplit("/", 1)[1]
    env = {e["name"]: e["value"] for e in tasks.get(task_id)["env"]}
    assert env == {"LR": "0.1", "DATA": "/data/数据 $(x)", "EPOCHS": "3"}


def test_a_pasted_env_file_naming_a_row_is_refused_and_shown_again(
        admin: Browser, tasks: TaskStore) -> None:
    form_id = FORM_ID.search(admin.get("/ui/tasks/new").text).group(1)

    response = post_multipart(admin, "/ui/tasks/new", {
        "form_id": form_id, "name": "t", "steps": "true", "env-0-name": "LR",
        "env-0-value": "0.1", "env_file": "LR=0.2\n"})

    assert response.status_code == 422
    assert "LR is set both in env and in env_file" in response.text
    assert "\nLR=0.2\n</textarea>" in response.text
    assert tasks.page().items == []


def test_the_env_editor_takes_an_uploaded_env_file(admin: Browser, tasks: TaskStore,
                                                   policies: PolicyStore) -> None:
    task_id = admin.create(name="t", steps="true", **{"env-0-name": "LR", "env-0-value": "1"})
    resolve(tasks, policies, task_id)
    finish(tasks, task_id)

    response = post_multipart(admin, f"/ui/tasks/{task_id}/env", {
        "env-0-name": "LR", "env-0-value": "1",
        "env_file_upload": (io.BytesIO(b"B=\"two words\"\n"), "more.env")})
    bad = post_multipart(admin, f"/ui/tasks/{task_id}/env", {
        "env_file_upload": (io.BytesIO(b"C=\xe9\n"), "latin1.env")})

    assert response.status_code == 302, response.text
    doc = tasks.get(task_id)
    assert doc["revision"] == 2
    assert {e["name"]: e["value"] for e in doc["env"]} == {"LR": "1", "B": "two words"}
    assert bad.status_code == 422 and "latin1.env is not UTF-8" in bad.text


# --- one revision throughout the page ------------------------------------------------------

def section(html: str, element_id: str) -> str:
    """The text of the element with this id, tags stripped."""
    found = re.search(rf'<(\w+)[^>]*id="{element_id}"[^>]*>(.*?)</\1>', html, re.S)
    assert found, f"no element {element_id}"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(2))).strip()


def test_picking_revision_1_shows_revision_1_everywhere_on_the_page(
        admin: Browser, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = two_revisions(admin, tasks, policies)
    tasks.append_log(task_id, 1, "revision one printed this\n")
    tasks.append_log(task_id, 2, "revision two printed that\n")

    latest = admin.get(f"/ui/tasks/{task_id}").text
    first = admin.get(f"/ui/tasks/{task_id}?revision=1").text

    assert section(latest, "status") == "resolved" and section(first, "status") == "succeeded"
    assert section(latest, "revision") == "2" and section(first, "revision") == "1"
    assert "LR 0.02 user —" in rows_of(latest, "resolved")
    assert "LR 0.01 user —" in rows_of(first, "resolved")
    assert "TASK_ENV_REVISION 1 platform —" in rows_of(first, "resolved")
    assert not any(row.startswith("NEW ") for row in rows_of(first, "resolved"))
    assert "revision one printed this" in first and "revision two printed" not in first
    assert "Exit code" in first and section(first, "earlier-revision").startswith(
        "You are looking at revision 1")
    # Its env as set, read-only: the editor and its buttons change the latest revision only.
    assert rows_of(first, "env-as-set") == ["LR 0.01", "TOKEN ********"]
    assert f'action="/ui/tasks/{task_id}/env"' not in first
    assert f'action="/ui/tasks/{task_id}/env"' in latest
    assert 'aria-current="page">1</a>' in first and 'aria-current="page">2</a>' in latest
    assert SECRET not in first and "&lt;b&gt;1&lt;/b&gt;" not in first


def test_a_revision_out_of_range_shows_the_latest(admin: Browser, tasks: TaskStore,
                                                  policies: PolicyStore) -> None:
    task_id = two_revisions(admin, tasks, policies)
    for asked in ("0", "3", "x"):
        html = admin.get(f"/ui/tasks/{task_id}?revision={asked}").text
        assert section(html, "revision") == "2" and 'id="earlier-revision"' not in html


def test_an_earlier_revision_is_rerun_from_its_page_once_the_latest_has_ended(
        admin: Browser, tasks: TaskStore, policies: PolicyStore, enqueued) -> None:
    task_id = two_revisions(admin, tasks, policies)
    running = admin.get(f"/ui/tasks/{task_id}?revision=1").text
    assert f'action="/ui/tasks/{task_id}/rerun"' not in running  # revision 2 is in flight
    finish(tasks, task_id)

    first = admin.get(f"/ui/tasks/{task_id}?revision=1").text
    assert 'name="revision" value="1"' in first and "Rerun revision 1" in first
    response = admin.post(f"/ui/tasks/{task_id}/rerun", {"revision": "1"})

    assert response.status_code == 302
    doc = tasks.get(task_id)
    assert (doc["revision"], doc["rerun_of"]) == (3, 1)
    assert {e["name"]: e["value"] for e in doc["env"]}["LR"] == "0.01"
    assert enqueued.calls[-1] == (task_id, 3)


def test_a_rerun_of_a_revision_the_task_never_had_or_of_someone_elses_is_refused(
        app: Flask, admin: Browser, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = two_revisions(admin, tasks, policies)
    finish(tasks, task_id)
    bob = Browser(app.test_client())
    assert bob.login(app.extensions["taskenv"].tokens.create("bob", "user", "t")[0]).status_code \
        == 302

    assert admin.post(f"/ui/tasks/{task_id}/rerun", {"revision": "9"}).status_code == 404
    assert bob.post(f"/ui/tasks/{task_id}/rerun", {"revision": "1"}).status_code == 404
    assert bob.get(f"/ui/tasks/{task_id}?revision=1").status_code == 404
    assert tasks.get(task_id)["revision"] == 2
