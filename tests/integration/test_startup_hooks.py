"""A project policy version that injects start-up hooks (stored before such versions were
refused) runs nothing in a member's real task: BASH_ENV and SHELLOPTS+PS4 through bash."""

from __future__ import annotations

import pytest

from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

SECRET = "members-secret-0123456789"


def test_an_old_injecting_version_runs_nothing_in_a_members_task(stack: Stack) -> None:
    alice, carol = stack.new_token("alice"), stack.new_token("carol")
    made = stack.call("POST", "/api/v1/projects",
                      json={"name": "hooked", "members": ["alice"], "maintainers": ["carol"]})
    assert made.status_code == 201, made.text
    # Through the API the maintainer is refused ...
    refused = stack.call("PUT", "/api/v1/projects/hooked/policy", token=carol, json={
        "protected": [], "defaults": [{"name": "BASH_ENV", "value": "$(echo PWNED-$TOKEN)"}]})
    assert refused.status_code == 422, refused.text
    # ... so the version is written as one stored before the refusal existed.
    PolicyStore(stack.redis, stack.env["TASKENV_KEY_PREFIX"]).scoped("project:hooked").put(
        Policy.from_dict({"defaults": [
            {"name": "BASH_ENV", "value": "$(echo PWNED-BASH_ENV-$TOKEN >&2)"},
            {"name": "SHELLOPTS", "value": "xtrace"},
            {"name": "PS4", "value": "$(echo PWNED-PS4-$TOKEN >&2)"},
            {"name": "NOTE", "value": "kept"}], "protected": []}))
    task = stack.create({"name": "victim", "project": "hooked",
                         "steps": [["bash", "-c", "echo note=$NOTE; echo ${BASH_ENV:-none}"]],
                         "env": [{"name": "TOKEN", "value": SECRET, "secret": True}]},
                        token=alice)
    doc = stack.wait(task["id"])
    logs = stack.call("GET", task["url"] + "/logs", token=carol).text

    assert doc["status"] == "succeeded", doc
    assert "PWNED" not in logs and SECRET not in logs, logs
    assert logs.endswith("==> step 1/1: bash\nnote=kept\nnone\n"), logs
    names = {v["name"] for v in doc["resolved_env"]}
    assert {"BASH_ENV", "SHELLOPTS", "PS4"}.isdisjoint(names) and "NOTE" in names
    assert {w["variable"] for w in doc["warnings"] if w["rule"] == "policy.startup_hook"} \
        == {"BASH_ENV", "SHELLOPTS", "PS4"}
