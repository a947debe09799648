"""The web console on fakeredis: sessions, CSRF, forms, isolation, secrets and escaping."""

from __future__ import annotations

import json
import re
from html import unescape
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import pytest
from flask import Flask
from flask.testing import FlaskClient

from shared.access.tokens import digest
from shared.env.envlist import Limits
from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from shared.task import states
from tests.api.conftest import ADMIN_TOKEN, FORM_ID, Browser, EnqueueSpy, build_app
from workers import stages

SECRET = "hf_page-secret-7c1e93a0"
XSS = "<script>alert(1)</script>"


def resolve(tasks: TaskStore, policies: PolicyStore, task_id: str) -> None:
    """What the validation and policy workers would do."""
    revision = tasks.get(task_id)["revision"]
    if stages.validate(tasks, Limits(), task_id, revision):
        stages.apply_policy(tasks, policies, task_id, revision)


TASK_FORM = {
    "name": "resnet",
    "steps": "sh prepare.sh --out 'my data'\npython3 -c \"print('trained')\"\n",
    "env-0-name": "LEARNING_RATE", "env-0-value": "0.01",
    "env-1-name": "NOTE", "env-1-value": "$(HOME) stays\r\nliteral — ✓ \"quoted\"",
    "env-2-name": "HF_TOKEN", "env-2-value": SECRET, "env-2-secret": "on",
    "env-3-name": "", "env-3-value": "",
}


# --- login and sessions ------------------------------------------------------------------

def test_login_with_an_unknown_token_fails(app: Flask) -> None:
    b = Browser(app.test_client())
    resp = b.login("tke_not-a-token")
    assert resp.status_code == 401
    assert "not known" in resp.text
    assert b.get("/ui/tasks").status_code == 302


def test_login_with_a_token_opens_a_session_that_never_holds_the_token(app: Flask) -> None:
    b = Browser(app.test_client())
    resp = b.login(ADMIN_TOKEN)
    assert resp.status_code == 302 and resp.location == "/ui/tasks"
    assert b.get("/ui/tasks").status_code == 200
    with b.client.session_transaction() as session:
        stored = json.dumps(dict(session))
    assert ADMIN_TOKEN not in stored
    assert set(session["who"]) == {"id", "digest", "owner"}


def test_the_cookie_holds_only_an_id_and_redis_only_its_digest(app: Flask,
                                                               redis_client) -> None:
    b = Browser(app.test_client())
    b.login(ADMIN_TOKEN)
    session_id = cookie(b)
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", session_id)  # no data, signed or not
    keys = app.extensions["taskenv"].keys
    record = redis_client.hgetall(keys.session(digest(session_id)))
    assert {"data", "created_at", "last_seen"} <= set(record)
    assert not [k for k in redis_client.keys("*") if session_id in k]


def test_login_gives_a_new_session_id(app: Flask) -> None:
    b = Browser(app.test_client())
    b.csrf()  # a session before login, holding its CSRF secret
    before = cookie(b)
    b.login(ADMIN_TOKEN)
    assert cookie(b) != before
    assert Browser(with_cookie(app, before)).get("/ui/tasks").status_code == 302


def test_session_cookie_is_httponly_and_samesite(app: Flask) -> None:
    b = Browser(app.test_client())
    resp = b.login(ADMIN_TOKEN)
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie


def test_login_returns_to_the_page_asked_for_but_only_to_our_pages(app: Flask) -> None:
    b = Browser(app.test_client())
    assert b.get("/ui/policy").location == "/ui/login?next=/ui/policy"
    assert b.post("/ui/login", {"token": ADMIN_TOKEN, "next": "/ui/policy"}).location \
        == "/ui/policy"
    b = Browser(app.test_client())
    assert b.post("/ui/login", {"token": ADMIN_TOKEN,
                                "next": "//evil.example/"}).location == "/ui/tasks"


def test_every_page_but_login_redirects_to_login_without_a_session(app: Flask) -> None:
    b = Browser(app.test_client())
    rules = [r for r in app.url_map.iter_rules() if r.endpoint.startswith("pages.")]
    assert len(rules) >= 8
    for rule in rules:
        path = rule.rule.replace("<task_id>", "some-id")
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            if rule.endpoint in ("pages.login", "pages.not_found"):  # not_found: see below
                continue
            data = {"csrf": b.csrf()} if method == "POST" else None
            resp = b.client.open(path, method=method, data=data)
            assert resp.status_code == 302, (method, path, resp.status_code)
            assert resp.location.startswith("/ui/login"), (method, path)


