"""Quotas and limits at the API: what one user sends cannot grow what everyone shares.

Each amplification a review found is a test here: creations past the rate, a
record grown by many PATCHes, huge rejected PATCHes, a list of 120,000 duplicate
names, a listing of the largest summaries; and short secrets are refused.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from flask import Flask
from flask.testing import FlaskClient

from shared.config import Settings
from shared.env.envlist import MAX_PROBLEMS
from shared.store.tasks import TaskStore
from shared.task import states
from tests.api.conftest import EnqueueSpy, build_app, client_with

TASKS = "/api/v1/tasks"
POLICY = "/api/v1/policy"
# What README "Limits and quotas" promises of a task's own hash, whatever its history.
TASK_HASH_BOUND = 80 * 1024
# ... and of one page of a listing (500 summaries at most, each bounded).
LISTING_BOUND = 2 * 1024 * 1024
WINDOW_START = 60.0 * 1_000_000  # a clock pinned at the start of a minute


def body(**changes: Any) -> dict[str, Any]:
    return {"name": "resnet", "steps": [["python3", "train.py"]],
            "env": [{"name": "LEARNING_RATE", "value": "0.01"}], **changes}


@pytest.fixture
def app_with(redis_client: fakeredis.FakeRedis,
             enqueued: EnqueueSpy) -> Callable[..., Flask]:
    """An app with these settings and its quota clock pinned inside one minute."""

    def make(**overrides: Any) -> Flask:
        app = build_app(redis_client, enqueued, **overrides)
        app.extensions["taskenv"].quotas.clock = lambda: WINDOW_START + 1
        return app

    return make


def user(app: Flask, owner: str) -> FlaskClient:
    token, _ = app.extensions["taskenv"].tokens.create(owner, "user", "tests")
    return client_with(app, token)


def stored_bytes(r: fakeredis.FakeRedis) -> int:
    """Everything taskenv keeps in Redis, serialized."""
    return sum(len(r.dump(k) or b"") for k in r.scan_iter("taskenv:*"))


def hash_bytes(r: fakeredis.FakeRedis, key: str) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in r.hgetall(key).items())


def rules(response: Any) -> list[tuple[str, Any]]:
    return [(p["rule"], p.get("limit")) for p in response.get_json()["errors"]]


# --- creations -----------------------------------------------------------------------------

# The attacks replayed at their real sizes are scale tests (hundreds of requests, tens of
# MiB): make test runs them, make check leaves them out.  The inner loop keeps each quota
# at the API with small numbers (tests/api/test_replicas_api.py, tests/test_claims.py)
# and in the stores (tests/shared/access/test_quotas.py, tests/shared/store/).
SCALE = pytest.mark.slow


@SCALE  # 301 creations
def test_the_creation_past_the_default_rate_gets_429_with_retry_after(
        app_with: Callable[..., Flask]) -> None:
    app = app_with()
    ann = user(app, "ann")
    per_minute = Settings().quota_creates_per_minute
    for _ in range(per_minute):
        assert ann.post(TASKS, json=body()).status_code == 202
    refused = ann.post(TASKS, json=body())
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "59"
    assert refused.get_json()["code"] == "too_many_requests"
    assert rules(refused) == [("quota.creates_per_minute", per_minute)]
    assert user(app, "bob").post(TASKS, json=body()).status_code == 202  # not bob's budget


def test_tasks_not_yet_finished_are_limited_per_user_with_409(
        app_with: Callable[..., Flask]) -> None:
    app = app_with(quota_unfinished_tasks=2)
    ann = user(app, "ann")
    first = ann.post(TASKS, json=body()).get_json()["id"]
    assert ann.post(TASKS, json=body()).status_code == 202
    refused = ann.post(TASKS, json=body())
    assert refused.status_code == 409
    assert refused.get_json()["code"] == "quota_exceeded"
    assert rules(refused) == [("quota.unfinished_tasks", 2)]
    tasks: TaskStore = app.extensions["taskenv"].tasks
    assert tasks.transition(first, 1, states.PENDING, states.REJECTED) is not None
    assert ann.post(TASKS, json=body()).status_code == 202  # one finished: room for one


# --- revisions -----------------------------------------------------------------------------

@SCALE  # 200 PATCHes
def test_200_patches_leave_the_task_hash_bounded_and_the_next_revision_is_refused(
        app_with: Callable[..., Flask], redis_client: fakeredis.FakeRedis) -> None:
    app = app_with(quota_revisions_per_task=201)
    ann = user(app, "ann")
    task_id = ann.post(TASKS, json=body()).get_json()["id"]
    tasks: TaskStore = app.extensions["taskenv"].tasks
    first_task = hash_bytes(redis_client, tasks.keys.task(task_id))
    first_revision = hash_bytes(redis_client, tasks.keys.revision(task_id, 1))
    for n in range(200):
        patch = {"set": [{"name": "STEP", "value": str(n)}]}
        assert ann.patch(f"{TASKS}/{task_id}/env", json=patch).status_code == 202
    assert tasks.get(task_id)["revision"] == 201
    task_size = hash_bytes(redis_client, tasks.keys.task(task_id))
    assert task_size < TASK_HASH_BOUND
    assert task_size < first_task + 64  # a few more digits, nothing per revision
    assert hash_bytes(redis_client, tasks.keys.revision(task_id, 201)) < 2 * first_revision

    refused = ann.patch(f"{TASKS}/{task_id}/env", json={"set": [{"name": "X", "value": "1"}]})
    assert refused.status_code == 409
    assert rules(refused) == [("quota.revisions_per_task", 201)]
    assert ann.post(f"{TASKS}/{task_id}/rerun").status_code == 409
    assert tasks.get(task_id)["revision"] == 201


# --- sizes, checked before anything is stored ----------------------------------------------

def test_rejected_huge_patches_store_nothing(app_with: Callable[..., Flask],
                                             redis_client: fakeredis.FakeRedis) -> None:
    app = app_with()
    ann = user(app, "ann")
    task_id = ann.post(TASKS, json=body()).get_json()["id"]
    before = stored_bytes(redis_client)
    huge = {"set": [{"name": "BLOB", "value": "x" * 3_900_000}]}
    for _ in range(8):
        refused = ann.patch(f"{TASKS}/{task_id}/env", json=huge)
        assert refused.status_code == 422
        problems = refused.get_json()["errors"]
        assert {(p["rule"], p.get("variable"), p.get("limit")) for p in problems} == {
            ("value.max_bytes", "BLOB", 128 * 1024), ("env.max_bytes", None, 1024 * 1024)}
    assert stored_bytes(redis_client) == before
    assert app.extensions["taskenv"].tasks.get(task_id)["revision"] == 1


@pytest.mark.slow
def test_a_create_with_120000_duplicate_names_stores_nothing_and_answers_briefly(
        app_with: Callable[..., Flask], redis_client: fakeredis.FakeRedis) -> None:
    ann = user(app_with(), "ann")
    before = stored_bytes(redis_client)
    refused = ann.post(TASKS, json=body(env=[{"name": "A", "value": ""}] * 120_000))
    assert refused.status_code == 422
    found = rules(refused)  # every problem, capped: the count, then the duplicates
    assert found[0] == ("env.max_vars", 1000) and found[-1] == ("errors.truncated", 100)
    assert len(found) == 101 and len(refused.get_data()) < 32 * 1024
    assert stored_bytes(redis_client) == before


def test_an_error_list_in_a_response_is_capped_with_a_count(
        app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(), "ann")
    task_id = ann.post(TASKS, json=body()).get_json()["id"]
    refused = ann.patch(f"{TASKS}/{task_id}/env",
                        json={"unset": [f"NOT_SET_{n}" for n in range(150)]})
    assert refused.status_code == 422
    problems = refused.get_json()["errors"]
    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[-1]["rule"] == "errors.truncated"
    assert "and 50 more" in problems[-1]["message"]


def test_steps_too_large_for_a_record_are_refused(app_with: Callable[..., Flask]) -> None:
    ann = user(app_with(), "ann")
    refused = ann.post(TASKS, json=body(steps=[["echo", "x" * 70_000]]))
    assert refused.status_code == 422
    assert "at most 65536" in json.dumps(refused.get_json())


def test_a_listing_page_of_the_largest_summaries_stays_bounded(
        app_with: Callable[..., Flask]) -> None:
    app = app_with()
    tasks: TaskStore = app.extensions["taskenv"].tasks
    widest = "\U0001f600" * 200  # the longest name, each character escaped in JSON
    tasks.load_many({"name": widest, "owner": "o" * 100, "project": "p" * 63,
                     "state": states.PENDING, "revision": 1, "steps": [["true"]], "env": [],
                     "created_at": 1.0, "updated_at": 1.0} for _ in range(600))
    admin = client_with(app, app.extensions["taskenv"].tokens.create("root", "admin",
                                                                      "tests")[0])
    page = admin.get(f"{TASKS}?limit=500")
    assert page.status_code == 200 and len(page.get_json()["items"]) == 500
    assert len(page.get_data()) < LISTING_BOUND


# --- secrets long enough to hide -----------------------------------------------------------

def test_a_three_character_secret_is_refused_with_a_clear_error_and_not_stored(
        app_with: Callable[..., Flask], redis_client: fakeredis.FakeRedis) -> None:
    ann = user(app_with(), "ann")
    before = stored_bytes(redis_client)
    refused = ann.post(TASKS, json=body(env=[{"name": "HF_TOKEN", "value": "abc",
                                              "secret": True}]))
    assert refused.status_code == 422
    [problem] = refused.get_json()["errors"]
    assert (problem["rule"], problem["variable"], problem["limit"]) == (
        "secret.too_short", "HF_TOKEN", 8)
    assert "at least 8 characters" in problem["message"]
    assert stored_bytes(redis_client) == before


def test_a_policy_secret_default_shorter_than_eight_is_refused(
        app_with: Callable[..., Flask]) -> None:
    app = app_with()
    admin = client_with(app, app.extensions["taskenv"].tokens.create("root", "admin",
                                                                      "tests")[0])
    refused = admin.put(POLICY, json={"defaults": [
        {"name": "DB_PASSWORD", "value": "pw", "secret": True}], "protected": []})
    assert refused.status_code == 422
    assert rules(refused) == [("secret.too_short", 8)]


# --- stored bytes ----------------------------------------------------------------------------

# Random text: repeated characters would be stored deflated, in a few bytes (base64 of
# random bytes: as incompressible as characters drawn one by one, and made at once).
BIG_ENV = [{"name": f"V{i}", "value": base64.b64encode(random.Random(i).randbytes(
    90 * 1024)).decode()} for i in range(8)]


@SCALE  # 41 creations of 960 KiB
def test_a_user_filling_redis_gets_409_naming_the_bytes_quota_and_others_are_untouched(
        app_with: Callable[..., Flask], redis_client: fakeredis.FakeRedis) -> None:
    """The review's attack: forty creations of 8 x 120 KiB values, then changes."""
    limit = 4 * 1024 * 1024
    app = app_with(quota_stored_bytes=limit, quota_creates_per_minute=0)
    mallory, bob = user(app, "mallory"), user(app, "bob")
    answers = [mallory.post(TASKS, json=body(env=BIG_ENV)) for _ in range(40)]
    accepted = [a for a in answers if a.status_code == 202]
    refused = [a for a in answers if a.status_code == 409]
    assert len(accepted) == 4 and len(refused) == 36
    assert rules(refused[0]) == [("quota.stored_bytes", limit)]
    assert "mallory" in refused[0].get_json()["message"]
    tasks: TaskStore = app.extensions["taskenv"].tasks
    assert tasks.stored_bytes("mallory") == tasks.recount_bytes("mallory") <= limit
    # A change that would pass the limit is refused the same way, and writes nothing.
    first = accepted[0].get_json()["id"]
    tasks.move(first, 1, states.PENDING, states.CANCELLED)
    grown = mallory.patch(f"{TASKS}/{first}/env", json={"set": [
        {"name": f"V{i}", "value": BIG_ENV[i]["value"][::-1]} for i in range(3)]})
    assert grown.status_code == 409 and rules(grown) == [("quota.stored_bytes", limit)]
    assert tasks.get(first)["revision"] == 1
    # Another user's quota is their own.
    assert bob.post(TASKS, json=body(env=BIG_ENV)).status_code == 202
