"""Who may do what: tokens, roles, tenant isolation, hardening."""

from __future__ import annotations

import re

import fakeredis
import pytest

from api import create_app
from api.auth import PUBLIC_ENDPOINTS
from shared.env.envlist import Limits
from shared.policy.store import PolicyStore
from shared.secrets import Cipher, new_key
from shared.store.tasks import TaskStore
from workers import stages

ADMIN = "tke_admin-for-tests-0123456789abcdef"
KEY = new_key()


@pytest.fixture
def client_redis():
    return fakeredis.FakeRedis(decode_responses=True)


@pytest.fixture
def app(client_redis):
    """The API with an enqueue that runs validation and policy at once, as workers would."""
    cipher = Cipher([KEY])
    tasks = TaskStore(client_redis, "taskenv", cipher)
    policies = PolicyStore(client_redis, "taskenv", cipher)

    def enqueue(task_id: str, revision: int) -> None:
        if stages.validate(tasks, Limits(), task_id, revision):
            stages.apply_policy(tasks, policies, task_id, revision)

    return create_app({"admin_token": ADMIN, "secret_keys": KEY,
                       "auth_failures_per_minute": 5},
                      redis_client=client_redis, enqueue=enqueue)


@pytest.fixture
def web(app):
    return app.test_client()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def new_token(web, owner: str, role: str = "user") -> str:
    resp = web.post("/api/v1/tokens", json={"owner": owner, "role": role}, headers=auth(ADMIN))
    assert resp.status_code == 201, resp.json
    return resp.json["token"]


def create_task(web, token: str, env=None) -> dict:
    resp = web.post("/api/v1/tasks", headers=auth(token),
                    json={"name": "t", "steps": [["true"]], "env": env or []})
    assert resp.status_code == 202, resp.json
    return resp.json


