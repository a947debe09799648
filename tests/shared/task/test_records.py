"""Task records: creation, env patches, revisions and the public view."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from shared.secrets import MASK
from shared.task import records, states
from shared.task.records import new_revision, new_task, patch_env, public_view

KEY = b"fingerprint-key-for-tests"


def var(name: str, value: str = "v", **extra: Any) -> dict[str, Any]:
    return {"name": name, "value": value, **extra}


def names(env: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in env]


def task(env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    doc = new_task({"name": "train", "steps": [["python3", "train.py"]],
                    "env": env if env is not None else [var("A", "1")]}, "alice")
    doc["id"] = "task-under-test"
    return doc


# --- new_task ----------------------------------------------------------------------------

def test_new_task_starts_pending_at_revision_one() -> None:
    doc = task()
    assert doc["state"] == states.PENDING and doc["revision"] == 1
    assert doc["owner"] == "alice"
    assert doc["resolved"] is None
    assert (doc["made_by"], doc["how"]) == ("alice", "create")
    assert [e["state"] for e in doc["events"]] == [states.PENDING]


def test_request_digest_ignores_key_order_and_sees_content() -> None:
    a = {"name": "x", "steps": [["a"]]}
    b = {"steps": [["a"]], "name": "x"}
    assert records.request_digest(a, KEY) == records.request_digest(b, KEY)
    assert records.request_digest(a, KEY) != records.request_digest({**a, "name": "y"}, KEY)


def test_request_digest_sees_a_secret_value_through_its_key_only() -> None:
    def request(value: str) -> dict[str, Any]:
        return {"name": "x", "steps": [["a"]],
                "env": [{"name": "TOKEN", "value": value, "secret": True}]}

    assert records.request_digest(request("one"), KEY) != \
        records.request_digest(request("two"), KEY)
    # A keyed MAC, not a hash: with another key the same request has another fingerprint.
    assert records.request_digest(request("one"), KEY) != \
        records.request_digest(request("one"), b"another key")
    plain = hashlib.sha256(json.dumps(request("one"), sort_keys=True).encode()).hexdigest()
    assert records.request_digest(request("one"), KEY) != plain


def test_request_digest_sees_plain_values() -> None:
    def request(value: str) -> dict[str, Any]:
        return {"name": "x", "steps": [["a"]], "env": [{"name": "LR", "value": value}]}

    assert records.request_digest(request("0.1"), KEY) != \
        records.request_digest(request("0.2"), KEY)


# --- patch_env ---------------------------------------------------------------------------

def test_patch_adds_a_new_variable_at_the_end() -> None:
    env, problems = patch_env([var("A"), var("B")], [var("C", "3")], [])
    assert problems == []
    assert env == [var("A"), var("B"), var("C", "3")]


def test_patch_modifies_a_variable_in_place() -> None:
    env, problems = patch_env([var("A", "1"), var("B", "2"), var("C", "3")],
                              [var("B", "two", secret=True)], [])
    assert problems == []
    assert env == [var("A", "1"), var("B", "two", secret=True), var("C", "3")]


def test_patch_deletes_a_variable() -> None:
    env, problems = patch_env([var("A"), var("B"), var("C")], [], ["B"])
    assert problems == []
    assert names(env) == ["A", "C"]


def test_patch_can_add_modify_and_delete_at_once() -> None:
    env, problems = patch_env([var("A", "1"), var("B", "2"), var("C", "3")],
                              [var("C", "three"), var("D", "4")], ["A"])
    assert problems == []
    assert env == [var("B", "2"), var("C", "three"), var("D", "4")]


def test_unsetting_an_unknown_name_is_a_problem_naming_it() -> None:
    _, problems = patch_env([var("A")], [], ["MISSING"])
    assert [(p.rule, p.variable) for p in problems] == [("name.unknown", "MISSING")]
    assert "MISSING" in problems[0].message


def test_setting_and_unsetting_the_same_name_is_a_problem() -> None:
    _, problems = patch_env([var("A")], [var("A", "2")], ["A"])
    assert [(p.rule, p.variable) for p in problems] == [("patch.ambiguous", "A")]
    assert "A" in problems[0].message


def test_patch_does_not_change_its_input() -> None:
    env = [var("A", "1"), var("B", "2")]
    set_ = [var("A", "one"), var("C", "3")]
    before = copy.deepcopy((env, set_))
    patch_env(env, set_, ["B"])
    assert (env, set_) == before


@pytest.mark.parametrize("set_, unset", [([{"name": ["A"], "value": "x"}], []),
                                         ([], [])],
                         ids=["set-a-list-name", "rerun"])
def test_patch_of_a_list_with_a_non_string_name_is_not_a_crash(
        set_: list[dict[str, Any]], unset: list[str]) -> None:
    # Names are only checked by the validation worker, so a stored list may hold anything.
    stored = [{"name": ["A"], "value": "x"}]
    env, _ = patch_env(stored, set_, unset)
    assert isinstance(env, list)


# --- new_revision ------------------------------------------------------------------------

def finished(doc: dict[str, Any]) -> dict[str, Any]:
    doc.update(state=states.FAILED, errors=[{"rule": "r", "message": "m"}],
               warnings=[{"rule": "w", "message": "m"}], policy_version=3, exit_code=2,
               reason="step 1 exited with 2",
               resolved=[{"name": "A", "value": "1", "source": "user", "overrode": [],
                          "secret": False}])
    return doc


def test_new_revision_says_who_made_it_and_how() -> None:
    doc = new_revision(finished(task([var("A", "1")])), [var("A", "2")], "bob", "patch")
    assert (doc["made_by"], doc["how"]) == ("bob", "patch")
    assert "history" not in doc  # past revisions live in their own keys (shared.store.tasks)


def test_new_revision_starts_pending_with_the_new_env_and_no_results() -> None:
    doc = new_revision(finished(task()), [var("B", "2")], "alice", "patch")
    assert doc["revision"] == 2
    assert doc["state"] == states.PENDING
    assert doc["env"] == [var("B", "2")]
    assert doc["errors"] == [] and doc["warnings"] == []
    for field in ("resolved", "policy_version", "exit_code", "reason"):
        assert doc[field] is None, field
    assert doc["events"][-1]["revision"] == 2
    assert doc["events"][-1]["state"] == states.PENDING


def test_revisions_count_up() -> None:
    doc = task()
    for _ in range(3):
        new_revision(finished(doc), doc["env"], "alice", "rerun")
    assert doc["revision"] == 4
    assert doc["events"] == [{"at": doc["events"][0]["at"], "revision": 4, "state": "pending"}]


# --- public_view -------------------------------------------------------------------------

SECRET = "hunter2-the-secret"


def resolved_task() -> dict[str, Any]:
    doc = task([var("PLAIN", "visible"), var("TOKEN", SECRET, secret=True)])
    doc["resolved"] = [
        {"name": "TASK_ID", "value": doc["id"], "source": "platform", "overrode": [],
         "secret": False},
        {"name": "PLAIN", "value": "visible", "source": "user", "overrode": [], "secret": False},
        {"name": "TOKEN", "value": SECRET, "source": "user", "overrode": [], "secret": True},
        {"name": "DB_PASS", "value": SECRET + "-default", "source": "default", "overrode": [],
         "secret": True},
    ]
    return doc


def test_public_view_masks_secret_values_in_env_and_resolved_env() -> None:
    view = public_view(resolved_task(), "/api/v1/tasks/x")
    env = {e["name"]: e["value"] for e in view["env"]}
    resolved = {v["name"]: v["value"] for v in view["resolved_env"]}
    assert env == {"PLAIN": "visible", "TOKEN": MASK}
    assert resolved["TOKEN"] == MASK and resolved["DB_PASS"] == MASK
    assert resolved["PLAIN"] == "visible"


def test_public_view_never_contains_a_secret_anywhere() -> None:
    doc = resolved_task()
    new_revision(doc, doc["env"], "alice", "rerun")
    doc["resolved"] = resolved_task()["resolved"]
    assert SECRET not in json.dumps(public_view(doc, "/x"))


def test_public_view_leaves_out_sealed_values() -> None:
    doc = task([{"name": "TOKEN", "sealed": "gAAAA-ciphertext", "secret": True}])
    [entry] = public_view(doc, "/x")["env"]
    assert entry == {"name": "TOKEN", "value": MASK, "secret": True}


def test_public_view_does_not_change_the_record() -> None:
    doc = resolved_task()
    before = copy.deepcopy(doc)
    public_view(doc, "/x")
    assert doc == before


def test_public_view_shape() -> None:
    view = public_view(task(), "/api/v1/tasks/task-under-test")
    assert view["url"] == "/api/v1/tasks/task-under-test"
    assert view["status"] == states.PENDING
    assert view["resolved_env"] is None
    assert view["note"] == records.NOTE
    assert "history" not in view and "digest" not in view
