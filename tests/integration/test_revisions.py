"""Revisions on the real stack: two revisions run to the end, their diff and the .env export."""

from __future__ import annotations

import pytest

from shared.env import envfile
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-revisions-4f1d"


def test_a_patched_variable_shows_in_the_diff_of_revisions_1_and_2(stack: Stack):
    task_id = stack.create({"name": "diffed", "steps": [["true"]], "env": [
        {"name": "LR", "value": "0.01"}, {"name": "TOKEN", "value": SECRET, "secret": True}],
        "env_file": "EPOCHS=3\nNOTE='$(HOME) # literal'\n"})["id"]
    assert stack.wait(task_id)["status"] == "succeeded"

    patched = stack.call("PATCH", f"/api/v1/tasks/{task_id}/env",
                         json={"set": [{"name": "LR", "value": "0.02"}]})
    assert patched.status_code == 202, patched.text
    assert stack.wait(task_id, revision=2)["status"] == "succeeded"

    diff = stack.call("GET", f"/api/v1/tasks/{task_id}/revisions/1/diff/2")
    listed = stack.call("GET", f"/api/v1/tasks/{task_id}/revisions").json()["items"]
    exported = stack.call("GET", f"/api/v1/tasks/{task_id}/env?format=dotenv&resolved=true")

    assert diff.status_code == 200 and SECRET not in diff.text + exported.text
    changed = {c["name"]: (c["old"], c["new"]) for c in diff.json()["changed"]}
    assert changed["LR"] == ("0.01", "0.02") and "TOKEN" in diff.json()["unchanged"]
    assert [(r["revision"], r["how"], r["state"]) for r in listed] == [
        (1, "create", "succeeded"), (2, "patch", "succeeded")]
    assert all(r["started_at"] <= r["ended_at"] for r in listed)
    values = {e["name"]: e["value"] for e in envfile.parse(exported.text)[0]}
    assert (values["LR"], values["EPOCHS"], values["NOTE"]) == ("0.02", "3", "$(HOME) # literal")
