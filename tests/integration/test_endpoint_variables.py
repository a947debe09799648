"""Two projects side by side on the real stack: one whose admin-allowed HF_ENDPOINT reaches
its member's task, one whose maintainer's HF_ENDPOINT (a version stored before such
versions were refused) never reaches its member's real task, which is told why."""

from __future__ import annotations

import pytest

from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

TOKEN = "hf_members-own-token-0123456789"
STEP = ["sh", "-c", "echo endpoint=${HF_ENDPOINT:-none}"]


def test_only_the_allowed_projects_endpoint_reaches_a_members_task(stack: Stack) -> None:
    alice, carol = stack.new_token("alice"), stack.new_token("carol")
    bob, dave = stack.new_token("bob"), stack.new_token("dave")
    for name, member, maintainer in (("mirrored", "alice", "carol"), ("other", "bob", "dave")):
        made = stack.call("POST", "/api/v1/projects",
                          json={"name": name, "members": [member], "maintainers": [maintainer]})
        assert made.status_code == 201, made.text
    allowed = stack.call("PUT", "/api/v1/policy", json={
        "defaults": [], "protected": [],
        "endpoint_allowances": [{"project": "mirrored", "name": "HF_ENDPOINT",
                                 "reason": "the project's own hub mirror"}]})
    assert allowed.status_code == 200, allowed.text
    saved = stack.call("PUT", "/api/v1/projects/mirrored/policy", token=carol, json={
        "protected": [], "defaults": [{"name": "HF_ENDPOINT", "value": "http://mirror.vision"}]})
    assert saved.status_code == 200, saved.text
    # The other project's maintainer is refused through the API ...
    refused = stack.call("PUT", "/api/v1/projects/other/policy", token=dave, json={
        "protected": [], "defaults": [{"name": "HF_ENDPOINT", "value": "http://dave.example"}]})
    assert refused.status_code == 422, refused.text
    # ... so the version is written as one stored before the refusal existed.
    PolicyStore(stack.redis, stack.env["TASKENV_KEY_PREFIX"]).scoped("project:other").put(
        Policy.from_dict({"defaults": [{"name": "HF_ENDPOINT", "value": "http://dave.example"},
                                       {"name": "NOTE", "value": "kept"}], "protected": []}))
    env = [{"name": "HF_TOKEN", "value": TOKEN, "secret": True}]
    mirrored = stack.create({"name": "allowed", "project": "mirrored", "steps": [STEP],
                             "env": env}, token=alice)
    other = stack.create({"name": "victim", "project": "other", "steps": [STEP], "env": env},
                         token=bob)

    allowed_doc, victim_doc = stack.wait(mirrored["id"]), stack.wait(other["id"])
    allowed_log = stack.call("GET", mirrored["url"] + "/logs", token=carol).text
    victim_log = stack.call("GET", other["url"] + "/logs", token=dave).text

    assert allowed_doc["status"] == "succeeded", allowed_doc
    assert allowed_log.endswith("endpoint=http://mirror.vision\n"), allowed_log
    assert victim_doc["status"] == "succeeded", victim_doc
    assert victim_log.endswith("==> step 1/1: sh\nendpoint=none\n"), victim_log
    assert "dave.example" not in victim_log and TOKEN not in victim_log + allowed_log
    names = {v["name"] for v in victim_doc["resolved_env"]}
    assert "HF_ENDPOINT" not in names and "NOTE" in names
    assert [w["variable"] for w in victim_doc["warnings"]
            if w["rule"] == "policy.endpoint_variable"] == ["HF_ENDPOINT"]
