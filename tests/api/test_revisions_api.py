"""Revisions through the API (list, one, diff), rerun as it was with its drift report,
and .env text in (env_file) and out (?format=dotenv).  The stages run in-process on
fakeredis, as the workers would run them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient

from shared.env import envfile
from shared.env.envlist import EnvVar, Limits
from shared.policy.model import Policy, Protected
from shared.policy.store import PolicyStore
from shared.secrets import MASK
from shared.store.tasks import TaskStore
from shared.task import states
from tests.support.dotenv_values import EXPORTED_VALUES, LEFT_OUT
from tests.support.dotenv_values import HOSTILE_VALUES as HOSTILE
from workers import outcomes, stages

TASKS = "/api/v1/tasks"
SECRET = "hunter2-very-secret"

MoveTo = Callable[[str, str], None]


def resolve(tasks: TaskStore, policies: PolicyStore, task_id: str, revision: int) -> None:
    assert stages.validate(tasks, Limits(), task_id, revision)
    assert stages.apply_policy(tasks, policies, task_id, revision)


def finish(tasks: TaskStore, task_id: str, revision: int) -> None:
    """Launched, running, then succeeded: what a launcher would report."""
    assert tasks.transition(task_id, revision, states.RESOLVED, states.LAUNCHING)
    outcomes.record_outcome(tasks, task_id, revision, states.RUNNING, None, None)
    outcomes.record_outcome(tasks, task_id, revision, states.SUCCEEDED, 0, None)


def create(client: FlaskClient, **body: Any) -> str:
    data = {"name": "resnet", "steps": [["python3", "train.py"]], **body}
    response = client.post(TASKS, json=data)
    assert response.status_code == 202, response.get_json()
    return str(response.get_json()["id"])


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


def two_revisions(client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> str:
    """Revision 1, finished; revision 2 changes LR, adds NEW, deletes OLD, re-types the
    secret TOKEN to a new value and leaves the secret KEPT alone; both resolved."""
    task_id = create(client, env=[
        {"name": "LR", "value": "0.01"}, {"name": "OLD", "value": "gone soon"},
        {"name": "TOKEN", "value": SECRET, "secret": True},
        {"name": "KEPT", "value": SECRET + "-kept", "secret": True}])
    resolve(tasks, policies, task_id, 1)
    finish(tasks, task_id, 1)
    ok(client.patch(f"{TASKS}/{task_id}/env", json={
        "set": [{"name": "LR", "value": "0.02"}, {"name": "NEW", "value": "1"},
                {"name": "TOKEN", "value": SECRET + "-rotated", "secret": True}],
        "unset": ["OLD"]}), 202)
    resolve(tasks, policies, task_id, 2)
    return task_id


# --- list and one -------------------------------------------------------------------

def test_revisions_list_who_made_each_how_and_when_it_ran(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = two_revisions(client, tasks, policies)

    items = ok(client.get(f"{TASKS}/{task_id}/revisions"))["items"]

    assert [(r["revision"], r["how"], r["made_by"]) for r in items] == [
        (1, "create", "admin"), (2, "patch", "admin")]
    first, second = items
    assert first["state"] == states.SUCCEEDED and first["exit_code"] == 0
    assert first["made_at"] <= first["started_at"] <= first["ended_at"]
    assert second["state"] == states.RESOLVED and second["policy_version"] == 0
    assert second.get("started_at") is None and second.get("ended_at") is None


def test_one_revision_shows_its_env_resolved_env_and_outcome_with_secrets_masked(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = two_revisions(client, tasks, policies)

    response = client.get(f"{TASKS}/{task_id}/revisions/1")
    rev = ok(response)

    assert SECRET not in response.get_data(as_text=True)
    env = {e["name"]: e["value"] for e in rev["env"]}
    assert env == {"LR": "0.01", "OLD": "gone soon", "TOKEN": MASK, "KEPT": MASK}
    sources = {v["name"]: (v["source"], v["value"]) for v in rev["resolved_env"]}
    assert sources["TOKEN"] == ("user", MASK) and sources["TASK_ENV_REVISION"][1] == "1"
    assert (rev["state"], rev["exit_code"], rev["how"]) == (states.SUCCEEDED, 0, "create")
    assert rev["errors"] == [] and isinstance(rev["warnings"], list)


def test_a_revision_that_does_not_exist_is_404(client: FlaskClient,
                                               tasks: TaskStore) -> None:
    task_id = create(client)

    for n in (0, 2, 99):
        assert client.get(f"{TASKS}/{task_id}/revisions/{n}").status_code == 404
    assert client.get(f"{TASKS}/{task_id}/revisions/1/diff/3").status_code == 404


def test_someone_elses_task_is_404_on_every_revision_endpoint(
        client: FlaskClient, client_for: Callable[..., FlaskClient], tasks: TaskStore,
        policies: PolicyStore) -> None:
    task_id = two_revisions(client, tasks, policies)
    bob = client_for("bob")

    for path in ("revisions", "revisions/1", "revisions/1/diff/2", "env",
                 "env?format=dotenv"):
        response = bob.get(f"{TASKS}/{task_id}/{path}")
        assert response.status_code == 404, path
        assert SECRET not in response.get_data(as_text=True)
    assert bob.post(f"{TASKS}/{task_id}/rerun", json={"revision": 1, "pin": True}
                    ).status_code == 404


# --- diff ---------------------------------------------------------------------------

def test_diff_names_what_was_added_removed_and_changed_and_secrets_only_as_such(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = two_revisions(client, tasks, policies)

    response = client.get(f"{TASKS}/{task_id}/revisions/1/diff/2")
    diff = ok(response)

    assert SECRET not in response.get_data(as_text=True)
    assert (diff["from"], diff["to"], diff["of"]) == (1, 2, "resolved")
    assert [(a["name"], a["value"], a["source"]) for a in diff["added"]] == [
        ("NEW", "1", "user")]
    assert [(r["name"], r["value"]) for r in diff["removed"]] == [("OLD", "gone soon")]
    changed = {c["name"]: c for c in diff["changed"]}
    assert set(changed) == {"LR", "TOKEN", "TASK_ENV_REVISION"}
    assert (changed["LR"]["old"], changed["LR"]["new"], changed["LR"]["source"]) == (
        "0.01", "0.02", "user")
    assert changed["TOKEN"]["old"] == changed["TOKEN"]["new"] == MASK
    assert changed["TOKEN"]["secret"] and changed["TOKEN"]["value_changed"]
    assert "KEPT" in diff["unchanged"] and "TOKEN" not in diff["unchanged"]


def test_diff_of_the_envs_as_set(client: FlaskClient, tasks: TaskStore,
                                 policies: PolicyStore) -> None:
    task_id = two_revisions(client, tasks, policies)

    diff = ok(client.get(f"{TASKS}/{task_id}/revisions/1/diff/2?of=env"))

    assert {c["name"] for c in diff["changed"]} == {"LR", "TOKEN"}  # no platform variables
    assert {"KEPT"} == set(diff["unchanged"])


def test_diff_with_an_unresolved_revision_is_a_conflict_that_says_what_to_do(
        client: FlaskClient) -> None:
    task_id = create(client, env=[{"name": "LR", "value": "1"}])

    response = client.get(f"{TASKS}/{task_id}/revisions/1/diff/1")

    assert response.status_code == 409 and "?of=env" in response.get_json()["message"]
    assert ok(client.get(f"{TASKS}/{task_id}/revisions/1/diff/1?of=env"))["unchanged"] == [
        "LR"]


# --- rerun as it was, and drift -----------------------------------------------------

def policy_v(policies: PolicyStore, nccl: str, region: str, token: str) -> None:
    policies.put(Policy(defaults=(EnvVar("NCCL_DEBUG", nccl),
                                  EnvVar("HUB_TOKEN", token, secret=True)),
                        protected=(Protected("REGION", "data residency", region),)))


def rerun(client: FlaskClient, task_id: str, **body: Any) -> int:
    return int(ok(client.post(f"{TASKS}/{task_id}/rerun", json=body), 202)["revision"])


def first_run_then_new_policy(client: FlaskClient, tasks: TaskStore,
                              policies: PolicyStore) -> str:
    policy_v(policies, "WARN", "eu", SECRET)
    task_id = create(client, env=[{"name": "LR", "value": "0.01"}])
    resolve(tasks, policies, task_id, 1)
    finish(tasks, task_id, 1)
    policy_v(policies, "INFO", "us", SECRET + "-new")
    return task_id


def resolved_values(tasks: TaskStore, task_id: str) -> dict[str, str]:
    return {v["name"]: v["value"] for v in tasks.get(task_id)["resolved"]}


def test_a_pinned_rerun_keeps_the_old_values_but_todays_protected_ones(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = first_run_then_new_policy(client, tasks, policies)

    revision = rerun(client, task_id, revision=1, pin=True)
    resolve(tasks, policies, task_id, revision)

    values = resolved_values(tasks, task_id)
    assert values["NCCL_DEBUG"] == "WARN"  # revision 1's default, kept
    assert values["HUB_TOKEN"] == SECRET  # a secret default is pinned too, sealed as ever
    sources = {v["name"]: (v["source"], v.get("policy_version"))
               for v in tasks.get(task_id)["resolved"]}
    # Still defaults, from the policy version that gave them; only LR is the user's.
    assert sources["NCCL_DEBUG"] == sources["HUB_TOKEN"] == ("default", 1)
    assert sources["LR"][0] == "user" and tasks.get(task_id)["env"] == [
        {"name": "LR", "value": "0.01", "secret": False}]
    assert values["REGION"] == "us" and values["LR"] == "0.01"  # protected: always today's
    task = ok(client.get(f"{TASKS}/{task_id}"))
    assert (task["pinned_from"], task["rerun_of"], task["policy_version"]) == (1, 1, 2)
    drift = {d["name"]: d for d in task["drift"]}
    assert set(drift) == {"REGION"}
    assert (drift["REGION"]["old"], drift["REGION"]["new"]) == ("eu", "us")
    assert drift["REGION"]["why"] == "protected value changed (policy v1 -> v2)"
    assert ok(client.get(f"{TASKS}/{task_id}/revisions/2"))["drift"] == task["drift"]


def test_a_pinned_rerun_under_an_unchanged_policy_differs_in_nothing(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    policy_v(policies, "WARN", "eu", SECRET)
    task_id = create(client, env=[{"name": "LR", "value": "0.01"}])
    resolve(tasks, policies, task_id, 1)
    finish(tasks, task_id, 1)

    revision = rerun(client, task_id, revision=1, pin=True)
    resolve(tasks, policies, task_id, revision)

    diff = ok(client.get(f"{TASKS}/{task_id}/revisions/1/diff/{revision}"))
    # Nothing but the revision's own number, which is the platform's identity.
    assert (diff["added"], diff["removed"]) == ([], [])
    assert [c["name"] for c in diff["changed"]] == ["TASK_ENV_REVISION"]
    shown = {v["name"]: v["source"] for v in ok(client.get(f"{TASKS}/{task_id}"))["resolved_env"]}
    assert shown["NCCL_DEBUG"] == shown["HUB_TOKEN"] == "default" and shown["LR"] == "user"


def test_a_rerun_without_pin_takes_todays_policy_and_reports_the_drift(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = first_run_then_new_policy(client, tasks, policies)

    revision = rerun(client, task_id)
    resolve(tasks, policies, task_id, revision)

    values = resolved_values(tasks, task_id)
    assert (values["NCCL_DEBUG"], values["REGION"]) == ("INFO", "us")
    response = client.get(f"{TASKS}/{task_id}/revisions/{revision}")
    assert SECRET not in response.get_data(as_text=True)
    rev = ok(response)
    assert rev["rerun_of"] == 1 and rev.get("pinned_from") is None and rev["how"] == "rerun"
    drift = {d["name"]: d for d in rev["drift"]}
    assert set(drift) == {"NCCL_DEBUG", "REGION", "HUB_TOKEN"}
    assert drift["NCCL_DEBUG"]["why"] == "default changed (policy v1 -> v2)"
    assert drift["HUB_TOKEN"]["old"] == drift["HUB_TOKEN"]["new"] == MASK
    assert drift["HUB_TOKEN"]["secret"]


def test_a_rerun_of_an_older_revision_takes_that_revisions_env(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = two_revisions(client, tasks, policies)
    finish(tasks, task_id, 2)

    revision = rerun(client, task_id, revision=1)

    env = {e["name"]: e["value"] for e in tasks.get(task_id)["env"]}
    assert revision == 3 and env["LR"] == "0.01" and env["OLD"] == "gone soon"
    assert "NEW" not in env and env["TOKEN"] == SECRET


def test_pinning_a_revision_that_was_never_resolved_is_a_conflict(
        client: FlaskClient, tasks: TaskStore, move_to: MoveTo) -> None:
    task_id = create(client, env=[{"name": "1BAD", "value": "x"}])
    move_to(task_id, states.REJECTED)

    response = client.post(f"{TASKS}/{task_id}/rerun", json={"revision": 1, "pin": True})

    assert response.status_code == 409 and "without pin" in response.get_json()["message"]
    assert client.post(f"{TASKS}/{task_id}/rerun", json={"revision": 5}).status_code == 404


# --- .env text in and out -----------------------------------------------------------

def test_hostile_values_round_trip_through_env_file_and_the_dotenv_export(
        client: FlaskClient, tasks: TaskStore, policies: PolicyStore) -> None:
    text = envfile.export([{"name": k, "value": v} for k, v in EXPORTED_VALUES.items()])
    task_id = create(client, env=[{"name": k, "value": HOSTILE[k]} for k in LEFT_OUT]
                     + [{"name": "TOKEN", "value": SECRET, "secret": True}], env_file=text)
    resolve(tasks, policies, task_id, 1)

    for query in ("", "&resolved=true"):
        response = client.get(f"{TASKS}/{task_id}/env?format=dotenv{query}")
        assert response.status_code == 200 and response.mimetype == "text/plain"
        exported = response.get_data(as_text=True)
        entries, problems = envfile.parse(exported)
        values = {e["name"]: e["value"] for e in entries}
        assert problems == [] and SECRET not in exported
        assert {k: values[k] for k in EXPORTED_VALUES} == EXPORTED_VALUES
        assert not LEFT_OUT & set(values) and "TOKEN" not in values
        assert "'TOKEN' is not exported: it is secret" in exported
        for name in LEFT_OUT:
            assert f"{name!r} is not exported: its value holds" in exported


def test_plain_get_env_answers_both_envs_masked(client: FlaskClient) -> None:
    task_id = create(client, env=[{"name": "TOKEN", "value": SECRET, "secret": True}])

    response = client.get(f"{TASKS}/{task_id}/env")

    assert SECRET not in response.get_data(as_text=True)
    assert ok(response) == {"revision": 1, "resolved_env": None,
                            "env": [{"name": "TOKEN", "value": MASK, "secret": True}]}
    assert client.get(f"{TASKS}/{task_id}/env?format=dotenv&resolved=true").status_code == 409


def test_env_file_problems_name_the_line_and_the_variable(client: FlaskClient) -> None:
    body = {"name": "t", "steps": [["true"]]}

    bad = client.post(TASKS, json={**body, "env_file": "A=1\nB='unclosed\n"})
    both = client.post(TASKS, json={**body, "env_file": "LR=1\n",
                                    "env": [{"name": "LR", "value": "2"}]})

    assert bad.status_code == 422 and "line 2" in bad.get_json()["errors"][0]["message"]
    assert both.status_code == 422
    [problem] = both.get_json()["errors"]
    assert (problem["variable"], problem["rule"]) == ("LR", "env_file.conflict")


def test_patch_takes_env_file_alongside_set(client: FlaskClient, tasks: TaskStore,
                                            move_to: MoveTo) -> None:
    task_id = create(client, env=[{"name": "LR", "value": "0.01"}])
    move_to(task_id, states.SUCCEEDED)

    conflict = client.patch(f"{TASKS}/{task_id}/env", json={
        "set": [{"name": "A", "value": "1"}], "env_file": "A=2\n"})
    ok(client.patch(f"{TASKS}/{task_id}/env", json={
        "set": [{"name": "A", "value": "1"}], "env_file": "export LR=0.1\nB='x y'\n"}), 202)

    assert conflict.status_code == 422 and conflict.get_json()["errors"][0]["variable"] == "A"
    env = {e["name"]: e["value"] for e in tasks.get(task_id)["env"]}
    assert env == {"LR": "0.1", "A": "1", "B": "x y"}
