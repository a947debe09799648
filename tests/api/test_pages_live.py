"""The console's live parts on fakeredis: polling endpoints with ETags and log offsets,
the env preview beside the forms, the variable suggestions and the insights page."""

from __future__ import annotations

import re

from flask import Flask

from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from shared.task import states
from tests.api.conftest import Browser
from tests.api.test_pages import SECRET, TASK_FORM, resolve

REASON = "tuned by the platform team"
PROTECTED = {"defaults": [{"name": "DATA_DIR", "value": "/data"}], "protected": [
    {"name": "LEARNING_RATE", "reason": REASON}], "rules": [
    {"name": "PRECISION", "allowed": ["fp16", "bf16"], "description": "training precision"}]}


def live(b: Browser, task_id: str, etag: str | None = None, **query: object):
    headers = {"If-None-Match": etag} if etag else {}
    return b.get(f"/ui/tasks/{task_id}/live", query_string=query, headers=headers)


# --- following a task --------------------------------------------------------------------

def test_the_live_endpoint_reports_state_and_only_new_log_bytes(
        browser, tasks: TaskStore) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    tasks.append_log(task_id, 1, "first ✓\n")

    first = live(b, task_id)
    assert first.status_code == 200
    assert first.json["status"] == states.PENDING and first.json["final"] is False
    assert first.json["log"] == {"revision": 1, "text": "first ✓\n",
                                 "offset": len("first ✓\n".encode()), "reset": False,
                                 "skipped": 0}
    offset = first.json["log"]["offset"]

    unchanged = live(b, task_id, first.headers["ETag"], offset=offset)
    assert unchanged.status_code == 304 and unchanged.data == b""

    tasks.append_log(task_id, 1, "second\n")
    more = live(b, task_id, first.headers["ETag"], offset=offset)
    assert more.status_code == 200 and more.json["log"]["text"] == "second\n"


def test_an_offset_past_the_end_starts_the_log_again(browser, tasks: TaskStore) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    tasks.append_log(task_id, 1, "kept\n")
    answer = live(b, task_id, offset=10_000).json["log"]
    assert answer == {"revision": 1, "text": "kept\n", "offset": 5, "reset": True,
                      "skipped": 0}


def test_offsets_survive_a_trim_and_dropped_output_is_counted_once(
        browser, tasks: TaskStore) -> None:
    tasks.LOG_LIMIT = 32
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    tasks.append_log(task_id, 1, "0123456789\n")
    page = b.get(f"/ui/tasks/{task_id}").text
    assert 'data-offset="11"' in page
    tasks.append_log(task_id, 1, "abcdefghij\n" * 2)  # 33 bytes: the newest 16 are kept
    behind = live(b, task_id, offset=11).json["log"]
    assert behind == {"revision": 1, "text": "ghij\nabcdefghij\n", "offset": 33,
                      "reset": False, "skipped": 6}  # bytes 11 to 17 went unread
    assert 'data-offset="33"' in b.get(f"/ui/tasks/{task_id}").text
    tasks.append_log(task_id, 1, "more\n")
    after = live(b, task_id, offset=33).json["log"]
    assert (after["text"], after["offset"], after["skipped"]) == ("more\n", 38, 0)


def test_a_cut_character_waits_for_its_last_bytes(browser, tasks: TaskStore) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    tasks.append_log(task_id, 1, "a✓")  # "✓" is three bytes: start inside it
    assert live(b, task_id, offset=2).json["log"]["text"] == ""  # not mid-character
    assert live(b, task_id, offset=1).json["log"]["text"] == "✓"


def test_live_state_changes_the_etag_and_reports_final(
        browser, tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy.from_dict(PROTECTED))
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    before = live(b, task_id)
    resolve(tasks, policies, task_id)  # LEARNING_RATE is protected: rejected
    after = live(b, task_id, before.headers["ETag"])
    assert after.status_code == 200
    assert after.json["status"] == states.REJECTED and after.json["final"] is True


def test_live_is_session_authenticated_and_scoped(app: Flask, browser) -> None:
    task_id = browser("alice").create(**TASK_FORM)
    anonymous = Browser(app.test_client())
    assert live(anonymous, task_id).status_code == 302
    assert live(browser("bob"), task_id).status_code == 404


