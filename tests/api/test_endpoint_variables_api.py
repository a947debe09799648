"""Where a member's programs send credentials is the platform's call: a project maintainer
cannot point members' tasks at the maintainer's servers (HF_ENDPOINT, proxies, PATH, ...)
unless an admin allows that project that name.  Two tenants side by side, through the API."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from tests.api.conftest import Browser, task_body

EVIL = "https://hub.maintainer.example"


@pytest.fixture
def tenants(client: FlaskClient) -> None:
    """p1 (member alice, maintainer carol) and p2 (member bob, maintainer dave)."""
    for name, member, maintainer in (("p1", "alice", "carol"), ("p2", "bob", "dave")):
        made = client.post("/api/v1/projects", json={"name": name, "members": [member],
                                                     "maintainers": [maintainer]})
        assert made.status_code == 201, made.get_json()


def policy(*defaults: tuple[str, str], **data: Any) -> dict[str, Any]:
    return {"defaults": [{"name": n, "value": v} for n, v in defaults], "protected": [], **data}


def refused_names(body: dict[str, Any], rule: str = "layer.endpoint_variable") -> set[str]:
    return {e["variable"] for e in body["errors"] if e["rule"] == rule}


def allow(admin: FlaskClient, *pairs: tuple[str, str]) -> dict[str, Any]:
    saved = admin.put("/api/v1/policy", json=policy(endpoint_allowances=[
        {"project": p, "name": n, "reason": "the project's own mirror"} for p, n in pairs]))
    assert saved.status_code == 200, saved.get_json()
    body: dict[str, Any] = saved.get_json()
    return body


def preview(who: FlaskClient, project: str, env: list[dict[str, Any]] | None = None
            ) -> dict[str, Any]:
    shown = who.post("/api/v1/env/preview", json={"env": env or [], "project": project})
    assert shown.status_code == 200, shown.get_json()
    body: dict[str, Any] = shown.get_json()
    return body


@pytest.mark.usefixtures("tenants")
def test_a_maintainers_endpoint_and_path_are_refused_both_at_once_with_why(
        client_for: Callable[..., FlaskClient], error_shape: Callable[..., None]) -> None:
    carol = client_for("carol")
    body = policy(("HF_ENDPOINT", EVIL), ("PATH", "/data/p1/bin:/usr/bin"), ("LR", "0.1"))
    for path in ("/api/v1/projects/p1/policy", "/api/v1/projects/p1/policy/impact"):
        method = carol.put if path.endswith("policy") else carol.post
        refused = method(path, json=body)
        assert refused.status_code == 422, refused.get_json()
        error_shape(refused.get_json())
        errors = [e for e in refused.get_json()["errors"] if e["rule"] == "layer.endpoint_variable"]
        assert {e["variable"] for e in errors} == {"HF_ENDPOINT", "PATH"}
        for e in errors:
            assert e["variable"] in e["message"] and "credentials" in e["message"]
        hf = next(e for e in errors if e["variable"] == "HF_ENDPOINT")
        assert "HF_TOKEN" in hf["message"] and "huggingface_hub" in hf["message"]
    assert carol.get("/api/v1/projects/p1/policy").get_json()["version"] == 0


@pytest.mark.usefixtures("tenants")
def test_an_admins_allowance_lets_one_project_and_only_it_set_exactly_that_name(
        client: FlaskClient, client_for: Callable[..., FlaskClient]) -> None:
    carol, dave = client_for("carol"), client_for("dave")
    allow(client, ("p1", "HF_ENDPOINT"))
    shown = client.get("/api/v1/policy").get_json()
    assert shown["endpoint_allowances"] == [
        {"project": "p1", "name": "HF_ENDPOINT", "reason": "the project's own mirror"}]
    # p1's maintainer may now set HF_ENDPOINT, and nothing else of the list.
    saved = carol.put("/api/v1/projects/p1/policy", json=policy(("HF_ENDPOINT", EVIL)))
    assert saved.status_code == 200, saved.get_json()
    still = carol.put("/api/v1/projects/p1/policy",
                      json=policy(("HF_ENDPOINT", EVIL), ("WANDB_BASE_URL", EVIL)))
    assert still.status_code == 422 and refused_names(still.get_json()) == {"WANDB_BASE_URL"}
    # p2's maintainer is still refused the very name p1 was allowed.
    other = dave.put("/api/v1/projects/p2/policy", json=policy(("HF_ENDPOINT", EVIL)))
    assert other.status_code == 422 and refused_names(other.get_json()) == {"HF_ENDPOINT"}
    # p1's member gets p1's endpoint; p2's member never gets it.
    alice, bob = client_for("alice"), client_for("bob")
    got = {v["name"]: v for v in preview(alice, "p1")["variables"]}
    assert got["HF_ENDPOINT"]["value"] == EVIL and got["HF_ENDPOINT"]["scope"] == "project:p1"
    assert "HF_ENDPOINT" not in {v["name"] for v in preview(bob, "p2")["variables"]}


@pytest.mark.usefixtures("tenants")
def test_a_member_of_the_other_project_never_gets_its_maintainers_stored_endpoint(
        client: FlaskClient, client_for: Callable[..., FlaskClient],
        policies: PolicyStore) -> None:
    """p2's maintainer's version, saved before the rule, names HF_ENDPOINT and a proxy
    while p1 is allowed HF_ENDPOINT: p2's member's task gets neither, and is told."""
    allow(client, ("p1", "HF_ENDPOINT"))
    old = policies.scoped("project:p2").put(Policy.from_dict(policy(
        ("HF_ENDPOINT", EVIL), ("https_proxy", "http://dave:3128"), ("LR", "0.1"))))
    assert old.version == 1
    bob = client_for("bob")
    shown = preview(bob, "p2", [{"name": "HF_TOKEN", "value": "hf_bobs-own-token-0123456789",
                                 "secret": True}])
    names = {v["name"]: v["value"] for v in shown["variables"]}
    assert "HF_ENDPOINT" not in names and "https_proxy" not in names and names["LR"] == "0.1"
    warnings = {w["variable"]: w for w in shown["warnings"]
                if w["rule"] == "policy.endpoint_variable"}
    assert set(warnings) == {"HF_ENDPOINT", "https_proxy"}
    assert "project p2's policy v1" in warnings["HF_ENDPOINT"]["message"]
    # The manifest bob's task would be submitted as holds neither.
    made = bob.post("/api/v1/tasks", json=task_body(project="p2"))
    assert made.status_code == 202, made.get_json()
    manifest = bob.get(made.get_json()["url"] + "/manifest")
    assert manifest.status_code == 200, manifest.get_json()
    assert EVIL not in manifest.get_data(as_text=True)
    assert "dave:3128" not in manifest.get_data(as_text=True)
    # Bob may still point his own task wherever he likes: his own call.
    mine = preview(bob, "p2", [{"name": "HF_ENDPOINT", "value": "https://bobs.mirror"}])
    assert mine["ok"] and {v["name"]: v["value"] for v in mine["variables"]}[
        "HF_ENDPOINT"] == "https://bobs.mirror"


@pytest.mark.usefixtures("tenants")
def test_only_an_admin_allows_and_withdrawing_names_the_project(
        client: FlaskClient, client_for: Callable[..., FlaskClient]) -> None:
    carol = client_for("carol")
    # A maintainer cannot grant their project an allowance, in its policy or the platform's.
    granted = carol.put("/api/v1/projects/p1/policy", json=policy(
        ("HF_ENDPOINT", EVIL), endpoint_allowances=[{"project": "p1", "name": "HF_ENDPOINT"}]))
    assert granted.status_code == 422
    assert {e["rule"] for e in granted.get_json()["errors"]} == {
        "layer.endpoint_allowance", "layer.endpoint_variable"}
    platform = carol.put("/api/v1/policy", json=policy(endpoint_allowances=[
        {"project": "p1", "name": "HF_ENDPOINT"}]))
    assert platform.status_code == 403
    assert "endpoint_allowances" not in client.get("/api/v1/policy").get_json()
    # An admin's allowance of a family, or naming no project, is refused, all at once.
    bad = client.put("/api/v1/policy", json=policy(endpoint_allowances=[
        {"project": "p1", "name": "HF_*"}, {"project": "No Such", "name": "PATH"}]))
    assert bad.status_code == 422
    assert {e["field"] for e in bad.get_json()["errors"]} == {
        "endpoint_allowances[0].name", "endpoint_allowances[1].project"}
    # Allowed, saved, then withdrawn: the platform's save names the project and variable.
    allow(client, ("p1", "HF_ENDPOINT"))
    assert carol.put("/api/v1/projects/p1/policy",
                     json=policy(("HF_ENDPOINT", EVIL))).status_code == 200
    withdrawn = allow(client)
    assert [(c["project"], [(p["variable"], p["rule"]) for p in c["problems"]])
            for c in withdrawn["project_conflicts"]] == [
        ("p1", [("HF_ENDPOINT", "layer.endpoint_variable")])]
    conflicts = carol.get("/api/v1/projects/p1/policy").get_json()["conflicts"]
    assert [c["variable"] for c in conflicts] == ["HF_ENDPOINT"]
    alice = client_for("alice")
    shown = preview(alice, "p1")
    assert "HF_ENDPOINT" not in {v["name"] for v in shown["variables"]}
    assert [w["variable"] for w in shown["warnings"]] == ["HF_ENDPOINT"]


def test_the_platform_may_set_them(client: FlaskClient,
                                   client_for: Callable[..., FlaskClient]) -> None:
    saved = client.put("/api/v1/policy", json=policy(("HF_ENDPOINT", "https://hub.internal"),
                                                     ("https_proxy", "http://proxy:3128")))
    assert saved.status_code == 200, saved.get_json()
    shown = client_for("erin").post("/api/v1/env/preview", json={"env": []}).get_json()
    got = {v["name"]: v["value"] for v in shown["variables"]}
    assert got["HF_ENDPOINT"] == "https://hub.internal" and shown["warnings"] == []


def test_the_list_is_a_platform_setting_in_the_hooks_grammar(
        admin_client_with: Callable[..., FlaskClient]) -> None:
    admin = admin_client_with(endpoint_variables="default,CORP_*,-PATH")
    made = admin.post("/api/v1/projects", json={"name": "lab", "members": [],
                                                "maintainers": []})
    assert made.status_code == 201
    refused = admin.put("/api/v1/projects/lab/policy", json=policy(
        ("CORP_REGISTRY", "https://r"), ("PATH", "/opt/lab/bin:/usr/bin"),
        ("HF_ENDPOINT", EVIL)))
    assert refused.status_code == 422
    assert {e["variable"] for e in refused.get_json()["errors"]} == {"CORP_REGISTRY",
                                                                      "HF_ENDPOINT"}


@pytest.mark.usefixtures("tenants")
def test_the_platform_policy_page_shows_and_saves_the_allowances(
        client: FlaskClient, browser: Callable[..., Browser]) -> None:
    """An edit on the console never drops what the API set; a project's page has no
    such field (only the platform's policy may allow)."""
    allow(client, ("p1", "HF_ENDPOINT"))
    admin = browser()
    page = admin.get("/ui/policy").text
    assert 'name="endpoint_allowances"' in page and "&#34;HF_ENDPOINT&#34;" in page
    assert 'name="endpoint_allowances"' not in admin.get("/ui/projects/p1/policy").text
    form = {"on_conflict": "reject", "endpoint_allowances": json.dumps(
        [{"project": "p2", "name": "WANDB_BASE_URL", "reason": "their own server"}])}
    assert admin.post("/ui/policy", form).status_code == 302
    assert client.get("/api/v1/policy").get_json()["endpoint_allowances"] == [
        {"project": "p2", "name": "WANDB_BASE_URL", "reason": "their own server"}]
    bad = admin.post("/ui/policy", {**form, "endpoint_allowances": "[{"})
    assert bad.status_code == 422 and "write a list of {project, name, reason} in JSON" \
        in bad.text.replace("&#39;", "'")
    assert client.get("/api/v1/policy").get_json()["version"] == 2  # nothing saved
    assert admin.post("/ui/policy", {"on_conflict": "reject"}).status_code == 302
    assert "endpoint_allowances" not in client.get("/api/v1/policy").get_json()