def cookie(b: Browser) -> str:
    found = b.client.get_cookie("taskenv_session")
    assert found is not None
    return found.value


def with_cookie(app: Flask, session_id: str) -> FlaskClient:
    """A fresh client replaying a saved cookie."""
    client = app.test_client()
    client.set_cookie("taskenv_session", session_id)
    return client


def test_logout_ends_the_session(browser) -> None:
    b = browser()
    assert b.post("/ui/logout", {}).location == "/ui/login"
    assert b.get("/ui/tasks").status_code == 302


def test_a_saved_cookie_is_dead_after_logout(app: Flask, browser, redis_client) -> None:
    b = browser()
    saved = cookie(b)
    assert Browser(with_cookie(app, saved)).get("/ui/tasks").status_code == 200
    b.post("/ui/logout", {})

    assert Browser(with_cookie(app, saved)).get("/ui/tasks").status_code == 302
    keys = app.extensions["taskenv"].keys
    assert not redis_client.exists(keys.session(digest(saved)))


def test_a_revoked_token_ends_its_sessions(app: Flask, browser, redis_client) -> None:
    b = browser("carol")
    saved = cookie(b)
    ident = next(i for i in app.extensions["taskenv"].tokens.list() if i.owner == "carol")
    app.extensions["taskenv"].tokens.revoke(ident.id)

    assert b.get("/ui/tasks").status_code == 302
    assert Browser(with_cookie(app, saved)).get("/ui/tasks").status_code == 302
    assert not redis_client.keys(f"*{digest(saved)}*")