def concrete_routes(app):
    for rule in app.url_map.iter_rules():
        if rule.endpoint in PUBLIC_ENDPOINTS or rule.endpoint.startswith("pages."):
            continue  # pages answer with a redirect to the login page: tests/api/test_pages.py
        path = re.sub(r"<(?:int:)?([a-z_]+)>",
                      lambda m: "1" if "int:" in m.group(0) else "some-id", rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            yield method, path


def test_no_route_answers_without_a_valid_token(app, web):
    routes = list(concrete_routes(app))
    assert len(routes) >= 14  # every route of the API, checked below
    for method, path in routes:
        for headers in ({}, auth("tke_not-a-real-token"), {"Authorization": "Basic x"}):
            resp = web.open(path, method=method, headers=headers, json={})
            assert resp.status_code in (401, 429), (method, path, resp.status_code)
    assert web.get("/healthz").status_code == 200


def test_missing_token_gets_the_error_shape_and_a_challenge(web):
    resp = web.get("/api/v1/tasks")
    assert resp.status_code == 401
    assert resp.json["code"] == "unauthorized" and resp.json["errors"] == []
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")


def test_repeated_failures_are_refused_with_retry_after(web):
    answers = [web.get("/api/v1/tasks", headers=auth(f"tke_guess{i}")) for i in range(8)]
    assert [r.status_code for r in answers] == [401] * 5 + [429] * 3
    assert all(int(r.headers["Retry-After"]) > 0 for r in answers[5:])
    assert answers[-1].json["code"] == "too_many_requests"


def test_failures_from_an_address_never_stop_a_valid_token(web):
    for i in range(22):
        web.get("/api/v1/tasks", headers=auth(f"tke_guess{i}"))
    user = new_token(web, "erin")

    assert web.get("/api/v1/tasks", headers=auth(ADMIN)).status_code == 200
    assert web.get("/api/v1/tasks", headers=auth(user)).status_code == 200
    assert web.get("/api/v1/tasks", headers=auth("tke_guess-again")).status_code == 429


def test_guesses_at_one_token_are_counted_across_addresses(web):
    guesses = [web.get("/api/v1/tasks", headers=auth(f"tke_samebeginning-{i}"),
                       environ_base={"REMOTE_ADDR": f"10.0.0.{i}"}) for i in range(7)]
    assert [r.status_code for r in guesses] == [401] * 5 + [429] * 2
    other = web.get("/api/v1/tasks", headers=auth("tke_otherbeginning"),
                    environ_base={"REMOTE_ADDR": "10.0.1.1"})
    assert other.status_code == 401


def test_users_see_only_their_own_tasks(web):
    alice, bob = new_token(web, "alice"), new_token(web, "bob")
    task = create_task(web, alice)
    url = task["url"]

    assert web.get(url, headers=auth(alice)).status_code == 200
    for method, path, body in (("GET", url, None), ("GET", url + "/logs", None),
                               ("PATCH", url + "/env", {"set": []}),
                               ("POST", url + "/rerun", None)):
        resp = web.open(path, method=method, headers=auth(bob), json=body)
        assert resp.status_code == 404, (method, path)
        assert resp.json["code"] == "not_found"
    assert web.get("/api/v1/tasks", headers=auth(bob)).json["items"] == []
    assert [t["id"] for t in web.get("/api/v1/tasks", headers=auth(alice)).json["items"]] \
        == [task["id"]]
    assert [t["id"] for t in web.get("/api/v1/tasks", headers=auth(ADMIN)).json["items"]] \
        == [task["id"]]


@pytest.mark.parametrize("method,path", [
    ("GET", "/api/v1/policy"), ("PUT", "/api/v1/policy"), ("GET", "/api/v1/policy/versions"),
    ("GET", "/api/v1/policy/versions/1"), ("GET", "/api/v1/audit"),
    ("GET", "/api/v1/tokens"), ("POST", "/api/v1/tokens"), ("DELETE", "/api/v1/tokens/x")])
def test_users_cannot_touch_policy_tokens_or_audit(web, method, path):
    alice = new_token(web, "alice")
    resp = web.open(path, method=method, headers=auth(alice), json={"owner": "eve"})
    assert resp.status_code == 403
    assert resp.json["code"] == "forbidden"


def test_no_route_lets_a_user_set_a_protected_variable(web):
    web.put("/api/v1/policy", headers=auth(ADMIN), json={"defaults": [], "protected": [
        {"name": "DATA_ROOT", "value": "/mnt/data", "reason": "shared storage"}]})
    alice = new_token(web, "alice")

    created = create_task(web, alice, env=[{"name": "DATA_ROOT", "value": "/tmp/mine"}])
    doc = web.get(created["url"], headers=auth(alice)).json
    assert doc["status"] == "rejected" and doc["errors"][0]["variable"] == "DATA_ROOT"

    ok = create_task(web, alice, env=[{"name": "LR", "value": "0.1"}])
    patched = web.patch(ok["url"] + "/env", headers=auth(alice),
                        json={"set": [{"name": "DATA_ROOT", "value": "/tmp/mine"}]})
    assert patched.status_code == 202
    doc = web.get(ok["url"], headers=auth(alice)).json
    assert (doc["revision"], doc["status"]) == (2, "rejected")
    assert "shared storage" in doc["errors"][0]["message"]

    # An admin protects LR afterwards: re-resolving the same env is refused too.
    web.put("/api/v1/policy", headers=auth(ADMIN), json={"defaults": [], "protected": [
        {"name": "LR", "reason": "tuned by the platform"}]})
    good = create_task(web, alice, env=[{"name": "LR", "value": "0.1"}])
    web.put("/api/v1/policy", headers=auth(ADMIN), json={"defaults": [], "protected": [
        {"name": "DATA_ROOT", "reason": "shared storage"}]})
    rerun = web.post(good["url"] + "/rerun", headers=auth(alice))
    assert rerun.status_code == 202
    assert web.get(good["url"], headers=auth(alice)).json["status"] == "resolved"


def test_revoked_tokens_stop_working_and_the_audit_log_names_the_actor(web):
    carol = web.post("/api/v1/tokens", json={"owner": "carol"}, headers=auth(ADMIN)).json
    assert web.get("/api/v1/tasks", headers=auth(carol["token"])).status_code == 200
    create_task(web, carol["token"])

    assert web.delete(f"/api/v1/tokens/{carol['id']}", headers=auth(ADMIN)).status_code == 204
    assert web.get("/api/v1/tasks", headers=auth(carol["token"])).status_code == 401
    audit = web.get("/api/v1/audit", headers=auth(ADMIN)).json["items"]
    assert [(e["actor"], e["action"]) for e in audit] == [
        ("admin", "token.revoke"), ("carol", "task.create"), ("admin", "token.create")]


def test_tokens_are_stored_only_as_hashes(web, client_redis):
    token = new_token(web, "dave")
    listing = web.get("/api/v1/tokens", headers=auth(ADMIN)).get_data(as_text=True)
    dump = " ".join(f"{k} {client_redis.dump(k)!r}" for k in client_redis.scan_iter())
    assert token not in listing and token not in dump and ADMIN not in dump


def test_secret_variables_are_refused_when_no_key_is_configured(client_redis):
    app = create_app({"admin_token": ADMIN}, redis_client=client_redis,
                     enqueue=lambda *_: None)
    resp = app.test_client().post(
        "/api/v1/tasks", headers=auth(ADMIN),
        json={"name": "t", "steps": [["true"]],
              "env": [{"name": "HF_TOKEN", "value": "hf-token-x", "secret": True}]})
    assert resp.status_code == 422
    assert "HF_TOKEN" in resp.json["message"] and "TASKENV_SECRET_KEYS" in resp.json["message"]
    assert list(client_redis.scan_iter("taskenv:task:*")) == []


def test_hardening_headers_and_request_size_limit(app, web):
    resp = web.get("/api/v1/tasks", headers=auth(ADMIN))
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["X-Frame-Options"] == "DENY"
    assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
    too_big = b"x" * (app.config["MAX_CONTENT_LENGTH"] + 1)
    resp = web.post("/api/v1/tasks", data=too_big, headers={**auth(ADMIN),
                    "Content-Type": "application/json"})
    assert resp.status_code == 413
    assert resp.json["code"] == "request_entity_too_large"


def test_openapi_document_declares_bearer_security(web):
    spec = web.get("/api/v1/openapi.json", headers=auth(ADMIN)).json
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert spec["security"] == [{"bearerAuth": []}]


def test_a_short_bootstrap_admin_token_is_refused_at_startup(client_redis):
    with pytest.raises(ValueError, match="TASKENV_ADMIN_TOKEN is 13 characters long") as err:
        create_app({"admin_token": "tke_too-short"}, redis_client=client_redis,
                   enqueue=lambda *_: None)
    assert "tke_too-short" not in str(err.value)
    assert client_redis.keys("*") == []  # nothing was registered


class RecordingRedis(fakeredis.FakeRedis):
    """Remembers every command's arguments, to tell what Redis was asked."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: list[str] = []

    def execute_command(self, *args, **kwargs):
        self.asked.append(" ".join(map(str, args)))
        return super().execute_command(*args, **kwargs)


@pytest.mark.parametrize("bad_id", ["0123abcd:log:1", "A" * 32, "f" * 31, "f" * 33, "x"])
def test_a_malformed_task_id_is_404_before_redis_is_asked(bad_id):
    client_redis = RecordingRedis(decode_responses=True)
    app = create_app({"admin_token": ADMIN}, redis_client=client_redis, enqueue=lambda *_: None)
    web = app.test_client()
    missing = web.get(f"/api/v1/tasks/{'f' * 32}", headers=auth(ADMIN))
    client_redis.asked.clear()

    for path in (f"/api/v1/tasks/{bad_id}", f"/api/v1/tasks/{bad_id}/logs"):
        resp = web.get(path, headers=auth(ADMIN))
        assert (resp.status_code, resp.json["code"]) == (404, missing.json["code"]), path
    assert not [c for c in client_redis.asked if bad_id in c]


def test_an_idempotency_key_replayed_with_another_secret_value_is_a_conflict(web):
    def create(value: str):
        return web.post("/api/v1/tasks", headers={**auth(ADMIN), "Idempotency-Key": "once"},
                        json={"name": "t", "steps": [["true"]],
                              "env": [{"name": "HF_TOKEN", "value": value, "secret": True}]})

    first = create("hf-secret-value-one")
    assert first.status_code == 202
    again = create("hf-secret-value-one")
    assert (again.status_code, again.json["id"]) == (202, first.json["id"])
    other = create("hf-secret-value-two")
    assert other.status_code == 409 and other.json["code"] == "conflict"
    assert "hf-secret-value" not in other.text
