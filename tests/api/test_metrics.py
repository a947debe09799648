"""``/metrics``, request ids and the API's log lines, on fakeredis.

Samples are read with prometheus-client's own parser, never by searching the text.
The process-wide registry outlives each test, so tests compare before and after.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from api.metrics import REQUEST_ID_HEADER
from shared import logs, metrics
from shared.keys import Keys
from tests.api.conftest import ADMIN_TOKEN
from workers import stages


def samples(client: FlaskClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return samples_of(client.get("/metrics"))


def samples_of(resp: Any) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    assert resp.status_code == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(resp.get_data(as_text=True))
            for s in family.samples}


def value(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    return scraped.get((name, frozenset(labels.items())), 0.0)


def test_metrics_needs_no_token(app: Flask) -> None:
    assert app.test_client().get("/metrics").status_code == 200


def test_requests_are_counted_by_route_and_status_with_their_latency(client: FlaskClient) -> None:
    before = samples(client)
    assert client.get("/api/v1/tasks").status_code == 200
    missing_id = uuid.uuid4().hex
    assert client.get(f"/api/v1/tasks/{missing_id}").status_code == 404
    after = samples(client)

    ok = {"route": "tasks.Tasks", "method": "GET", "status": "200"}
    gone = {"route": "tasks.Task", "method": "GET", "status": "404"}
    for labels in (ok, gone):
        assert (value(after, "taskenv_http_requests_total", **labels)
                - value(before, "taskenv_http_requests_total", **labels)) == 1
    timed = {"route": "tasks.Tasks", "method": "GET"}
    assert (value(after, "taskenv_http_request_duration_seconds_count", **timed)
            - value(before, "taskenv_http_request_duration_seconds_count", **timed)) == 1
    assert value(after, "taskenv_http_request_duration_seconds_bucket", le="+Inf", **timed) >= 1
    # The route is the endpoint: a path with an id in it never becomes a label.
    assert not any(missing_id in v for _, labels in after for _, v in labels)


def test_a_path_no_route_serves_is_one_label(client: FlaskClient) -> None:
    before = samples(client)
    for n in range(3):
        assert client.get(f"/no/such/path/{n}").status_code == 404
    after = samples(client)
    labels = {"route": "unmatched", "method": "GET", "status": "404"}
    assert (value(after, "taskenv_http_requests_total", **labels)
            - value(before, "taskenv_http_requests_total", **labels)) == 3


def test_tasks_entering_each_state_are_counted(app: Flask, client: FlaskClient) -> None:
    before = samples(client)
    resp = client.post("/api/v1/tasks", json={"name": "t", "steps": [["true"]],
                                              "env": [{"name": "A", "value": "1"}]})
    assert resp.status_code == 202
    services = app.extensions["taskenv"]
    assert stages.validate(services.tasks, services.limits, resp.json["id"], 1)
    after = samples(client)
    for state in ("pending", "validated"):
        # An admin's scrape (``client`` holds an admin's token): a task in no project is
        # counted under ``other``.
        assert (value(after, "taskenv_task_transitions_total", state=state, project="other")
                - value(before, "taskenv_task_transitions_total", state=state,
                        project="other")) == 1


def test_a_project_is_a_label_only_if_the_store_knows_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # What this process learnt of "vision" in earlier tests (not a project there) is kept
    # for a minute: the answer here must come from this test's store.
    monkeypatch.setattr(metrics, "_projects_known", {})
    known = {"vision"}
    assert metrics.project_label("vision", known.__contains__) == "vision"
    assert metrics.project_label(f"made-up-{uuid.uuid4().hex}", known.__contains__) == "other"
    assert metrics.project_label(None, known.__contains__) == "other"  # no project: other


def test_a_task_in_no_project_is_counted_as_other_in_an_admins_scrape(
        app: Flask, client: FlaskClient) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    before = samples_of(app.test_client().get("/metrics", headers=admin))
    resp = client.post("/api/v1/tasks", json={"name": "t", "steps": [["true"]]})
    assert resp.status_code == 202
    after = samples_of(app.test_client().get("/metrics", headers=admin))
    pending = ("taskenv_task_transitions_total", frozenset({("state", "pending"),
                                                            ("project", "other")}))
    assert after.get(pending, 0.0) - before.get(pending, 0.0) == 1
    assert not any(("project", "") in labels for _, labels in after)


# The series README "Operations" alerts on, each label set it names.
ALERTED = [("taskenv_launch_errors_total", {"reason": reason})
           for reason in ("launch_failed", "unavailable", "secrets_unavailable", "redis",
                          "unexpected")] + [
    ("taskenv_reconciler_actions_total", {"action": action})
    for action in ("requeued", "relaunched", "lost", "never_started", "finished", "expired")] + [
    ("taskenv_reconciler_passes_total", {"result": "ok"}),
    ("taskenv_reconciler_passes_total", {"result": "failed"})] + [
    ("taskenv_consumer_restarts_total", {"queue": queue})
    for queue in ("validate", "policy", "launch")]


def test_the_counters_the_docs_alert_on_are_listed_from_the_start(app: Flask) -> None:
    scraped = samples(app.test_client())
    launcher = app.extensions["taskenv"].settings.launcher
    for name, labels in ALERTED:
        if name == "taskenv_launch_errors_total":
            labels = {**labels, "launcher": launcher}
        assert (name, frozenset(labels.items())) in scraped, (name, labels)


def test_queue_depths_are_read_from_redis_when_scraped(app: Flask, client: FlaskClient) -> None:
    services = app.extensions["taskenv"]
    assert value(samples(client), "taskenv_queue_depth", queue="policy") == 0
    services.redis.rpush(Keys(services.settings.key_prefix).queue("policy"), "m1", "m2")
    scraped = samples(client)
    assert value(scraped, "taskenv_queue_depth", queue="policy") == 2
    assert value(scraped, "taskenv_queue_depth", queue="launch") == 0


def test_a_sane_request_id_is_kept_and_returned(client: FlaskClient) -> None:
    resp = client.get("/api/v1/tasks", headers={REQUEST_ID_HEADER: "req-42.a_b"})
    assert resp.headers[REQUEST_ID_HEADER] == "req-42.a_b"


def test_an_insane_or_missing_request_id_is_replaced(client: FlaskClient) -> None:
    made = set()
    for offered in ("x" * 65, "a b", "id;Set-Cookie: x", "ünï", None):
        headers = {REQUEST_ID_HEADER: offered} if offered is not None else {}
        resp = client.get("/api/v1/tasks", headers=headers)
        returned = resp.headers[REQUEST_ID_HEADER]
        assert returned != offered and len(returned) == 32 and returned.isalnum()
        made.add(returned)
    assert len(made) == 5


def test_every_api_line_carries_the_request_id(app: Flask) -> None:
    out = io.StringIO()
    handler = logs.handler("json", out)
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    try:
        resp = app.test_client().get("/api/v1/tasks", headers={
            "Authorization": f"Bearer {ADMIN_TOKEN}", REQUEST_ID_HEADER: "trace-me"})
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    assert resp.status_code == 200
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    access = [line for line in lines if line["logger"] == "taskenv.api.access"]
    assert access and all(line["request_id"] == "trace-me" for line in access)
    assert access[-1]["message"].startswith("GET tasks.Tasks 200 ")


def test_an_anonymous_scrape_names_no_project_an_admins_does(
        app: Flask, client: FlaskClient) -> None:
    """Project names are tenants' names: a scrape anyone who reaches the port can make
    shows the transitions summed over projects; an admin's token shows them split."""
    made = client.post("/api/v1/projects", json={"name": "secret-merger-team", "members": [],
                                                 "maintainers": []})
    assert made.status_code == 201
    metrics.task_entered("running", "secret-merger-team", lambda name: True)
    anonymous = app.test_client().get("/metrics").get_data(as_text=True)
    assert "secret-merger-team" not in anonymous
    families = {f.name: f for f in text_string_to_metric_families(anonymous)}
    samples_ = families["taskenv_task_transitions"].samples
    assert {s.labels["project"] for s in samples_} == {""}  # summed over every project
    running = [s.value for s in samples_
               if s.labels.get("state") == "running" and s.name.endswith("_total")]
    assert len(running) == 1 and running[0] >= 1
    user = app.test_client().get("/metrics", headers={"Authorization": "Bearer nope-nope"})
    assert "secret-merger-team" not in user.get_data(as_text=True)
    admin = app.test_client().get("/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert 'project="secret-merger-team"' in admin.get_data(as_text=True)


def test_a_user_token_gets_the_anonymous_view(
        app: Flask, client: FlaskClient, client_for: Any) -> None:
    client.post("/api/v1/projects", json={"name": "vision-x", "members": [], "maintainers": []})
    metrics.task_entered("pending", "vision-x", lambda name: True)
    token = client.post("/api/v1/tokens", json={"owner": "mallory", "role": "user"}).get_json()
    scraped = app.test_client().get("/metrics", headers={
        "Authorization": f"Bearer {token['token']}"}).get_data(as_text=True)
    assert "vision-x" not in scraped
