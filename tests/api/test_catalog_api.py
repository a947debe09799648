"""The catalog API and the doctor's advice through the API, as an admin, a project's
maintainer, a member and a stranger with a plain token."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.doctor import scripts
from shared.doctor.store import MAX_ENTRIES
from shared.policy.model import Policy
from shared.policy.scopes import Chain
from shared.store.insights import Insights
from tests.api.conftest import task_body
from workers import stages

CATALOG = "/api/v1/catalog"
CORPUS = Path(__file__).parents[1] / "shared" / "doctor" / "corpus"


@pytest.fixture
def users(client: FlaskClient, client_for: Callable[..., FlaskClient]) -> dict[str, FlaskClient]:
    """vision: alice a member, carol its maintainer; mallory in no project."""
    made = client.post("/api/v1/projects", json={"name": "vision", "members": ["alice"],
                                                 "maintainers": ["carol"]})
    assert made.status_code == 201, made.get_json()
    return {name: client_for(name) for name in ("alice", "carol", "mallory")}


def names(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in body["entries"]}


def test_anyone_reads_the_builtin_catalog_with_sources(users: dict[str, FlaskClient]) -> None:
    body = users["mallory"].get(CATALOG).get_json()
    assert body["builtin"] is True and body["project"] is None
    nccl = names(body)["NCCL_DEBUG"]
    assert nccl["values"] == ["VERSION", "WARN", "INFO", "TRACE"]
    assert nccl["layer"] == "builtin" and nccl["source"].startswith("https://docs.nvidia.com")


def test_layers_edited_by_admins_and_maintainers(client: FlaskClient,
                                                  users: dict[str, FlaskClient]) -> None:
    entry = {"description": "our learning rate", "type": "float", "min": 0, "max": 1}
    assert users["alice"].put(f"{CATALOG}/entries/LR", json=entry).status_code == 403
    assert users["mallory"].put(f"{CATALOG}/entries/LR?project=vision",
                                json=entry).status_code == 404
    assert users["alice"].put(f"{CATALOG}/entries/LR?project=vision",
                              json=entry).status_code == 403
    saved = users["carol"].put(f"{CATALOG}/entries/LR?project=vision", json=entry)
    assert saved.status_code == 200 and saved.get_json()["layer"] == "project"
    platform = client.put(f"{CATALOG}/entries/DATA_ROOT", json={"description": "datasets"})
    assert platform.status_code == 200
    mine = names(users["alice"].get(f"{CATALOG}?project=vision").get_json())
    assert mine["LR"]["scope"] == "project:vision" and mine["DATA_ROOT"]["layer"] == "platform"
    assert "LR" not in names(users["mallory"].get(CATALOG).get_json())
    assert users["mallory"].get(f"{CATALOG}?project=vision").status_code == 404
    audit = client.get("/api/v1/audit").get_json()["items"]
    assert {(a["action"], a["actor"]) for a in audit} >= {("catalog.put", "carol"),
                                                          ("catalog.put", "admin")}
    assert users["carol"].delete(f"{CATALOG}/entries/LR?project=vision").status_code == 204
    assert users["carol"].delete(f"{CATALOG}/entries/LR?project=vision").status_code == 404


def test_a_bad_entry_is_refused_naming_every_problem(client: FlaskClient) -> None:
    refused = client.put(f"{CATALOG}/entries/X", json={
        "type": "colour", "description": "d" * 501, "values": ["v"] * 101})
    assert refused.status_code == 422
    rules = {p["rule"] for p in refused.get_json()["errors"]}
    assert rules == {"catalog.type", "catalog.description_length", "catalog.values_limit"}
    assert all(p["variable"] == "X" for p in refused.get_json()["errors"])
    assert client.put(f"{CATALOG}/entries/NCCL_*", json={}).status_code == 422
    scripted = client.put(f"{CATALOG}/entries/X", json={"source": "javascript:alert(1)"})
    assert scripted.status_code == 422
    assert [(p["rule"], p["field"]) for p in scripted.get_json()["errors"]] == [
        ("catalog.source_url", "entry.source")]


def test_a_layer_holds_a_bounded_number_of_entries(client: FlaskClient,
                                                    users: dict[str, FlaskClient]) -> None:
    store = client.application.extensions["taskenv"].catalog
    for i in range(MAX_ENTRIES):
        store.put("project:vision", {"name": f"V{i}"})
    full = users["carol"].put(f"{CATALOG}/entries/ONE_MORE?project=vision", json={})
    assert full.status_code == 422
    problem = full.get_json()["errors"][0]
    assert problem["rule"] == "catalog.max_entries" and problem["limit"] == MAX_ENTRIES
    assert problem["variable"] == "ONE_MORE"


def test_only_an_admin_switches_the_builtin_catalog_off(client: FlaskClient,
                                                        users: dict[str, FlaskClient]) -> None:
    assert users["carol"].put(f"{CATALOG}/settings", json={"builtin": False}).status_code == 403
    assert client.put(f"{CATALOG}/settings", json={"builtin": "no"}).status_code == 422
    assert client.put(f"{CATALOG}/settings", json={"builtin": False}).status_code == 200
    body = users["alice"].get(CATALOG).get_json()
    assert body["builtin"] is False and "NCCL_DEBUG" not in names(body)
    advised = users["alice"].post("/api/v1/env/preview", json={
        "env": [{"name": "NCCL_DEBGU", "value": "INFO"}]}).get_json()
    assert advised["warnings"] == []


def test_policies_feed_the_catalog(client: FlaskClient, users: dict[str, FlaskClient]) -> None:
    policy = {"defaults": [], "protected": [], "rules": [
        {"name": "PRECISION", "allowed": ["bf16", "fp32"], "description": "precision",
         "severity": "warning"}]}
    assert client.put("/api/v1/policy", json=policy).status_code == 200
    entry = names(users["alice"].get(CATALOG).get_json())["PRECISION"]
    assert entry["layer"] == "policy" and entry["values"] == ["bf16", "fp32"]
    shown = users["alice"].post("/api/v1/env/preview", json={
        "env": [{"name": "PRECISON", "value": "bf16"}, {"name": "PRECISION", "value": "fp8"}]})
    body = shown.get_json()
    assert body["ok"] is True  # a warning rule does not reject
    assert {(w["rule"], w["variable"]) for w in body["warnings"]} >= {
        ("doctor.near_miss", "PRECISON"), ("rule.allowed", "PRECISION")}


def test_preview_reads_the_scripts_it_is_given(users: dict[str, FlaskClient]) -> None:
    files = [{"path": p.name, "content": p.read_text()} for p in sorted(CORPUS.iterdir())]
    body = users["alice"].post("/api/v1/env/preview", json={
        "env": [{"name": "BATCH_SZ", "value": "64"}, {"name": "LR", "value": "0.1"}],
        "files": files}).get_json()
    assert body["ok"] is True
    missing = {m["name"] for m in body["doctor"]["missing"]}
    assert {"BATCH_SIZE", "OUTPUT_DIR", "DATA_DIR"} <= missing
    assert [w["message"] for w in body["warnings"] if w["variable"] == "BATCH_SIZE"] == [
        "torchrun_entry.py line 7 reads BATCH_SIZE, which this task does not set and the "
        "script gives no default; did you mean BATCH_SZ?"]
    strict = users["alice"].post("/api/v1/env/preview", json={
        "env": [], "files": files, "strict_env": True}).get_json()
    assert strict["ok"] is False
    assert {e["rule"] for e in strict["errors"]} == {"doctor.script_unset"}


def test_files_over_the_tasks_limits_are_named_and_a_huge_script_is_not_read(
        users: dict[str, FlaskClient]) -> None:
    """The task's file limits apply to a preview's files as to a new task's; the doctor
    reads a script only up to its own bound, and says so."""
    big = "import os\n" + "x" * (scripts.MAX_SCRIPT_BYTES + 1)
    body = users["alice"].post("/api/v1/env/preview", json={
        "env": [], "files": [{"path": "a.py", "content": big}]}).get_json()
    assert body["ok"] is True  # within the task's limits: stored and run as it is
    assert body["doctor"]["scripts"] == [{
        "path": "a.py", "language": "python", "reads": [],
        "error": f"larger than {scripts.MAX_SCRIPT_BYTES} bytes: not read"}]
    assert "doctor.script_unreadable" in {w["rule"] for w in body["warnings"]}
    huge = users["alice"].post("/api/v1/env/preview", json={
        "env": [], "files": [{"path": "a.py", "content": big * 3}]}).get_json()
    assert huge["ok"] is False
    assert [e["rule"] for e in huge["errors"]] == ["files.max_bytes"]


def test_creation_and_change_answer_with_advice_and_the_record_keeps_it(
        client: FlaskClient, users: dict[str, FlaskClient], tasks: Any,
        move_to: Callable[[str, str], None]) -> None:
    secret_value = "NOT_A_DOCUMENTED_VALUE_hunter2"
    body = task_body(env=[{"name": "NCCL_DEBGU", "value": "INFO"},
                          {"name": "NCCL_DEBUG", "value": secret_value, "secret": True},
                          {"name": "CUDA_LAUNCH_BLOCKING", "value": "yes"}])
    made = users["alice"].post("/api/v1/tasks", json=body)
    assert made.status_code == 202
    advice = made.get_json()["advice"]
    assert {(a["rule"], a["variable"]) for a in advice} == {
        ("doctor.near_miss", "NCCL_DEBGU"), ("doctor.value", "CUDA_LAUNCH_BLOCKING")}
    assert secret_value not in str(advice)  # a secret's value is never looked at
    task_id = made.get_json()["id"]
    changed = users["alice"].patch(f"/api/v1/tasks/{task_id}/env", json={
        "set": [{"name": "OMP_NUM_THREAD", "value": "4"}]})
    assert changed.status_code == 202
    advised = {a["variable"]: a["message"] for a in changed.get_json()["advice"]}
    assert "did you mean OMP_NUM_THREADS" in advised["OMP_NUM_THREAD"]
    # The policy stage records the same advice with the revision, and counts the names.
    svc = client.application.extensions["taskenv"]
    assert stages.validate(svc.tasks, svc.limits, task_id, 2)
    assert stages.apply_policy(svc.tasks, svc.policies, task_id, 2,
                               catalogs=svc.catalog)
    shown = users["alice"].get(f"/api/v1/tasks/{task_id}").get_json()
    assert shown["status"] == "resolved"
    assert {w["variable"] for w in shown["warnings"] if w["rule"] == "doctor.near_miss"} == {
        "NCCL_DEBGU", "OMP_NUM_THREAD"}
    assert secret_value not in str(shown)
    top = Insights(svc.redis, svc.keys.prefix).top_near_misses(1)
    assert {(t["typed"], t["likely"]) for t in top} == {("NCCL_DEBGU", "NCCL_DEBUG"),
                                                        ("OMP_NUM_THREAD", "OMP_NUM_THREADS")}


@pytest.mark.parametrize(("path", "body", "status"), [
    (f"{CATALOG}/entries/" + "A" * 201, {}, 422),
    (f"{CATALOG}/entries/A%00B", {}, 422),
    (f"{CATALOG}/entries/NCCL_%2A", {}, 422),
    (f"{CATALOG}/entries/X", {"values": "INFO"}, 422),
    (f"{CATALOG}/entries/X", {"values": [1, 2]}, 422),
    (f"{CATALOG}/entries/X", {"min": "nan"}, 422),
    (f"{CATALOG}/entries/X", {"layer": "builtin"}, 422),
    (f"{CATALOG}/entries/X?project=" + "p" * 64, {}, 422),
    (f"{CATALOG}/entries/X?project=nope", {}, 404),
    (f"{CATALOG}/entries/X?scope=platform", {}, 422),
])
def test_hostile_catalog_writes_are_refused(client: FlaskClient, path: str,
                                            body: dict[str, Any], status: int) -> None:
    answer = client.put(path, json=body)
    assert answer.status_code == status, answer.get_json()
    assert client.get(CATALOG).get_json()["entries"] == \
        client.application.extensions["taskenv"].catalog.applying(Chain.of(Policy())).listing()


def test_a_plain_token_cannot_write_or_switch_anything(users: dict[str, FlaskClient],
                                                       client: FlaskClient) -> None:
    before = client.get(CATALOG).get_json()
    mallory = users["mallory"]
    assert mallory.put(f"{CATALOG}/entries/NCCL_DEBUG", json={"values": ["x"]}).status_code \
        == 403
    assert mallory.delete(f"{CATALOG}/entries/NCCL_DEBUG").status_code == 403
    assert mallory.put(f"{CATALOG}/settings", json={"builtin": False}).status_code == 403
    assert mallory.get(f"{CATALOG}?project=vision").status_code == 404
    assert client.get(CATALOG).get_json() == before


def test_a_policy_default_adds_a_note_and_keeps_the_documented_values(
        client: FlaskClient, users: dict[str, FlaskClient]) -> None:
    policy = {"defaults": [{"name": "NCCL_DEBUG", "value": "WARN"}], "protected": []}
    assert client.put("/api/v1/policy", json=policy).status_code == 200
    entry = names(users["alice"].get(CATALOG).get_json())["NCCL_DEBUG"]
    assert (entry["layer"], entry["type"]) == ("builtin", "enum")
    assert entry["values"] == ["VERSION", "WARN", "INFO", "TRACE"]
    assert entry["source"].startswith("https://") and entry["notes"] == ["a default of platform"]
    shown = users["alice"].post("/api/v1/env/preview", json={
        "env": [{"name": "NCCL_DEBUG", "value": "verbose"}]}).get_json()
    assert any(w["variable"] == "NCCL_DEBUG" and "verbose" in w["message"]
               for w in shown["warnings"]), shown["warnings"]


def test_a_member_never_learns_what_another_project_s_tasks_get(
        client: FlaskClient, users: dict[str, FlaskClient]) -> None:
    assert client.post("/api/v1/projects", json={"name": "p2", "members": ["bob"]}
                       ).status_code == 201
    policy = {"defaults": [{"name": "SECRET_PROJ_BUCKET", "value": "s3://p2",
                            "when": {"project": "p2"}},
                           {"name": "GPU_ONLY", "value": "1", "when": {"gpus": ">=1"}}],
              "protected": []}
    assert client.put("/api/v1/policy", json=policy).status_code == 200
    alice = users["alice"]
    preview = alice.post("/api/v1/env/preview", json={"project": "vision", "env": []})
    listing = alice.get(f"{CATALOG}?project=vision")
    for answer in (preview, listing, alice.get(CATALOG)):
        assert answer.status_code == 200, answer.get_json()
        assert "SECRET_PROJ_BUCKET" not in answer.get_data(as_text=True)
        assert "p2" not in answer.get_data(as_text=True)
    # A condition on the task itself is still explained to the member.
    assert [e["name"] for e in preview.get_json()["not_applied"]] == ["GPU_ONLY"]


def test_the_catalog_comes_a_page_at_a_time_and_the_pages_add_up_to_it(
        client: FlaskClient, users: dict[str, FlaskClient]) -> None:
    for n in range(150):
        assert client.put(f"{CATALOG}/entries/OURS_{n:03d}",
                          json={"description": "x" * 400}).status_code == 200
    whole = client.application.extensions["taskenv"].catalog.applying(
        Chain.of(Policy())).listing()
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = users["mallory"].get(CATALOG, query_string={"limit": 100, **(
            {"cursor": cursor} if cursor else {})}).get_json()
        assert len(page["entries"]) <= 100
        seen += page["entries"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == whole and len(whole) > 200  # every entry once, in name order
    assert users["mallory"].get(CATALOG, query_string={"cursor": "forged"}).status_code == 400
    assert users["mallory"].get(CATALOG, query_string={"limit": 501}).status_code == 422


def test_an_admins_entry_replaces_a_builtin_one_only_when_it_says_so(
        client: FlaskClient, users: dict[str, FlaskClient]) -> None:
    words = {"description": "our fabric logs at WARN", "type": "string"}
    assert client.put(f"{CATALOG}/entries/NCCL_DEBUG", json=words).status_code == 200
    nccl = names(users["mallory"].get(CATALOG).get_json())["NCCL_DEBUG"]
    assert nccl["layer"] == "builtin" and nccl["type"] == "enum"  # NCCL's facts kept
    assert nccl["notes"] == ["our fabric logs at WARN"]
    ours = {"description": "ours", "type": "enum", "values": ["WARN"], "replaces": True}
    assert client.put(f"{CATALOG}/entries/NCCL_DEBUG", json=ours).status_code == 200
    nccl = names(users["mallory"].get(CATALOG).get_json())["NCCL_DEBUG"]
    assert (nccl["layer"], nccl["values"], nccl.get("replaces")) == ("platform", ["WARN"], True)
