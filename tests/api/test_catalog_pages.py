"""The console's catalog page, the doctor's advice beside a task's rows, its pre-flight
report on the task page and the near-misses on the insights page."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.api.conftest import Browser, task_body
from workers import stages

CORPUS = Path(__file__).parents[1] / "shared" / "doctor" / "corpus"


@pytest.fixture
def vision(client: FlaskClient) -> None:
    made = client.post("/api/v1/projects", json={"name": "vision", "members": ["alice"],
                                                 "maintainers": ["carol"]})
    assert made.status_code == 201


def test_everyone_reads_the_catalog_page_with_sources(browser: Callable[..., Browser],
                                                      vision: None) -> None:
    page = browser("alice").get("/ui/catalog").text
    assert "NCCL_DEBUG" in page and "VERSION, WARN, INFO, TRACE" in page
    assert 'href="https://docs.nvidia.com/deeplearning/nccl' in page
    assert 'id="catalog-form"' not in page  # a member edits nothing


def test_a_maintainer_edits_the_projects_catalog_and_not_the_platforms(
        browser: Callable[..., Browser], vision: None, client: FlaskClient) -> None:
    carol = browser("carol")
    assert 'id="catalog-form"' in carol.get("/ui/catalog?project=vision").text
    saved = carol.post("/ui/catalog", {"project": "vision", "name": "LR", "type": "float",
                                       "min": "0", "max": "1", "description": "rate"})
    assert saved.status_code == 302
    entries = {e["name"]: e for e in
               client.get("/api/v1/catalog?project=vision").get_json()["entries"]}
    assert entries["LR"]["max"] == 1 and entries["LR"]["scope"] == "project:vision"
    assert carol.post("/ui/catalog", {"name": "X"}).status_code == 403  # the platform's
    refused = carol.post("/ui/catalog", {"project": "vision", "name": "Y", "type": "colour"})
    assert "catalog.type" not in refused.text  # flashed on the next page:
    assert "type must be one of" in carol.get("/ui/catalog?project=vision").text
    assert browser("mallory").get("/ui/catalog?project=vision").status_code == 404


def test_only_an_admin_switches_the_builtin_catalog(browser: Callable[..., Browser],
                                                    vision: None) -> None:
    admin = browser()
    assert admin.post("/ui/catalog", {"builtin": "off"}).status_code == 302
    page = admin.get("/ui/catalog").text
    assert '<strong id="builtin-state">off</strong>' in page and "NCCL_DEBUG" not in page
    assert browser("carol").post("/ui/catalog", {"project": "vision",
                                                 "builtin": "on"}).status_code == 403


def resolve(client: FlaskClient, task_id: str) -> None:
    svc = client.application.extensions["taskenv"]
    assert stages.validate(svc.tasks, svc.limits, task_id, 1)
    assert stages.apply_policy(svc.tasks, svc.policies, task_id, 1, catalogs=svc.catalog)


def test_the_task_page_shows_advice_beside_the_rows(browser: Callable[..., Browser],
                                                    client: FlaskClient) -> None:
    made = client.post("/api/v1/tasks", json=task_body(
        env=[{"name": "NCCL_DEBGU", "value": "INFO"}, {"name": "LR", "value": "1"}]))
    task_id = made.get_json()["id"]
    resolve(client, task_id)
    page = browser().get(f"/ui/tasks/{task_id}").text
    row = page[page.index('name="env-0-name"'):page.index('name="env-1-name"')]
    assert 'class="field-errors doctor-advice"' in row and "did you mean NCCL_DEBUG" in row


def test_the_task_page_shows_the_pre_flight_report(browser: Callable[..., Browser],
                                                   client: FlaskClient, tasks: Any) -> None:
    files = [{"path": p.name, "content": p.read_text()} for p in sorted(CORPUS.iterdir())]
    made = client.post("/api/v1/tasks", json=task_body(
        env=[{"name": "BATCH_SZ", "value": "8"}], files=files))
    assert made.status_code == 202, made.get_json()
    task_id = made.get_json()["id"]
    resolve(client, task_id)
    page = browser().get(f"/ui/tasks/{task_id}").text
    report = page[page.index('id="doctor"'):]
    assert "Read but not set, no default" in report
    assert "torchrun_entry.py line 7 reads BATCH_SIZE" in report and "did you mean BATCH_SZ" \
        in report
    assert "Set but read by no script" in report
    assert "Names built at run time" in report


def test_insights_count_the_near_misses_by_name(browser: Callable[..., Browser],
                                                client: FlaskClient) -> None:
    for _ in range(2):
        made = client.post("/api/v1/tasks", json=task_body(
            env=[{"name": "NCCL_DEBGU", "value": "secret-looking-value"}]))
        resolve(client, made.get_json()["id"])
    page = browser().get("/ui/insights").text
    table = page[page.index('id="near-misses-1"'):]
    assert "<code class=\"var\">NCCL_DEBGU</code>" in table
    assert "<code class=\"var\">NCCL_DEBUG</code>" in table and "<td>2</td>" in table
    assert "secret-looking-value" not in page


def test_the_policy_page_keeps_and_sets_strict_env(browser: Callable[..., Browser],
                                                   client: FlaskClient) -> None:
    """A policy's strict_env shows as a ticked box; saving the page keeps it, unticking
    clears it: an edit on the page never drops what the API set."""
    body = {"defaults": [], "protected": [], "strict_env": True,
            "rules": [{"name": "NCCL_*", "documented": True, "severity": "warning"}]}
    assert client.put("/api/v1/policy", json=body).status_code == 200
    admin = browser()
    page = admin.get("/ui/policy").text
    assert 'id="strict-env" checked' in page and "documented" in page
    form = {"on_conflict": "reject", "rules": '[{"name": "NCCL_*", "documented": true, '
                                              '"severity": "warning"}]', "strict_env": "on"}
    assert admin.post("/ui/policy", form).status_code == 302
    saved = client.get("/api/v1/policy").get_json()
    assert saved["strict_env"] is True and saved["rules"][0]["severity"] == "warning"
    assert admin.post("/ui/policy", {**form, "strict_env": ""}).status_code == 302
    assert client.get("/api/v1/policy").get_json().get("strict_env") in (None, False)
