"""An outside attacker against revisions, .env text, cancel/rerun/If-Match, projects,
their policies and impact, preview, the unauthenticated probes and the console.

Each test is named after the attack and asserts the safe answer: the status, no
secret anywhere in the body or headers, and nothing stored or changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from flask import Flask
from flask.testing import FlaskClient

from shared.env import envfile
from shared.env.envlist import EnvVar, Limits
from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from shared.task import states
from tests.api.conftest import ADMIN_TOKEN, CSRF, Browser, EnqueueSpy
from workers import outcomes, stages

TASKS = "/api/v1/tasks"
SECRET = "s3cr3t-value-never-shown"
DEFAULT_SECRET = "project-default-secret-value"
Users = dict[str, FlaskClient]


# --- helpers -----------------------------------------------------------------------------

def exposed(response: Any) -> str:
    """Everything a response shows: its status line, headers and body."""
    headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
    return f"{response.status}\n{headers}\n{response.get_data(as_text=True)}"


def assert_hidden(response: Any, *secrets: str) -> None:
    shown = exposed(response)
    for secret in secrets:
        assert secret not in shown, (secret, shown[:2000])


def assert_error(response: Any, status: int) -> None:
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    assert set(response.get_json()) >= {"code", "message", "errors"}


def assert_no_such_project(response: Any, name: str) -> None:
    """What a project one does not belong to answers: exactly what a name no project has
    answers, so asking never tells a tenant that another's project exists."""
    assert_error(response, 404)
    assert response.get_json() == {"code": "not_found", "errors": [],
                                   "message": f"no project {name}"}


def create(user: FlaskClient, **body: Any) -> str:
    data = {"name": "resnet", "steps": [["python3", "train.py"]], **body}
    response = user.post(TASKS, json=data)
    assert response.status_code == 202, response.get_json()
    return str(response.get_json()["id"])


def resolve(tasks: TaskStore, policies: PolicyStore, task_id: str) -> dict[str, Any]:
    revision = tasks.get(task_id)["revision"]
    assert stages.validate(tasks, Limits(), task_id, revision)
    assert stages.apply_policy(tasks, policies, task_id, revision)
    return tasks.get(task_id)


def finish(tasks: TaskStore, task_id: str) -> None:
    revision = tasks.get(task_id)["revision"]
    assert tasks.transition(task_id, revision, states.RESOLVED, states.LAUNCHING)
    outcomes.record_outcome(tasks, task_id, revision, states.RUNNING, None, None)
    outcomes.record_outcome(tasks, task_id, revision, states.SUCCEEDED, 0, None)


def snapshot(redis_client: fakeredis.FakeRedis) -> dict[str, Any]:
    """Every key and its whole content: what 'nothing changed' is checked against."""
    dump: dict[str, Any] = {}
    for key in sorted(redis_client.keys("*")):
        kind = redis_client.type(key)
        if kind == "hash":
            dump[key] = redis_client.hgetall(key)
        elif kind == "string":
            dump[key] = redis_client.get(key)
        elif kind == "set":
            dump[key] = sorted(redis_client.smembers(key))
        elif kind == "zset":
            dump[key] = redis_client.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            dump[key] = redis_client.lrange(key, 0, -1)
    return dump


def task_keys(redis_client: fakeredis.FakeRedis) -> dict[str, Any]:
    """The task records only (the audit log and auth counters may grow on a refusal)."""
    return {k: v for k, v in snapshot(redis_client).items() if ":task:" in k}


@pytest.fixture
def users(client_for: Callable[..., FlaskClient]) -> Users:
    return {name: client_for(name) for name in ("alice", "bob", "carol", "dave", "eve")}


@pytest.fixture
def projects(client: FlaskClient) -> None:
    """vision: alice a member, carol its maintainer; speech: bob a member, dave its
    maintainer; eve is in no project."""
    for name, members, maintainers in (("vision", ["alice"], ["carol"]),
                                       ("speech", ["bob"], ["dave"])):
        made = client.post("/api/v1/projects", json={"name": name, "members": members,
                                                     "maintainers": maintainers})
        assert made.status_code == 201, made.get_json()


