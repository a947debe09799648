"""``taskenv projects``: what each command sends to /api/v1/projects and what it prints."""

from __future__ import annotations

import json
from typing import Any

from cli import render
from tests.cli.fake_api import Answer, FakeApi, api_error

VISION = {"name": "vision", "members": ["alice", "bob"], "maintainers": ["carol"],
          "created_by": "admin", "created_at": "2026-12-01T15:04:05.123Z", "policy_version": 2}


def project(**changes: Any) -> Answer:
    return Answer(200, {**VISION, **changes})


def test_list_shows_each_project_with_its_people(api: FakeApi, run) -> None:
    api.on("GET", "/projects", Answer(200, {"items": [VISION, {
        "name": "audio", "members": [], "maintainers": [], "policy_version": 0}]}))

    result = run("projects", "list")
    as_json = run("projects", "list", "--json")

    assert result.code == as_json.code == 0
    rows = {r.split("│")[1].strip(): r for r in result.out.splitlines() if r.count("│") > 2}
    assert "alice, bob" in rows["vision"] and "carol" in rows["vision"]
    assert render.when(VISION["created_at"]) in rows["vision"]  # with its zone
    assert "audio" in rows and "2 project(s)" in result.err
    assert [p["name"] for p in json.loads(as_json.out)] == ["vision", "audio"]


def test_show_reads_the_project(api: FakeApi, run) -> None:
    api.on("GET", "/projects/vision", project())

    result = run("projects", "show", "vision")

    assert result.code == 0
    rows = result.out.splitlines()
    assert any(r.startswith("members") and "alice, bob" in r for r in rows)
    assert any(r.startswith("maintainers") and "carol" in r for r in rows)
    assert any(r.startswith("policy version") and "2" in r for r in rows)


def test_show_for_a_non_admin_finds_the_project_among_their_own(api: FakeApi, run) -> None:
    for name in ("vision", "secret-project"):
        api.on("GET", f"/projects/{name}", api_error(403, "forbidden", "only admins"))
    api.on("GET", "/projects", Answer(200, {"items": [VISION]}))

    shown = run("projects", "show", "vision")
    other = run("projects", "show", "secret-project")

    assert shown.code == 0 and "alice, bob" in shown.out
    assert other.code == 5 and "only admins" in other.err  # the API's refusal, as it was


def test_a_project_name_is_one_path_segment(api: FakeApi, run) -> None:
    run("projects", "show", "../tokens")

    assert api.seen[0].path == "/api/v1/projects/..%2Ftokens"


def test_create_sends_the_name_members_and_maintainers(api: FakeApi, run) -> None:
    api.on("POST", "/projects", Answer(201, VISION))

    result = run("projects", "create", "vision", "--member", "alice", "--member", "bob",
                 "--maintainer", "carol")

    assert result.code == 0 and "project vision created" in result.err
    assert api.seen[0].body == {"name": "vision", "members": ["alice", "bob"],
                                "maintainers": ["carol"]}


def test_members_sends_only_the_lists_that_change(api: FakeApi, run) -> None:
    api.on("GET", "/projects/vision", project())
    api.on("PATCH", "/projects/vision", project(members=["alice", "dave"]))

    result = run("projects", "members", "vision", "--add", "dave", "--add", "alice",
                 "--remove", "bob")

    assert result.code == 0, result.err
    assert api.requests_to("PATCH", "/projects/vision")[0].body == {
        "members": ["alice", "dave"]}
    assert "members changed" in result.err and "alice, dave" in result.out


def test_members_changes_maintainers_too(api: FakeApi, run) -> None:
    api.on("GET", "/projects/vision", project())
    api.on("PATCH", "/projects/vision", project(maintainers=["erin"]))

    result = run("projects", "members", "vision", "--add-maintainer", "erin",
                 "--remove-maintainer", "carol")

    assert result.code == 0
    assert api.requests_to("PATCH", "/projects/vision")[0].body == {"maintainers": ["erin"]}


def test_members_refuses_to_remove_someone_not_in_the_list(api: FakeApi, run) -> None:
    api.on("GET", "/projects/vision", project())

    result = run("projects", "members", "vision", "--remove", "bobby")

    assert result.code == 4 and "bobby" in result.err
    assert not api.requests_to("PATCH", "/projects/vision")


def test_members_with_nothing_to_change_sends_nothing(api: FakeApi, run) -> None:
    api.on("GET", "/projects/vision", project())

    result = run("projects", "members", "vision", "--add", "alice")

    assert result.code == 0 and "nothing to change" in result.err
    assert not api.requests_to("PATCH", "/projects/vision")


def test_delete_and_a_refusal_exit_as_documented(api: FakeApi, run) -> None:
    api.on("DELETE", "/projects/vision", Answer(204, ""))
    api.on("POST", "/projects", api_error(403, "forbidden", "only an admin may manage "
                                                            "projects"))

    deleted = run("projects", "delete", "vision")
    refused = run("projects", "create", "audio")

    assert deleted.code == 0 and "project vision deleted" in deleted.err
    assert refused.code == 5 and "only an admin may manage projects" in refused.err