def test_revoking_through_the_api_ends_the_session(app: Flask, browser) -> None:
    b = browser("dave")
    ident = next(i for i in app.extensions["taskenv"].tokens.list() if i.owner == "dave")
    admin = app.test_client()
    resp = admin.delete(f"/api/v1/tokens/{ident.id}",
                        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert resp.status_code == 204, resp.text
    assert b.get("/ui/tasks").status_code == 302


def test_failed_logins_are_refused_but_never_a_valid_token(app: Flask) -> None:
    b = Browser(app.test_client())
    limit = app.extensions["taskenv"].settings.auth_failures_per_minute
    for _ in range(limit):
        assert b.login("tke_wrong").status_code == 401
    refused = [b.login("tke_wrong") for _ in range(2)]  # 22 bad tokens from one address
    assert [r.status_code for r in refused] == [429, 429]
    assert int(refused[-1].headers["Retry-After"]) > 0

    assert b.login(ADMIN_TOKEN).status_code == 302
    assert b.get("/ui/tasks").status_code == 200


def test_pages_have_their_own_csp(browser) -> None:
    resp = browser().get("/ui/tasks")
    csp = resp.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "form-action 'self'" in csp
    assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert resp.headers["X-Frame-Options"] == "DENY"
    assert "<script>" not in resp.text  # only <script src=...>, never inline


# --- CSRF --------------------------------------------------------------------------------

@pytest.mark.parametrize("token", [None, "", "wrong-token"])
def test_a_post_without_the_right_csrf_token_is_refused_and_changes_nothing(
        browser, tasks: TaskStore, enqueued: EnqueueSpy, token: str | None) -> None:
    b = browser()
    data = {k: v for k, v in TASK_FORM.items()}
    if token is not None:
        data["csrf"] = token
    resp = b.post("/ui/tasks/new", data, csrf=False)
    assert resp.status_code == 400
    assert "reload the page" in resp.text
    assert tasks.page().items == [] and enqueued.calls == []


def test_csrf_guards_policy_and_env_changes_too(browser, policies: PolicyStore,
                                                tasks: TaskStore) -> None:
    b = browser()
    task_id = b.create(**TASK_FORM)
    form = {"csrf": "forged", "defaults-0-name": "A", "defaults-0-value": "1"}
    assert b.post("/ui/policy", form, csrf=False).status_code == 400
    assert policies.current().version == 0
    form = {"csrf": "forged", "env-0-name": "LEARNING_RATE", "env-0-delete": "on"}
    assert b.post(f"/ui/tasks/{task_id}/env", form, csrf=False).status_code == 400
    assert b.post(f"/ui/tasks/{task_id}/rerun", {"csrf": "x"}, csrf=False).status_code == 400
    assert tasks.get(task_id)["revision"] == 1


# --- creating a task ---------------------------------------------------------------------

def test_the_new_task_form_creates_the_task_as_typed(
        browser, tasks: TaskStore, enqueued: EnqueueSpy, redis_client) -> None:
    task_id = browser("alice").create(**TASK_FORM)

    doc = tasks.get(task_id)
    assert doc["owner"] == "alice" and doc["name"] == "resnet"
    assert doc["steps"] == [["sh", "prepare.sh", "--out", "my data"],
                            ["python3", "-c", "print('trained')"]]
    assert doc["env"] == [
        {"name": "LEARNING_RATE", "value": "0.01", "secret": False},
        {"name": "NOTE", "value": "$(HOME) stays\nliteral — ✓ \"quoted\"", "secret": False},
        {"name": "HF_TOKEN", "value": SECRET, "secret": True},
    ]
    assert enqueued.calls == [(task_id, 1)]
    assert SECRET not in redis_client.hget(f"taskenv:task:{task_id}:rev:1", "env")


def test_a_double_submitted_form_makes_one_task(browser, tasks: TaskStore) -> None:
    b = browser()
    form_id = FORM_ID.search(b.get("/ui/tasks/new").text).group(1)
    first = b.post("/ui/tasks/new", {"form_id": form_id, **TASK_FORM})
    second = b.post("/ui/tasks/new", {"form_id": form_id, **TASK_FORM})
    assert first.location == second.location
    assert len(tasks.page().items) == 1


def test_form_mistakes_come_back_with_what_was_typed_but_not_the_secret(
        browser, tasks: TaskStore) -> None:
    resp = browser().post("/ui/tasks/new", {
        **TASK_FORM, "name": "keep-me", "steps": "python3 'unclosed\n",
        "env-3-value": "a value without a name"})
    assert resp.status_code == 422
    assert "line 1: No closing quotation" in resp.text
    assert "a variable needs a name" in resp.text
    assert 'value="keep-me"' in resp.text and "python3 &#39;unclosed" in resp.text
    assert "$(HOME) stays\r\nliteral — ✓ &#34;quoted&#34;" in resp.text
    assert "a value without a name" in resp.text
    assert SECRET not in resp.text and "type it again" in resp.text
    assert tasks.page().items == []


def test_more_rows_keeps_the_input_and_adds_rows(browser, tasks: TaskStore) -> None:
    resp = browser().post("/ui/tasks/new", {**TASK_FORM, "more": "1"})
    assert resp.status_code == 200
    assert 'value="LEARNING_RATE"' in resp.text and 'name="env-8-name"' in resp.text
    assert tasks.page().items == []


# --- the task page -----------------------------------------------------------------------

def test_the_task_page_shows_the_resolved_env_and_never_the_secret(
        browser, tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy.from_dict({
        "defaults": [{"name": "DATA_DIR", "value": "/data"},
                     {"name": "LEARNING_RATE", "value": "0.1"}],
        "protected": [{"name": "NCCL_P2P_DISABLE", "value": "1", "reason": "no p2p"}]}))
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    resolve(tasks, policies, task_id)
    tasks.append_log(task_id, 1, "step 1 says hi\n")

    html = b.get(f"/ui/tasks/{task_id}").text

    assert SECRET not in html
    assert "********" in html
    assert re.search(r'type="password" name="env-2-value" value=""', html)
    rows = {name: source for source, name in
            re.findall(r'<tr class="source-(\w+)">\s*<td><code class="name">(\w+)</code>', html)}
    assert rows["DATA_DIR"] == "default" and rows["NCCL_P2P_DISABLE"] == "protected"
    assert rows["LEARNING_RATE"] == "user" and rows["TASK_ID"] == "platform"
    assert "status-resolved" in html and "step 1 says hi" in html
    assert "a running container&#39;s env cannot change" in html.lower()
    assert "not run\n    through a shell" in b.get("/ui/tasks/new").text


def test_a_rejected_task_names_the_variable_and_the_rule(
        browser, tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy.from_dict({"defaults": [], "protected": [
        {"name": "LEARNING_RATE", "reason": "tuned by the platform team"}]}))
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    resolve(tasks, policies, task_id)
    html = b.get(f"/ui/tasks/{task_id}").text
    assert "status-rejected" in html
    assert re.search(r'<code class="var">LEARNING_RATE</code> <span class="rule">'
                     r'policy.protected</span>.*tuned by the platform team', html)


def test_a_user_cannot_see_or_change_another_users_task(browser, tasks: TaskStore) -> None:
    task_id = browser("alice").create(**TASK_FORM)
    bob = browser("bob")
    assert bob.get(f"/ui/tasks/{task_id}").status_code == 404
    assert bob.post(f"/ui/tasks/{task_id}/env", {"new-0-name": "X",
                                                  "new-0-value": "1"}).status_code == 404
    assert bob.post(f"/ui/tasks/{task_id}/rerun", {}).status_code == 404
    assert task_id not in bob.get("/ui/tasks").text
    assert tasks.get(task_id)["revision"] == 1
    assert task_id in browser().get("/ui/tasks").text  # the admin sees every task


def test_the_task_list_filters_by_status_and_pages_with_the_cursor(
        browser, tasks: TaskStore, move_to) -> None:
    b = browser("alice")
    ids = [b.create(**{**TASK_FORM, "name": f"task-{n}"}) for n in range(3)]
    move_to(ids[0], states.SUCCEEDED)

    succeeded = b.get("/ui/tasks?status=succeeded").text
    assert "task-0" in succeeded and "task-1" not in succeeded
    first = b.get("/ui/tasks?limit=2").text
    assert "task-2" in first and "task-1" in first and "task-0" not in first
    next_page = re.search(r'rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    assert "task-0" in b.get(next_page).text
    assert b.get("/ui/tasks?status=nonsense").status_code == 400


# --- editing the env ---------------------------------------------------------------------

def test_env_edit_modifies_deletes_adds_and_keeps_a_secret_left_empty(
        browser, tasks: TaskStore, policies: PolicyStore, enqueued: EnqueueSpy) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    resolve(tasks, policies, task_id)

    resp = b.post(f"/ui/tasks/{task_id}/env", {
        "env-0-name": "LEARNING_RATE", "env-0-value": "0.005",
        "env-1-name": "NOTE", "env-1-value": "whatever", "env-1-delete": "on",
        "env-2-name": "HF_TOKEN", "env-2-value": "", "env-2-secret": "on",
        "new-0-name": "BATCH_SIZE", "new-0-value": "64",
        "new-1-name": "", "new-1-value": ""})

    assert resp.status_code == 302, resp.text
    doc = tasks.get(task_id)
    assert doc["revision"] == 2 and doc["state"] == states.PENDING
    assert doc["env"] == [
        {"name": "LEARNING_RATE", "value": "0.005", "secret": False},
        {"name": "HF_TOKEN", "value": SECRET, "secret": True},
        {"name": "BATCH_SIZE", "value": "64", "secret": False},
    ]
    assert enqueued.calls[-1] == (task_id, 2)
    assert "Revision 2 created" in b.get(resp.location).text


def test_env_edit_replaces_a_secret_when_a_new_value_is_typed(
        browser, tasks: TaskStore) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    b.post(f"/ui/tasks/{task_id}/env", {"env-2-name": "HF_TOKEN", "env-2-value": "hf_new-one",
                                        "env-2-secret": "on"})
    assert tasks.get(task_id)["env"][2] == {"name": "HF_TOKEN", "value": "hf_new-one",
                                            "secret": True}


def test_an_unchanged_form_makes_no_revision(browser, tasks: TaskStore) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    resp = b.post(f"/ui/tasks/{task_id}/env", {
        "env-0-name": "LEARNING_RATE", "env-0-value": "0.01",
        "env-1-name": "NOTE", "env-1-value": "$(HOME) stays\r\nliteral — ✓ \"quoted\"",
        "env-2-name": "HF_TOKEN", "env-2-value": "", "env-2-secret": "on"})
    assert resp.status_code == 302
    assert tasks.get(task_id)["revision"] == 1
    assert "Nothing changed" in b.get(resp.location).text


def test_a_secret_cannot_turn_plain_without_a_new_value(browser, tasks: TaskStore) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    resp = b.post(f"/ui/tasks/{task_id}/env", {"env-2-name": "HF_TOKEN", "env-2-value": "",
                                               "new-0-name": "KEEP_ME", "new-0-value": "typed"})
    assert resp.status_code == 422
    assert "type a new value to make HF_TOKEN a plain variable" in resp.text
    assert "KEEP_ME" in resp.text and "typed" in resp.text
    assert tasks.get(task_id)["revision"] == 1


def test_env_edit_of_a_running_task_offers_restart_and_next_run(
        browser, tasks: TaskStore, move_to, app: Flask, enqueued: EnqueueSpy) -> None:
    sent: list[tuple[str, str, int]] = []
    app.extensions["taskenv"].send = lambda *message: sent.append(message)
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    move_to(task_id, states.RUNNING)
    page = b.get(f"/ui/tasks/{task_id}").text
    assert 'value="restart"' in page and 'value="next-run"' in page
    resp = b.post(f"/ui/tasks/{task_id}/env", {"new-0-name": "X", "new-0-value": "1",
                                                "apply": "next-run"})
    assert resp.status_code == 302
    doc = tasks.get(task_id)
    assert doc["revision"] == 1 and doc["state"] == states.RUNNING
    assert "X" in b.get(f"/ui/tasks/{task_id}").text  # kept for the next run
    resp = b.post(f"/ui/tasks/{task_id}/env", {"new-0-name": "Y", "new-0-value": "2",
                                                "apply": "restart"})
    assert resp.status_code == 302
    assert tasks.get(task_id)["revision"] == 2
    assert tasks.revision(task_id, 1)["state"] == states.CANCELLED
    assert sent == [("cancel", task_id, 1)]


def test_cancel_button_asks_for_confirmation_and_cancels(browser, tasks: TaskStore,
                                                         move_to) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    page = b.get(f"/ui/tasks/{task_id}").text
    assert "<details" in page and f"/ui/tasks/{task_id}/cancel" in page
    assert b.post(f"/ui/tasks/{task_id}/cancel", {}).status_code == 302
    assert tasks.get(task_id)["state"] == states.CANCELLED
    assert "cancelled" in b.get(f"/ui/tasks/{task_id}").text
    assert f"/ui/tasks/{task_id}/cancel" not in b.get(f"/ui/tasks/{task_id}").text


def test_rerun_makes_a_new_revision(browser, tasks: TaskStore, enqueued: EnqueueSpy) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    assert b.post(f"/ui/tasks/{task_id}/rerun", {}).status_code == 302
    assert tasks.get(task_id)["revision"] == 2 and enqueued.calls[-1] == (task_id, 2)


def test_rerun_is_offered_once_the_task_has_ended_and_cancel_only_before(
        browser, move_to) -> None:
    b = browser("alice")
    task_id = b.create(**TASK_FORM)
    rerun, cancel = f"/ui/tasks/{task_id}/rerun", f"/ui/tasks/{task_id}/cancel"
    for state in (states.PENDING, states.RUNNING):
        move_to(task_id, state)
        page = b.get(f"/ui/tasks/{task_id}").text
        assert cancel in page and rerun not in page, state
    move_to(task_id, states.SUCCEEDED)
    page = b.get(f"/ui/tasks/{task_id}").text
    assert rerun in page and cancel not in page


def log_box(html: str) -> str:
    found = re.search(r'<pre class="log" id="log"[^>]*>(.*?)</pre>', html, re.S)
    assert found, "no log on the page"
    return unescape(found.group(1))


def test_a_rejected_task_says_why_nothing_ran_where_its_output_would_be(
        browser, tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy.from_dict({"defaults": [], "protected": [
        {"name": "LEARNING_RATE", "reason": "tuned by the platform team"}]}))
    b = browser("alice")
    rejected = b.create(**TASK_FORM)
    resolve(tasks, policies, rejected)
    waiting = b.create(**{**TASK_FORM, "env-0-name": "RATE"})

    said = log_box(b.get(f"/ui/tasks/{rejected}").text)

    assert said == ("Nothing ran: revision 1 was rejected before launch, for 1 problem "
                    "(listed under Errors above):\n  LEARNING_RATE: policy.protected\n")
    assert log_box(b.get(f"/ui/tasks/{waiting}").text) == \
        "(no output yet: revision 1 is pending)"


def test_unknown_console_pages_answer_an_html_404_page(app: Flask, browser) -> None:
    signed_in, visitor = browser("alice"), Browser(app.test_client())
    for b in (signed_in, visitor):
        for path in ("/ui/nope", "/ui/tasks/new/extra", f"/ui/tasks/{'0' * 32}/nope",
                     "/ui/policy/defaults"):
            response = b.get(path)
            assert response.status_code == 404, path
            assert response.content_type.startswith("text/html")
            assert f"There is no page at {path}" in response.text
            assert "default-src 'self'" in response.headers["Content-Security-Policy"]
        assert b.client.post("/ui/nope", data={}).status_code == 404  # no CSRF to check
    assert "Log out" in signed_in.get("/ui/nope").text  # the navigation, signed in
    wrong = signed_in.get("/ui/logout")
    assert wrong.status_code == 405 and "/ui/logout takes POST, not GET" in wrong.text
    assert signed_in.get("/ui").location == "/ui/tasks"
    assert signed_in.get("/api/v1/nope").content_type == "application/json"


# --- the policy page ---------------------------------------------------------------------

POLICY_FORM = {
    "defaults-0-name": "DATA_DIR", "defaults-0-value": "/data",
    "defaults-1-name": "WANDB_API_KEY", "defaults-1-value": "wandb-secret-1234",
    "defaults-1-secret": "on",
    "protected-0-name": "NCCL_P2P_DISABLE", "protected-0-value": "1",
    "protected-0-reason": "no peer-to-peer link on these GPUs",
    "protected-1-name": "CUDA_VISIBLE_DEVICES", "protected-1-value": "",
    "protected-1-reason": "the scheduler assigns GPUs",
    "on_conflict": "reject",
}


def test_the_policy_page_is_for_admins_only(browser, policies: PolicyStore) -> None:
    b = browser("alice")
    assert b.get("/ui/policy").status_code == 403
    assert b.post("/ui/policy", POLICY_FORM).status_code == 403
    assert policies.current().version == 0
    assert 'href="/ui/policy"' not in b.get("/ui/tasks").text


def test_an_admin_saves_the_policy_and_its_secret_is_kept_when_left_empty(
        browser, policies: PolicyStore, app: Flask) -> None:
    b = browser()
    assert b.post("/ui/policy", POLICY_FORM).status_code == 302
    saved = policies.current()
    assert saved.version == 1 and saved.author == "admin"
    assert saved.to_dict()["defaults"] == [
        {"name": "DATA_DIR", "value": "/data"},
        {"name": "WANDB_API_KEY", "value": "wandb-secret-1234", "secret": True}]
    assert saved.to_dict()["protected"] == [
        {"name": "NCCL_P2P_DISABLE", "value": "1",
         "reason": "no peer-to-peer link on these GPUs"},
        {"name": "CUDA_VISIBLE_DEVICES", "reason": "the scheduler assigns GPUs"}]
    audit = app.extensions["taskenv"].audit.list()
    assert audit[0]["action"] == "policy.put" and audit[0]["target"] == "v1"

    html = b.get("/ui/policy").text
    assert "wandb-secret-1234" not in html and "Version 1" in html
    again = {**POLICY_FORM, "defaults-1-value": "", "defaults-0-value": "/data2"}
    assert b.post("/ui/policy", again).status_code == 302
    assert policies.current().to_dict()["defaults"] == [
        {"name": "DATA_DIR", "value": "/data2"},
        {"name": "WANDB_API_KEY", "value": "wandb-secret-1234", "secret": True}]


def inputs(html: str) -> list[dict[str, str | None]]:
    """The attributes of every ``<input>`` of a page, as a browser's parser reads them."""
    found: list[dict[str, str | None]] = []

    class Inputs(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "input":
                found.append(dict(attrs))

    Inputs().feed(html)
    return found


def test_the_when_fields_are_empty_with_an_example_that_reads_as_one(
        browser, policies: PolicyStore) -> None:
    """A row without a condition shows an empty *When*: its placeholder says "e.g.", and
    the help it points at says what an empty one means, so no example looks filled in."""
    b = browser()
    assert b.post("/ui/policy", POLICY_FORM).status_code == 302
    html = b.get("/ui/policy").text
    fields = [a for a in inputs(html) if re.fullmatch(r"(defaults|protected)-\d+-when",
                                                        a.get("name") or "")]
    assert len(fields) >= 4  # the saved rows and the empty ones, in both tables
    for field in fields:
        assert field["value"] == "", field
        assert field["placeholder"] == 'e.g. {"gpus": ">=1"}', field
        assert field["aria-describedby"] == "when-help", field
    [help_text] = re.findall(r'<p class="hint" id="when-help">(.*?)</p>', html, re.DOTALL)
    assert "Left empty, the row applies to all tasks" in " ".join(help_text.split())
    assert all("when" not in row for row in policies.current().to_dict()["defaults"])


def test_policy_problems_are_all_shown_naming_the_variable(
        browser, policies: PolicyStore) -> None:
    resp = browser().post("/ui/policy", {
        **POLICY_FORM, "defaults-2-name": "TASK_ID", "defaults-2-value": "x",
        "protected-1-reason": "", "defaults-3-name": "bad name", "defaults-3-value": "1"})
    assert resp.status_code == 422
    html = resp.text
    assert re.search(r'<code class="var">TASK_ID</code> <span class="rule">'
                     r'policy.platform_reserved', html)
    assert re.search(r'<code class="var">CUDA_VISIBLE_DEVICES</code> <span class="rule">'
                     r'policy.reason_required', html)
    assert re.search(r'<code class="var">bad name</code> <span class="rule">name.shell', html)
    assert 'aria-label="reason">\nno peer-to-peer link on these GPUs</textarea>' in html  # kept
    assert "wandb-secret-1234" not in html
    assert policies.current().version == 0


def test_a_ticked_policy_row_is_deleted_and_a_long_reason_is_shown_whole(
        browser, policies: PolicyStore) -> None:
    b = browser()
    reason = ("no peer-to-peer link on these GPUs: the interconnect of rack 7 drops P2P "
              "transfers above 2 GiB, so the platform turns it off until the firmware update")
    assert b.post("/ui/policy", {**POLICY_FORM, "protected-0-reason": reason}).status_code == 302
    html = b.get("/ui/policy").text
    assert f'aria-label="reason">\n{reason}</textarea>' in html  # a box that wraps, not a line
    assert 'name="defaults-0-delete" aria-label="delete DATA_DIR"' in html

    ticked = {**POLICY_FORM, "protected-0-reason": reason, "defaults-1-value": "",
              "defaults-0-delete": "on", "protected-1-delete": "on"}
    assert b.post("/ui/policy", ticked).status_code == 302

    saved = policies.current().to_dict()
    assert saved["version"] == 2
    assert saved["defaults"] == [
        {"name": "WANDB_API_KEY", "value": "wandb-secret-1234", "secret": True}]
    assert saved["protected"] == [{"name": "NCCL_P2P_DISABLE", "value": "1", "reason": reason}]


def test_a_line_break_typed_into_a_reason_is_a_space(browser, policies: PolicyStore) -> None:
    form = {**POLICY_FORM, "protected-0-reason": "no p2p\r\n  on these GPUs "}
    assert browser().post("/ui/policy", form).status_code == 302
    assert policies.current().protected[0].reason == "no p2p on these GPUs"


# --- escaping ----------------------------------------------------------------------------

def test_hostile_text_renders_as_text(browser, tasks: TaskStore, policies: PolicyStore) -> None:
    b = browser("alice")
    task_id = b.create(**{**TASK_FORM, "name": XSS, "env-0-value": XSS,
                          "env-3-name": "QUOTES", "env-3-value": "\"'><b>x</b>"})
    resolve(tasks, policies, task_id)
    tasks.append_log(task_id, 1, XSS + "\n")
    for html in (b.get(f"/ui/tasks/{task_id}").text, b.get("/ui/tasks").text):
        assert XSS not in html and "<b>x</b>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&#34;&#39;&gt;&lt;b&gt;x&lt;/b&gt;" in b.get(f"/ui/tasks/{task_id}").text


def test_a_secret_policy_row_without_secret_keys_keeps_the_form(
        redis_client, enqueued: EnqueueSpy) -> None:
    app = build_app(redis_client, enqueued, secret_keys="")
    b = Browser(app.test_client())
    b.login(ADMIN_TOKEN)
    resp = b.post("/ui/policy", POLICY_FORM)
    assert resp.status_code == 422
    assert "TASKENV_SECRET_KEYS" in resp.text and 'value="DATA_DIR"' in resp.text
    assert "wandb-secret-1234" not in resp.text
    assert app.extensions["taskenv"].policies.current().version == 0


def test_a_malformed_task_id_is_a_missing_task_on_the_pages(browser) -> None:
    b = browser()
    missing = b.get(f"/ui/tasks/{'f' * 32}")
    malformed = b.get(f"/ui/tasks/{'f' * 32}:log:1")
    assert missing.status_code == malformed.status_code == 404


def test_the_task_list_pages_with_an_opaque_cursor(browser) -> None:
    b = browser()
    for i in range(2):
        b.create(name=f"paged{i}", steps="true")
    listing = b.get("/ui/tasks?limit=1").text
    [link] = re.findall(r'href="(/ui/tasks\?[^"]*cursor=[^"]*)"', listing)
    cursor = parse_qs(urlsplit(unescape(link)).query)["cursor"][0]
    assert not cursor.isdigit()
    assert b.get(unescape(link)).status_code == 200
    assert b.get("/ui/tasks?cursor=12").status_code == 400


# --- the task's own files on the form ----------------------------------------------------

def test_the_form_takes_files_typed_in_the_editor_and_uploaded(browser,
                                                               tasks: TaskStore) -> None:
    import io
    b = browser("alice")
    form_id = FORM_ID.search(b.get("/ui/tasks/new").text).group(1)
    resp = b.client.post("/ui/tasks/new", content_type="multipart/form-data", data={
        "csrf": b.csrf(), "form_id": form_id, "name": "with-files",
        "steps": "sh prepare.sh\npython3 train.py\n",
        "file-0-path": "prepare.sh", "file-0-content": "echo one\r\necho two\r\n",
        "file-0-executable": "on", "file-1-path": "", "file-1-content": "",
        "files_upload": (io.BytesIO(b"print('trained')\n"), "train.py")})
    assert resp.status_code == 302, resp.text
    doc = tasks.get(resp.location.rsplit("/", 1)[1])
    assert doc["files"] == [
        {"path": "prepare.sh", "content": "echo one\necho two\n", "mode": 0o755},
        {"path": "train.py", "content": "print('trained')\n", "mode": 0o644}]
    page = b.get(resp.location).text
    assert "prepare.sh" in page and "mode 755" in page and "echo two" in page


def test_a_bad_file_comes_back_named_with_what_was_typed(browser, tasks: TaskStore) -> None:
    resp = browser().post("/ui/tasks/new", {
        **TASK_FORM, "file-0-path": "../escape.sh", "file-0-content": "echo kept\n",
        "file-1-content": "a file without a path"})
    assert resp.status_code == 422
    assert "a file needs a path" in resp.text
    assert "echo kept" in resp.text and "a file without a path" in resp.text
    resp = browser().post("/ui/tasks/new", {
        **TASK_FORM, "file-0-path": "../escape.sh", "file-0-content": "echo kept\n"})
    assert resp.status_code == 422
    assert "file ../escape.sh: path must not contain a &#39;..&#39; component" in resp.text
    assert 'value="../escape.sh"' in resp.text
    assert tasks.page().items == []


def test_the_task_page_of_an_earlier_revision_shows_that_revision_s_files(
        browser, tasks: TaskStore, client_for) -> None:
    alice = client_for("alice")
    task_id = alice.post("/api/v1/tasks", json={
        "name": "f", "steps": [["sh", "a.sh"]],
        "files": [{"path": "a.sh", "content": "echo version-one\n"}]}).get_json()["id"]
    assert alice.patch(f"/api/v1/tasks/{task_id}/env", json={
        "files": [{"path": "a.sh", "content": "echo version-two\n"}]}).status_code == 202
    b = browser("alice")
    assert "version-two" in b.get(f"/ui/tasks/{task_id}").text
    earlier = b.get(f"/ui/tasks/{task_id}?revision=1").text
    assert "version-one" in earlier and "version-two" not in earlier