def test_the_task_page_polls_only_while_the_task_is_in_flight(
        browser, tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy.from_dict(PROTECTED))
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    assert f'data-url="/ui/tasks/{task_id}/live"' in b.get(f"/ui/tasks/{task_id}").text
    resolve(tasks, policies, task_id)
    assert "data-url=" not in b.get(f"/ui/tasks/{task_id}").text


def test_the_task_list_polls_while_a_shown_task_is_in_flight(browser, tasks: TaskStore) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    html = b.get("/ui/tasks").text
    assert 'data-live="/ui/tasks/live"' in html and f'data-task="{task_id}"' in html
    first = b.get("/ui/tasks/live")
    assert first.json["items"] == [{"id": task_id, "status": "pending", "revision": 1,
                                    "final": False}]
    again = b.get("/ui/tasks/live", headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304
    tasks.transition(task_id, 1, states.PENDING, states.REJECTED, errors=[])
    assert "data-live=" not in b.get("/ui/tasks").text


def test_times_are_time_elements_in_utc(browser) -> None:
    b = browser("alice")
    b.create(**TASK_FORM)
    html = b.get("/ui/tasks").text
    assert re.search(r'<time datetime="(\d{4}-\d\d-\d\dT[\d:.]+Z)" title="\1">'
                     r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>', html)


# --- the env preview ---------------------------------------------------------------------

def preview(b: Browser, path: str, form: dict[str, str]):
    return b.post(path, form)


def test_the_new_task_preview_names_a_protected_variable_with_the_reason(
        browser, policies: PolicyStore, tasks: TaskStore) -> None:
    policies.put(Policy.from_dict(PROTECTED))
    b = browser("alice")
    answer = preview(b, "/ui/preview", TASK_FORM).json
    assert answer["ok"] is False
    assert [(p["variable"], p["rule"]) for p in answer["errors"]] == [
        ("LEARNING_RATE", "policy.protected")]
    assert REASON in answer["errors"][0]["message"]
    by_name = {v["name"]: v for v in answer["variables"]}
    assert by_name["DATA_DIR"]["source"] == "default"
    assert by_name["DATA_DIR"]["scope"] == "platform"
    assert by_name["HF_TOKEN"]["value"] == "********"
    assert SECRET not in str(answer)
    assert tasks.page().items == []  # nothing was created


def test_the_preview_needs_the_csrf_token(browser) -> None:
    assert browser("alice").post("/ui/preview", TASK_FORM, csrf=False).status_code == 400


def test_a_project_one_may_not_use_is_a_named_problem_in_the_preview(
        app: Flask, browser) -> None:
    app.extensions["taskenv"].projects.create("speech", ["bob"], ["bob"], "admin")
    answer = browser("alice").post("/ui/preview", {**TASK_FORM, "project": "speech"}).json
    assert answer["ok"] is False and answer["variables"] == []
    assert "speech" in answer["errors"][0]["message"]


def test_a_pasted_env_file_joins_the_preview_and_its_mistakes_are_named(browser) -> None:
    b = browser("alice")
    ok = preview(b, "/ui/preview", {"env_file": "EXTRA=1\n"}).json
    assert ok["ok"] is True and "EXTRA" in {v["name"] for v in ok["variables"]}
    twice = preview(b, "/ui/preview", {"env-0-name": "EXTRA", "env-0-value": "2",
                                       "env_file": "EXTRA=1\n"}).json
    assert twice["ok"] is False and twice["errors"][0]["variable"] == "EXTRA"


def test_the_env_editor_previews_the_change_and_keeps_a_secret_left_empty(
        browser, policies: PolicyStore) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    form = {"env-0-name": "LEARNING_RATE", "env-0-value": "0.5",
            "env-1-name": "NOTE", "env-1-value": "x", "env-1-delete": "on",
            "env-2-name": "HF_TOKEN", "env-2-value": "", "env-2-secret": "on",
            "new-0-name": "BATCH", "new-0-value": "64"}
    answer = preview(b, f"/ui/tasks/{task_id}/preview", form).json
    by_name = {v["name"]: v for v in answer["variables"]}
    assert answer["ok"] is True
    assert by_name["LEARNING_RATE"]["value"] == "0.5" and by_name["BATCH"]["value"] == "64"
    assert "NOTE" not in by_name and by_name["HF_TOKEN"]["value"] == "********"
    policies.put(Policy.from_dict(PROTECTED))
    refused = preview(b, f"/ui/tasks/{task_id}/preview", form).json
    assert [p["variable"] for p in refused["errors"]] == ["LEARNING_RATE"]


def test_the_forms_suggest_the_variables_the_policies_describe(
        browser, policies: PolicyStore) -> None:
    policies.put(Policy.from_dict(PROTECTED))
    b = browser("alice")
    task_id = b.create(**{**TASK_FORM, "env-0-name": "OTHER"})
    for html in (b.get("/ui/tasks/new").text, b.get(f"/ui/tasks/{task_id}").text):
        assert '<datalist id="env-names">' in html and 'list="env-names"' in html
        assert f'value="LEARNING_RATE" label="protected: {REASON}"' in html
        assert 'value="PRECISION" label="training precision; one of fp16, bf16"' in html
        assert 'value="DATA_DIR" label="default /data"' in html


# --- insights ----------------------------------------------------------------------------

def test_the_insights_page_counts_states_and_the_rejecting_variables(
        browser, tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy.from_dict(PROTECTED))
    user = browser("alice")
    for _ in range(3):
        resolve(tasks, policies, user.create(**TASK_FORM))  # LEARNING_RATE: rejected
    resolve(tasks, policies, user.create(**{**TASK_FORM, "env-0-name": "PRECISION",
                                            "env-0-value": "fp64"}))
    html = browser().get("/ui/insights").text
    rows = re.findall(r'<code class="var">(\w+)</code></td>\s*<td><span class="rule">'
                      r'([\w.]+)</span></td><td>(\d+)</td>', html)
    assert rows[:2] == [("LEARNING_RATE", "policy.protected", "3"),
                        ("PRECISION", "rule.allowed", "1")], rows
    assert "fp64" not in html and "0.01" not in html  # names, never values
    assert re.search(r"status-rejected\">rejected</span></th>\s*<td>4</td><td>4</td>", html)


def test_insights_are_for_admins_and_maintainers_only(app: Flask, browser) -> None:
    assert browser("alice").get("/ui/insights").status_code == 403
    assert "Insights</a>" not in browser("alice").get("/ui/tasks").text
    services = app.extensions["taskenv"]
    services.projects.create("vision", ["alice"], ["mia"], "admin")
    maintainer = browser("mia")
    assert "Insights</a>" in maintainer.get("/ui/tasks").text
    page = maintainer.get("/ui/insights")
    assert page.status_code == 200 and "project vision" in page.text
    assert maintainer.get("/ui/insights?project=other").status_code == 403


def test_the_insights_states_add_up_when_tasks_get_new_revisions(
        browser, tasks: TaskStore, policies: PolicyStore) -> None:
    user = browser("alice")
    task_id = user.create(name="t", steps="true", **{"env-0-name": "LEARNING_RATE",
                                                     "env-0-value": "0.1"})
    resolve(tasks, policies, task_id)
    for revision in (2, 3):  # an env change, then a rerun: each a revision from pending
        if revision == 2:
            form = {"env-0-name": "LEARNING_RATE", "env-0-value": "0.5"}
            assert user.post(f"/ui/tasks/{task_id}/env", form).status_code == 302
        else:
            assert user.post(f"/ui/tasks/{task_id}/rerun", {}).status_code == 302
        resolve(tasks, policies, task_id)
        assert tasks.get(task_id)["revision"] == revision

    html = browser().get("/ui/insights").text
    counts = dict(re.findall(r'status-(\w+)">\1</span></th>\s*<td>(\d+)</td>', html))
    assert counts["pending"] == counts["validated"] == counts["resolved"] == "3", counts
    assert "Every revision starts in <em>pending</em>" in html