def secret_then_plain(client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> str:
    """Revision 1 has TOKEN secret; revision 2 has TOKEN as a plain value; both resolved."""
    task_id = create(client, env=[{"name": "TOKEN", "value": SECRET, "secret": True},
                                  {"name": "LR", "value": "0.1"}])
    resolve(tasks, policies, task_id)
    finish(tasks, task_id)
    patched = client.patch(f"{TASKS}/{task_id}/env",
                           json={"set": [{"name": "TOKEN", "value": "plain-now"}]})
    assert patched.status_code == 202, patched.get_json()
    resolve(tasks, policies, task_id)
    return task_id


# --- revisions ---------------------------------------------------------------------------

def test_revisions_of_someone_elses_task_are_404_and_show_nothing(
        client: FlaskClient, users: Users, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = secret_then_plain(client, tasks, policies)

    for path in ("revisions", "revisions/1", "revisions/2", "revisions/1/diff/2",
                 "revisions/1/diff/2?of=env", "env", "env?format=dotenv",
                 "env?format=dotenv&resolved=true", "manifest", "logs"):
        response = users["eve"].get(f"{TASKS}/{task_id}/{path}")
        assert_error(response, 404)
        assert_hidden(response, SECRET, "TOKEN", "plain-now", "admin")


@pytest.mark.parametrize("number", ["0", "3", "-1", "99999999999999999999999999", "abc",
                                    "1.0", "%20", "1e3", "٣"])
def test_revision_numbers_out_of_range_or_not_integers_are_404(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore, number: str) -> None:
    task_id = secret_then_plain(client, tasks, policies)

    for path in (f"revisions/{number}", f"revisions/{number}/diff/1",
                 f"revisions/1/diff/{number}"):
        response = client.get(f"{TASKS}/{task_id}/{path}")
        assert_error(response, 404)
        assert_hidden(response, SECRET)


def test_a_diff_between_a_secret_and_a_plain_value_of_the_same_name_never_shows_the_secret(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = secret_then_plain(client, tasks, policies)

    for old, new in ((1, 2), (2, 1)):
        for of in ("resolved", "env"):
            response = client.get(f"{TASKS}/{task_id}/revisions/{old}/diff/{new}?of={of}")
            assert response.status_code == 200
            assert_hidden(response, SECRET)
            change = {c["name"]: c for c in response.get_json()["changed"]}["TOKEN"]
            # Whether the plain value equals the secret is not told either.
            assert change["secret"] and change["value_changed"]


def test_a_plain_value_equal_to_the_old_secret_does_not_confirm_the_secret_in_a_diff(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = create(client, env=[{"name": "TOKEN", "value": SECRET, "secret": True}])
    resolve(tasks, policies, task_id)
    finish(tasks, task_id)
    guess = client.patch(f"{TASKS}/{task_id}/env",
                         json={"set": [{"name": "TOKEN", "value": SECRET}]})
    assert guess.status_code == 202
    resolve(tasks, policies, task_id)

    diff = client.get(f"{TASKS}/{task_id}/revisions/1/diff/2").get_json()

    assert "TOKEN" not in diff["unchanged"]
    assert {c["name"]: c["value_changed"] for c in diff["changed"]}["TOKEN"] is True


def test_a_rerun_drift_and_revision_view_keep_a_changed_secret_default_masked(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy(defaults=(EnvVar("HUB_TOKEN", DEFAULT_SECRET, secret=True),)))
    task_id = create(client)
    resolve(tasks, policies, task_id)
    finish(tasks, task_id)
    policies.put(Policy(defaults=(EnvVar("HUB_TOKEN", DEFAULT_SECRET + "-new", secret=True),)))
    assert client.post(f"{TASKS}/{task_id}/rerun", json={}).status_code == 202
    resolve(tasks, policies, task_id)

    for path in ("", "/revisions/2", "/revisions/1/diff/2", "/revisions"):
        response = client.get(f"{TASKS}/{task_id}{path}")
        assert response.status_code == 200
        assert_hidden(response, DEFAULT_SECRET)
    drift = client.get(f"{TASKS}/{task_id}").get_json()["drift"]
    assert [(d["name"], d["secret"]) for d in drift] == [("HUB_TOKEN", True)]


# --- .env export -------------------------------------------------------------------------

def test_dotenv_export_leaves_every_secret_out_as_plain_text(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy(defaults=(EnvVar("HUB_TOKEN", DEFAULT_SECRET, secret=True),)))
    task_id = create(client, env=[{"name": "TOKEN", "value": SECRET, "secret": True}])
    resolve(tasks, policies, task_id)

    for query in ("format=dotenv", "format=dotenv&resolved=true"):
        response = client.get(f"{TASKS}/{task_id}/env?{query}")
        assert response.status_code == 200
        assert response.mimetype == "text/plain"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert_hidden(response, SECRET, DEFAULT_SECRET)
        entries, problems = envfile.parse(response.get_data(as_text=True))
        assert not problems and "TOKEN" not in {e["name"] for e in entries}


@pytest.mark.parametrize("name,value", [
    ("EVIL\r\nX-Injected: 1", "v"),
    ("A'\nINJECTED=1\n#", "v"),
    ("PLAIN", "v\r\nX-Injected: 1\nINJECTED=1"),
    ("export INJECTED", "v"),
    ("Q\"\nINJECTED=\"1", "v"),
])
def test_a_name_or_value_cannot_inject_a_header_or_a_variable_into_the_dotenv_export(
        client: FlaskClient, name: str, value: str) -> None:
    task_id = create(client, env=[{"name": name, "value": value}])

    response = client.get(f"{TASKS}/{task_id}/env?format=dotenv")

    assert response.status_code == 200 and response.mimetype == "text/plain"
    assert "X-Injected" not in response.headers
    entries, problems = envfile.parse(response.get_data(as_text=True))
    assert not problems
    assert "INJECTED" not in {e["name"] for e in entries}
    assert all(e["name"] == name and e["value"] == value for e in entries)


# --- cancel, PATCH with apply, rerun, If-Match ---------------------------------------------

@pytest.mark.usefixtures("projects")
def test_cancelling_changing_or_rerunning_someone_elses_task_is_404_and_changes_nothing(
        users: Users, redis_client: fakeredis.FakeRedis, enqueued: EnqueueSpy) -> None:
    task_id = create(users["alice"], env=[{"name": "TOKEN", "value": SECRET, "secret": True}])
    before, sent = task_keys(redis_client), list(enqueued.calls)

    for who, status in (("eve", 404), ("bob", 404), ("dave", 404),
                        ("carol", 403)):  # carol maintains vision: reads, not changes
        attempts = [
            users[who].post(f"{TASKS}/{task_id}/cancel"),
            users[who].patch(f"{TASKS}/{task_id}/env", json={
                "set": [{"name": "X", "value": "1"}], "apply": "restart"}),
            users[who].patch(f"{TASKS}/{task_id}/env", json={
                "set": [{"name": "X", "value": "1"}], "apply": "next-run"}),
            users[who].post(f"{TASKS}/{task_id}/rerun", json={"revision": 1, "pin": True}),
            users[who].post(f"{TASKS}/{task_id}/cancel", headers={"If-Match": '"1"'}),
        ]
        for response in attempts:
            assert_error(response, status)
            assert_hidden(response, SECRET, "alice")
    assert task_keys(redis_client) == before and enqueued.calls == sent


@pytest.mark.parametrize("garbage", ["abc", '"-1"', "W/", '"1", "2"', "1" * 40, "²", "١",
                                     "0x1", " ", '"', "1.0"])
def test_if_match_with_garbage_is_a_400_and_changes_nothing(
        client: FlaskClient, redis_client: fakeredis.FakeRedis, garbage: str) -> None:
    task_id = create(client)
    before = task_keys(redis_client)
    headers = {"If-Match": garbage.encode("latin-1", "replace").decode("latin-1")} \
        if garbage not in ("١",) else {"If-Match": garbage}

    attempts = [
        lambda: client.post(f"{TASKS}/{task_id}/cancel", headers=headers),
        lambda: client.post(f"{TASKS}/{task_id}/rerun", json={}, headers=headers),
        lambda: client.patch(f"{TASKS}/{task_id}/env", headers=headers,
                             json={"set": [{"name": "X", "value": "1"}]}),
    ]
    for attempt in attempts:
        try:
            response = attempt()
        except UnicodeEncodeError:
            continue  # a header the client itself cannot send never reaches the API
        assert response.status_code in (400, 412), response.get_data(as_text=True)
    assert task_keys(redis_client) == before


@pytest.mark.parametrize("revision", [0, -1, 2, 10**30, "1", 1.5, True])
def test_rerun_of_a_revision_out_of_range_or_of_the_wrong_type_is_refused(
        client: FlaskClient, redis_client: fakeredis.FakeRedis, revision: Any) -> None:
    task_id = create(client)
    before = task_keys(redis_client)

    response = client.post(f"{TASKS}/{task_id}/rerun", json={"revision": revision})

    assert response.status_code in (404, 422), response.get_data(as_text=True)
    assert task_keys(redis_client) == before


def test_a_pinned_rerun_of_a_revision_with_a_secret_keeps_it_sealed_and_unseen(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore,
        redis_client: fakeredis.FakeRedis) -> None:
    policies.put(Policy(defaults=(EnvVar("HUB_TOKEN", DEFAULT_SECRET, secret=True),)))
    task_id = create(client, env=[{"name": "TOKEN", "value": SECRET, "secret": True}])
    resolve(tasks, policies, task_id)
    finish(tasks, task_id)

    response = client.post(f"{TASKS}/{task_id}/rerun", json={"revision": 1, "pin": True})

    assert response.status_code == 202
    resolve(tasks, policies, task_id)
    values = {v["name"]: v for v in tasks.get(task_id)["resolved"]}
    assert values["TOKEN"]["value"] == SECRET and values["TOKEN"]["secret"]
    assert values["HUB_TOKEN"]["secret"]
    for path in ("", "/revisions/2", "/revisions/1/diff/2", "/env",
                 "/env?format=dotenv&resolved=true", "/manifest"):
        assert_hidden(client.get(f"{TASKS}/{task_id}{path}"), SECRET, DEFAULT_SECRET)
    stored = json.dumps(snapshot(redis_client))
    assert SECRET not in stored and DEFAULT_SECRET not in stored


@pytest.mark.usefixtures("projects")
def test_a_pinned_rerun_takes_the_value_a_project_now_protects(
        client: FlaskClient, users: Users, tasks: TaskStore, policies: PolicyStore) -> None:
    vision = "/api/v1/projects/vision/policy"
    assert client.put(vision, json={"defaults": [{"name": "REGION", "value": "eu"}],
                                    "protected": []}).status_code == 200
    task_id = create(users["alice"])
    resolve(tasks, policies, task_id)
    finish(tasks, task_id)
    assert client.put(vision, json={"defaults": [], "protected": [
        {"name": "REGION", "value": "us", "reason": "data residency"}]}).status_code == 200

    response = users["alice"].post(f"{TASKS}/{task_id}/rerun", json={"revision": 1,
                                                                       "pin": True})

    assert response.status_code == 202
    revision = tasks.get(task_id)["revision"]
    assert stages.validate(tasks, Limits(), task_id, revision)
    stages.apply_policy(tasks, policies, task_id, revision)
    doc = tasks.get(task_id)
    assert doc["state"] == states.RESOLVED, doc["errors"]
    assert {v["name"]: v["value"] for v in doc["resolved"]}["REGION"] == "us"


# --- env_file ------------------------------------------------------------------------------

def test_a_4_mb_env_file_is_refused_before_anything_is_stored(
        client: FlaskClient, redis_client: fakeredis.FakeRedis, enqueued: EnqueueSpy) -> None:
    text = "A=" + "x" * (4 * 1024 * 1024) + "\n"

    response = client.post(TASKS, json={"name": "t", "steps": [["true"]], "env_file": text})

    assert response.status_code in (413, 422)
    assert len(response.get_data()) < 10_000
    assert task_keys(redis_client) == {} and enqueued.calls == []


def test_an_env_file_of_120000_lines_is_refused_with_a_capped_error_list(
        client: FlaskClient, redis_client: fakeredis.FakeRedis, enqueued: EnqueueSpy) -> None:
    text = "".join(f"V{n}=1\n" for n in range(120_000))

    response = client.post(TASKS, json={"name": "t", "steps": [["true"]], "env_file": text})

    assert_error(response, 422)
    assert len(response.get_json()["errors"]) <= 101
    assert len(response.get_data()) < 50_000
    assert task_keys(redis_client) == {} and enqueued.calls == []


@pytest.mark.slow
def test_an_env_file_of_120000_duplicates_is_refused_with_a_capped_error_list(
        client: FlaskClient, redis_client: fakeredis.FakeRedis) -> None:
    text = "A=1\n" * 120_000

    response = client.post(TASKS, json={"name": "t", "steps": [["true"]], "env_file": text})

    assert_error(response, 422)
    assert len(response.get_json()["errors"]) <= 101
    assert task_keys(redis_client) == {}


def test_a_patch_env_file_over_the_limits_stores_no_revision(
        client: FlaskClient, redis_client: fakeredis.FakeRedis) -> None:
    task_id = create(client)
    before = task_keys(redis_client)
    text = "".join(f"V{n}=1\n" for n in range(2000))

    response = client.patch(f"{TASKS}/{task_id}/env", json={"env_file": text})

    assert_error(response, 422)
    assert task_keys(redis_client) == before


@pytest.mark.parametrize("text", ["A=a\x00b\n", "A\x00B=1\n", "A=\ud800\n", "\ud800=1\n",
                                  "A='\udfff'\n"])
def test_nul_bytes_and_lone_surrogates_in_an_env_file_are_never_a_server_error(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore, text: str) -> None:
    response = client.post(TASKS, json={"name": "t", "steps": [["true"]], "env_file": text})

    assert response.status_code in (202, 422), response.get_data(as_text=True)
    if response.status_code == 202:  # stored as sent, then refused by the validation stage
        task_id = response.get_json()["id"]
        assert not stages.validate(tasks, Limits(), task_id, 1)
        assert tasks.get(task_id)["state"] == states.REJECTED
        assert client.get(f"{TASKS}/{task_id}/env?format=dotenv").status_code == 200


@pytest.mark.parametrize("text,expected", [
    ("export A=1\n", {"A": "1"}),
    ("export  A=$(id)\n", {"A": "$(id)"}),
    ("A=`id`\nB=${HOME}\n", {"A": "`id`", "B": "${HOME}"}),
    ("A=\"x\ny\"\n", {"A": "x\ny"}),
])
def test_export_and_expansion_tricks_in_an_env_file_are_read_as_plain_data(
        client: FlaskClient, tasks: TaskStore, text: str, expected: dict[str, str]) -> None:
    task_id = create(client, env_file=text)

    assert {e["name"]: e["value"] for e in tasks.get(task_id)["env"]} == expected


def test_duplicate_names_in_an_env_file_or_with_env_are_refused_naming_the_lines(
        client: FlaskClient, redis_client: fakeredis.FakeRedis) -> None:
    body = {"name": "t", "steps": [["true"]]}
    twice = client.post(TASKS, json={**body, "env_file": "A=1\nexport A=2\n"})
    both = client.post(TASKS, json={**body, "env_file": "A=1\n",
                                    "env": [{"name": "A", "value": "2"}]})

    assert_error(twice, 422)
    assert "line 2" in twice.get_json()["errors"][0]["message"]
    assert_error(both, 422)
    assert task_keys(redis_client) == {}


# --- projects, their policies and impact ---------------------------------------------------

@pytest.mark.usefixtures("projects")
def test_a_plain_user_cannot_manage_projects(
        users: Users, redis_client: fakeredis.FakeRedis) -> None:
    before = snapshot(redis_client)
    eve, alice = users["eve"], users["alice"]

    for response in (eve.post("/api/v1/projects", json={"name": "mine", "members": ["eve"]}),
                     eve.get("/api/v1/projects/vision"),
                     alice.get("/api/v1/projects/vision"),
                     alice.patch("/api/v1/projects/vision", json={"maintainers": ["alice"]}),
                     eve.patch("/api/v1/projects/vision", json={"members": ["eve"]}),
                     eve.delete("/api/v1/projects/vision")):
        assert_error(response, 403)
        assert_hidden(response, "carol")
    assert eve.get("/api/v1/projects").get_json()["items"] == []
    after = snapshot(redis_client)
    assert {k: v for k, v in after.items() if "authfail" not in k and "audit" not in k} == \
        {k: v for k, v in before.items() if "authfail" not in k and "audit" not in k}


@pytest.mark.usefixtures("projects")
def test_a_maintainer_of_one_project_cannot_read_or_write_anothers_policy(
        client: FlaskClient, users: Users, redis_client: fakeredis.FakeRedis) -> None:
    speech = "/api/v1/projects/speech/policy"
    saved = client.put(speech, json={"defaults": [
        {"name": "HUB_TOKEN", "value": DEFAULT_SECRET, "secret": True},
        {"name": "SPEECH_ONLY", "value": "speech-default"}], "protected": []})
    assert saved.status_code == 200
    before = snapshot(redis_client)
    carol = users["carol"]  # maintains vision

    for response in (carol.get(speech), carol.get(f"{speech}/versions"),
                     carol.get(f"{speech}/versions/1"),
                     carol.put(speech, json={"defaults": [], "protected": []}),
                     carol.post(f"{speech}/impact", json={"defaults": [], "protected": []})):
        assert_no_such_project(response, "speech")
        assert_hidden(response, DEFAULT_SECRET, "speech-default", "SPEECH_ONLY")
    assert client.get(f"{speech}/versions").get_json()["current"] == 1
    assert {k: v for k, v in snapshot(redis_client).items() if "audit" not in k} == \
        {k: v for k, v in before.items() if "audit" not in k}


@pytest.mark.usefixtures("projects")
def test_a_maintainer_reads_its_own_policy_with_secret_defaults_masked(
        client: FlaskClient, users: Users) -> None:
    vision = "/api/v1/projects/vision/policy"
    saved = client.put(vision, json={
        "defaults": [{"name": "HUB_TOKEN", "value": DEFAULT_SECRET, "secret": True}],
        "protected": [{"name": "DB_PASS", "value": SECRET, "secret": True, "reason": "ops"}]})
    assert_hidden(saved, DEFAULT_SECRET, SECRET)

    for path in (vision, f"{vision}/versions/1"):
        response = users["carol"].get(path)
        assert response.status_code == 200
        assert_hidden(response, DEFAULT_SECRET, SECRET)


@pytest.mark.usefixtures("projects")
def test_plain_users_and_maintainers_cannot_ask_the_platform_drafts_impact(
        users: Users) -> None:
    draft = {"defaults": [{"name": "X", "value": "1"}], "protected": []}

    for who in ("eve", "alice", "carol"):
        response = users[who].post("/api/v1/policy/impact", json=draft)
        assert_error(response, 403)
    assert_error(users["alice"].post("/api/v1/projects/vision/policy/impact", json=draft),
                 403)  # a member, not a maintainer
    for who in ("eve", "bob"):
        response = users[who].post("/api/v1/projects/vision/policy/impact", json=draft)
        assert_no_such_project(response, "vision")


@pytest.mark.usefixtures("projects")
def test_a_project_impact_counts_only_its_tasks_and_never_shows_a_secret(
        client: FlaskClient, users: Users, tasks: TaskStore, policies: PolicyStore) -> None:
    vision = "/api/v1/projects/vision/policy"
    assert client.put(vision, json={"defaults": [
        {"name": "HUB_TOKEN", "value": DEFAULT_SECRET, "secret": True}],
        "protected": []}).status_code == 200
    mine = create(users["alice"], env=[{"name": "TOKEN", "value": SECRET, "secret": True},
                                       {"name": "MODE", "value": "fast"}])
    theirs = create(users["bob"], env=[{"name": "MODE", "value": "bob-private-mode"}])
    for task_id in (mine, theirs):
        resolve(tasks, policies, task_id)
    draft = {"defaults": [{"name": "HUB_TOKEN", "value": DEFAULT_SECRET + "2", "secret": True}],
             "protected": [], "rules": [
                 {"name": "TOKEN", "pattern": "x+", "description": "x only"},
                 {"name": "MODE", "allowed": ["slow"]}]}

    response = users["carol"].post(f"{vision}/impact", json=draft)

    assert response.status_code == 200
    assert_hidden(response, SECRET, DEFAULT_SECRET, "bob-private-mode", theirs, "bob")
    found = response.get_json()
    assert found["considered"] == 1
    assert client.get(f"{vision}/versions").get_json()["current"] == 1


@pytest.mark.usefixtures("projects")
def test_creating_a_task_in_a_project_one_is_not_a_member_of_is_refused_and_stores_nothing(
        users: Users, redis_client: fakeredis.FakeRedis, enqueued: EnqueueSpy) -> None:
    for who, project in (("eve", "vision"), ("bob", "vision"), ("dave", "vision"),
                         ("alice", "speech"), ("alice", "nowhere")):
        response = users[who].post(TASKS, json={"name": "t", "steps": [["true"]],
                                                "project": project})
        assert_no_such_project(response, project)
    assert task_keys(redis_client) == {} and enqueued.calls == []


@pytest.mark.usefixtures("projects")
@pytest.mark.parametrize("name", ["..", "vision:policy:current", "vision:policy:v:1",
                                  "vision:policy:seq", "..%2Fspeech", "VISION", "vision%00",
                                  "a" * 300, "*", "vision ", "%2E%2E"])
def test_a_project_name_with_path_or_key_tricks_is_404_or_400_never_a_server_error(
        client: FlaskClient, users: Users, name: str) -> None:
    assert client.put("/api/v1/projects/vision/policy", json={
        "defaults": [{"name": "X", "value": "1"}], "protected": []}).status_code == 200
    policy = {"defaults": [], "protected": []}

    for who in (client, users["carol"], users["alice"]):
        for response in (who.get(f"/api/v1/projects/{name}"),
                         who.get(f"/api/v1/projects/{name}/policy"),
                         who.get(f"/api/v1/projects/{name}/policy/versions"),
                         who.put(f"/api/v1/projects/{name}/policy", json=policy),
                         who.post(f"/api/v1/projects/{name}/policy/impact", json=policy),
                         who.patch(f"/api/v1/projects/{name}", json={"members": []}),
                         who.delete(f"/api/v1/projects/{name}"),
                         who.post(TASKS, json={"name": "t", "steps": [["true"]],
                                               "project": name[:63]})):
            assert response.status_code in (400, 403, 404, 405, 422), (
                name, response.request.path, response.get_data(as_text=True)[:300])
    assert client.get("/api/v1/projects/vision/policy").get_json()["version"] == 1


# --- preview -------------------------------------------------------------------------------

@pytest.mark.usefixtures("projects")
def test_previewing_another_projects_policy_is_refused_and_shows_nothing(
        client: FlaskClient, users: Users) -> None:
    assert client.put("/api/v1/projects/speech/policy", json={"defaults": [
        {"name": "HUB_TOKEN", "value": DEFAULT_SECRET, "secret": True},
        {"name": "SPEECH_ONLY", "value": "speech-default"}], "protected": []}).status_code == 200

    for who in ("eve", "alice", "carol"):
        response = users[who].post("/api/v1/env/preview", json={
            "env": [], "project": "speech", "resources": {"gpus": 1}, "image": "x"})
        assert_no_such_project(response, "speech")
        assert_hidden(response, DEFAULT_SECRET, "speech-default", "SPEECH_ONLY")


@pytest.mark.usefixtures("projects")
def test_previewing_ones_own_project_masks_its_secret_defaults_even_when_overridden(
        client: FlaskClient, users: Users) -> None:
    assert client.put("/api/v1/projects/vision/policy", json={"defaults": [
        {"name": "HUB_TOKEN", "value": DEFAULT_SECRET, "secret": True},
        {"name": "GPU_TOKEN", "value": SECRET, "secret": True, "when": {"gpus": ">=1"}},
        {"name": "VISION_ONLY", "value": "vision-default"}], "protected": []}).status_code == 200

    for gpus in (0, 1):
        response = users["alice"].post("/api/v1/env/preview", json={
            "env": [{"name": "HUB_TOKEN", "value": "mine"}], "project": "vision",
            "resources": {"gpus": gpus}})
        assert response.status_code == 200
        assert_hidden(response, DEFAULT_SECRET, SECRET)
        assert "vision-default" in response.get_data(as_text=True)  # not secret: shown


def test_preview_against_an_old_platform_version_masks_its_secrets(
        users: Users, policies: PolicyStore) -> None:
    policies.put(Policy(defaults=(EnvVar("HUB_TOKEN", DEFAULT_SECRET, secret=True),)))
    policies.put(Policy())

    response = users["eve"].post("/api/v1/env/preview", json={"env": [], "policy_version": 1})

    assert response.status_code == 200
    assert_hidden(response, DEFAULT_SECRET)


# --- /metrics and /readyz -------------------------------------------------------------------

@pytest.mark.usefixtures("projects")
def test_metrics_and_readyz_without_a_token_name_no_task_owner_variable_or_secret(
        app: Flask, users: Users, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = create(users["alice"], name="secret-project-name",
                     env=[{"name": "VERY_PRIVATE_NAME", "value": SECRET, "secret": True}])
    resolve(tasks, policies, task_id)
    anonymous = app.test_client()
    anonymous.get(f"{TASKS}/{task_id}")
    anonymous.open("/api/v1/tasks", method="ALICESECRETMETHOD")

    for path in ("/metrics", "/readyz", "/healthz"):
        response = anonymous.get(path)
        assert response.status_code in (200, 503)
        assert_hidden(response, task_id, "alice", "VERY_PRIVATE_NAME", SECRET,
                      "secret-project-name", "ALICESECRETMETHOD")


# --- the console ---------------------------------------------------------------------------



def test_the_cancel_form_without_its_csrf_token_cancels_nothing(
        client: FlaskClient, browser: Callable[..., Browser],
        redis_client: fakeredis.FakeRedis) -> None:
    task_id = create(client)
    admin = browser()
    before = task_keys(redis_client)

    for data in ({}, {"csrf": "forged"}, {"csrf": ""}):
        response = admin.post(f"/ui/tasks/{task_id}/cancel", data, csrf=False)
        assert response.status_code == 400
    assert task_keys(redis_client) == before


def test_console_pages_of_someone_elses_task_are_404_and_change_nothing(
        client: FlaskClient, browser: Callable[..., Browser], tasks: TaskStore,
        policies: PolicyStore, redis_client: fakeredis.FakeRedis) -> None:
    task_id = secret_then_plain(client, tasks, policies)
    eve = browser("eve")
    before = task_keys(redis_client)

    for path in (f"/ui/tasks/{task_id}", f"/ui/tasks/{task_id}/diff?from=1&to=2"):
        response = eve.get(path)
        assert response.status_code == 404
        assert_hidden(response, SECRET, "plain-now")
    for action in ("cancel", "rerun", "env"):
        response = eve.post(f"/ui/tasks/{task_id}/{action}", {"new_name_0": "X",
                                                               "new_value_0": "1"})
        assert response.status_code == 404
    assert task_keys(redis_client) == before


def test_the_diff_page_shows_a_secret_only_as_changed(
        client: FlaskClient, browser: Callable[..., Browser], tasks: TaskStore,
        policies: PolicyStore) -> None:
    task_id = secret_then_plain(client, tasks, policies)
    admin = browser()

    for query in ("from=1&to=2", "from=2&to=1", "from=1&to=2&of=env", "from=-5&to=99",
                  "from=abc&to=1", "from=1&to=99999999999999999999999"):
        response = admin.get(f"/ui/tasks/{task_id}/diff?{query}")
        assert response.status_code in (200, 400), query
        assert_hidden(response, SECRET)


@pytest.mark.usefixtures("projects")
def test_the_projects_pages_refuse_plain_users_and_other_maintainers(
        client: FlaskClient, browser: Callable[..., Browser],
        redis_client: fakeredis.FakeRedis) -> None:
    assert client.put("/api/v1/projects/speech/policy", json={"defaults": [
        {"name": "HUB_TOKEN", "value": DEFAULT_SECRET, "secret": True}],
        "protected": []}).status_code == 200
    before = {k: v for k, v in snapshot(redis_client).items() if ":project" in k}
    eve, carol = browser("eve"), browser("carol")

    for who in (eve, carol):
        assert who.post("/ui/projects", {"name": "mine", "members": "eve"}).status_code == 403
        assert who.post("/ui/projects/speech", {"delete": "1"}).status_code == 403
        assert who.post("/ui/projects/vision", {"members": "eve",
                                                "maintainers": "eve"}).status_code == 403
        page = who.get("/ui/projects/speech/policy")
        assert page.status_code == 404  # neither belongs to speech: no such project for them
        assert_hidden(page, DEFAULT_SECRET, "HUB_TOKEN")
        assert who.get("/ui/policy").status_code == 403
    assert {k: v for k, v in snapshot(redis_client).items() if ":project" in k} == before


def test_a_session_id_planted_before_login_does_not_survive_it(app: Flask) -> None:
    victim = Browser(app.test_client())
    victim.get("/ui/login")  # an anonymous session (its CSRF token) exists now
    planted = victim.client.get_cookie("taskenv_session")
    assert planted is not None

    assert victim.login(ADMIN_TOKEN).status_code == 302

    after = victim.client.get_cookie("taskenv_session")
    assert after is not None and after.value != planted.value
    attacker = app.test_client()
    attacker.set_cookie("taskenv_session", planted.value)
    response = attacker.get("/ui/tasks")
    assert response.status_code == 302 and "/ui/login" in response.location


def test_the_session_cookie_is_httponly_samesite_and_secure_when_configured(
        redis_client: fakeredis.FakeRedis, enqueued: EnqueueSpy) -> None:
    from tests.api.conftest import build_app

    for secure in (0, 1):
        app = build_app(redis_client, enqueued, session_cookie_secure=secure)
        browser = Browser(app.test_client())
        page = browser.client.get("/ui/login")
        token = CSRF.search(page.text)
        assert token
        response = browser.client.post("/ui/login", data={"token": ADMIN_TOKEN,
                                                          "csrf": token.group(1)})
        cookie = next(v for k, v in response.headers.items() if k == "Set-Cookie"
                      and v.startswith("taskenv_session="))
        assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
        assert ("Secure" in cookie) == bool(secure)
        assert ADMIN_TOKEN not in exposed(response)


def test_the_live_endpoints_need_a_session_and_hide_someone_elses_task(
        app: Flask, client: FlaskClient, browser: Callable[..., Browser], tasks: TaskStore,
        policies: PolicyStore) -> None:
    task_id = secret_then_plain(client, tasks, policies)
    tasks.append_log(task_id, 2, "admin's output\n")
    anonymous, eve = app.test_client(), browser("eve")

    for path in (f"/ui/tasks/{task_id}/live", "/ui/tasks/live"):
        response = anonymous.get(path)
        assert response.status_code == 302 and "/ui/login" in response.location
    for query in ("", "?log_revision=1", "?offset=-5", "?log_revision=99999999999999999"):
        response = eve.get(f"/ui/tasks/{task_id}/live{query}")
        assert response.status_code == 404
        assert_hidden(response, "admin's output", SECRET)
    listed = eve.get("/ui/tasks/live")
    assert listed.status_code == 200 and task_id not in listed.get_data(as_text=True)


@pytest.mark.usefixtures("projects")
def test_the_console_preview_needs_its_csrf_token_and_masks_another_projects_secrets(
        client: FlaskClient, browser: Callable[..., Browser], tasks: TaskStore,
        policies: PolicyStore, redis_client: fakeredis.FakeRedis) -> None:
    assert client.put("/api/v1/projects/speech/policy", json={"defaults": [
        {"name": "HUB_TOKEN", "value": DEFAULT_SECRET, "secret": True}],
        "protected": []}).status_code == 200
    task_id = secret_then_plain(client, tasks, policies)
    eve = browser("eve")
    before = task_keys(redis_client)
    form = {"env_name_0": "A", "env_value_0": "1", "project": "speech"}

    assert eve.post("/ui/preview", form, csrf=False).status_code == 400
    refused = eve.post("/ui/preview", form)
    assert refused.status_code in (200, 403, 404)
    assert_hidden(refused, DEFAULT_SECRET)
    assert refused.status_code != 200 or refused.get_json()["ok"] is False
    other = eve.post(f"/ui/tasks/{task_id}/preview", {"new_name_0": "B", "new_value_0": "1"})
    assert other.status_code == 404
    assert_hidden(other, SECRET, "plain-now")
    assert task_keys(redis_client) == before
