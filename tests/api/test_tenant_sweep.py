"""A tenant sees only its own scopes: every route that answers with names, swept.

Project p2 holds names of its own everywhere a name can be held — its policy's
defaults, protected entries and rules, its catalog, a task of one of its members —
and the platform holds entries only for p2's tasks (``when: {project: p2}``).  A member
of p1 (a plain token) and p1's maintainer then walk every GET route of the API and the
console, each with the ids and names of their own, plus the preview; no answer may
name any of p2's names, nor p2 itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from shared.env.envlist import Limits
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from tests.api.conftest import Browser, task_body
from workers import stages

HIDDEN = ("P2_ONLY_DEFAULT", "P2_ONLY_PROTECTED", "P2_ONLY_RULE", "P2_ONLY_CATALOG",
          "P2_TASK_VAR", "PLATFORM_FOR_P2", "s3://p2-bucket", "p2-secret-reason")
# The project's name as a word (not inside a token or an id).
P2 = re.compile(r"(?<![\w-])p2(?![\w-])")
# Routes with no tenant data to name: static files, the console's catch-all, and the
# metrics (aggregates by state, tested on their own).
NOT_WALKED = {"/static/<path:filename>", "/ui/<path:unknown>", "/metrics"}


def resolve(tasks: TaskStore, policies: PolicyStore, task_id: str) -> None:
    revision = tasks.get(task_id)["revision"]
    if stages.validate(tasks, Limits(), task_id, revision):
        stages.apply_policy(tasks, policies, task_id, revision)


@pytest.fixture
def world(client: FlaskClient, client_for: Callable[..., FlaskClient], tasks: TaskStore,
          app: Flask) -> dict[str, Any]:
    for name, members, maintainers in (("p1", ["alice"], ["carol"]), ("p2", ["bob"], [])):
        made = client.post("/api/v1/projects", json={"name": name, "members": members,
                                                     "maintainers": maintainers})
        assert made.status_code == 201, made.get_json()
    platform = {"defaults": [{"name": "PLATFORM_FOR_P2", "value": "s3://p2-bucket",
                              "when": {"project": "p2"}},
                             {"name": "SHARED_DEFAULT", "value": "1"}], "protected": []}
    assert client.put("/api/v1/policy", json=platform).status_code == 200
    p2 = {"defaults": [{"name": "P2_ONLY_DEFAULT", "value": "x"}],
          "protected": [{"name": "P2_ONLY_PROTECTED", "value": "y",
                         "reason": "p2-secret-reason"}],
          "rules": [{"name": "P2_ONLY_RULE", "allowed": ["a"], "description": "p2's"}]}
    assert client.put("/api/v1/projects/p2/policy", json=p2).status_code == 200
    assert client.put("/api/v1/catalog/entries/P2_ONLY_CATALOG?project=p2",
                      json={"description": "p2's own"}).status_code == 200
    policies = app.extensions["taskenv"].policies
    bob, alice = client_for("bob"), client_for("alice")
    theirs = bob.post("/api/v1/tasks", json=task_body(
        project="p2", env=[{"name": "P2_TASK_VAR", "value": "1"}])).get_json()["id"]
    resolve(tasks, policies, theirs)
    mine = alice.post("/api/v1/tasks", json=task_body(project="p1")).get_json()["id"]
    resolve(tasks, policies, mine)
    changed = alice.patch(f"/api/v1/tasks/{mine}/env",
                          json={"set": [{"name": "LR", "value": "0.2"}]})
    assert changed.status_code == 202, changed.get_json()
    resolve(tasks, policies, mine)
    return {"mine": mine, "theirs": theirs}


def paths(app: Flask, task_id: str) -> list[str]:
    """Every GET route, with the walker's own task and project in its parameters, and the
    query strings that change what a route lists."""
    values = {"task_id": task_id, "name": "p1", "version": "1", "number": "1", "old": "1",
              "new": "2"}
    found = []
    for rule in app.url_map.iter_rules():
        if "GET" not in (rule.methods or ()) or rule.rule in NOT_WALKED:
            continue
        path = rule.rule
        for arg in rule.arguments:
            kind = next(p for p in path.split("<")[1:] if p.split(">")[0].endswith(arg))
            path = path.replace("<" + kind.split(">")[0] + ">", values[arg])
        found.append(path)
    found += ["/api/v1/catalog?project=p1", "/ui/catalog?project=p1",
              f"/api/v1/tasks/{task_id}/env?resolved=true",
              f"/api/v1/tasks/{task_id}/env?format=dotenv&resolved=true",
              "/api/v1/tasks?project=p1", "/ui/policy?project=p1"]
    return sorted(found)


@pytest.mark.parametrize("who", ["alice", "carol"])  # a member, the project's maintainer
def test_no_route_names_another_projects_scope_to_a_tenant(
        who: str, world: dict[str, Any], app: Flask,
        client_for: Callable[..., FlaskClient]) -> None:
    api = client_for(who)
    browser = Browser(app.test_client())
    token, _ = app.extensions["taskenv"].tokens.create(who, "user", "sweep")
    assert browser.login(token).status_code in (302, 303)
    walked = 0
    for path in paths(app, world["mine"]):
        for answer in (api.get(path), browser.get(path)):
            text = answer.get_data(as_text=True)
            leaked = [name for name in (*HIDDEN, world["theirs"]) if name in text]
            assert not leaked, f"{path} ({answer.status_code}) names {leaked}"
            assert not P2.search(text), f"{path} names p2"
            walked += 1
    for body in ({"project": "p1", "env": [{"name": "P2_ONLY_DEFAULX", "value": "1"}]},
                 {"env": []}):
        text = api.post("/api/v1/env/preview", json=body).get_data(as_text=True)
        assert not [n for n in HIDDEN if n in text] and not P2.search(text)
    assert walked > 60  # every route twice, as the API and the console answer it
