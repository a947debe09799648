"""A hostile or compromised server: what it answers never drives the user's terminal.

Escape sequences (colour, clearing the screen, setting the window title, a C1 CSI) and
rich markup in a task's name, a variable, a status, a problem or a log are printed as
inert text; the token is printed once, by ``tokens create``, and nowhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import TOKEN
from tests.cli.fake_api import Answer, FakeApi, Log, api_error

ESCAPES = ["\x1b[2J\x1b[H", "\x1b]0;pwned\x07", "\x1b[31mred", "\x9b31m", "\x07", "\x08\x08"]
HOSTILE = "".join(ESCAPES)
MARKUP = "[bold red]loud[/bold red][link=https://evil.example]click[/link]"


def assert_inert(text: str) -> None:
    for raw in ("\x1b", "\x9b", "\x07", "\x08"):
        assert raw not in text, repr(text)


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    path = tmp_path / "task.yaml"
    path.write_text("name: demo\nsteps:\n  - [true]\n", encoding="utf-8")
    return path


def hostile_task(**extra: Any) -> Answer:
    return Answer(200, {"id": "t1" + HOSTILE, "name": "n" + HOSTILE + MARKUP, "revision": 1,
                        "status": "failed", "errors": [], "warnings": [
                            {"variable": "V" + HOSTILE, "rule": "r" + HOSTILE,
                             "message": "m" + HOSTILE}],
                        "reason": "why" + HOSTILE, "exit_code": 1, **extra})


def test_a_task_list_with_escapes_and_markup_in_names_prints_them_inert(api: FakeApi, run):
    api.on("GET", "/tasks", Answer(200, {"items": [
        {"id": "t1", "name": HOSTILE + MARKUP, "status": "running" + HOSTILE,
         "owner": "o" + HOSTILE, "revision": 1}], "next_cursor": None}))

    result = run("tasks")

    assert_inert(result.out + result.err)
    assert "[bold red]" in result.out  # shown as typed, not read as markup


def test_an_env_table_with_escapes_and_markup_prints_them_inert(api: FakeApi, run):
    api.on("GET", "/tasks/t1", hostile_task(resolved_env=[
        {"name": "N" + HOSTILE, "value": MARKUP + HOSTILE, "source": "user" + HOSTILE}]))

    result = run("env", "get", "t1")

    assert_inert(result.out + result.err)
    assert "[bold red]" in result.out


def test_a_diff_with_escapes_in_names_and_sources_prints_them_inert(api: FakeApi, run):
    diff = {"added": [{"name": "A" + HOSTILE, "value": "v" + HOSTILE, "source": HOSTILE}],
            "removed": [{"name": "R" + HOSTILE, "value": "v", "source": "s" + HOSTILE}],
            "changed": [{"name": "C" + HOSTILE + MARKUP, "old": HOSTILE, "new": "x",
                         "source": HOSTILE, "secret": False}]}
    api.on("GET", "/tasks/t1/revisions/1/diff/2", Answer(200, diff))

    result = run("env", "diff", "t1", "1", "2")

    assert_inert(result.out + result.err)
    assert MARKUP in result.out


def test_logs_with_escape_sequences_are_printed_inert_lines_and_tabs_kept(api: FakeApi, run):
    api.on("GET", "/tasks/t1/logs", Log(200, "epoch\t1\n" + HOSTILE + "\nloss 0.1\n"))

    result = run("logs", "t1")

    assert_inert(result.out)
    assert result.out.startswith("epoch\t1\n") and result.out.endswith("\nloss 0.1\n")


def test_followed_logs_and_states_with_escapes_are_printed_inert(api: FakeApi, run,
                                                                  task_file: Path):
    api.on("POST", "/tasks", Answer(202, {"id": "t1", "url": "/api/v1/tasks/t1",
                                          "revision": 1, "status": "pending" + HOSTILE}))
    api.on("GET", "/tasks/t1", hostile_task())
    api.on("GET", "/tasks/t1/logs", Log(200, "out " + HOSTILE + "\n"))

    result = run("submit", str(task_file), "--follow")

    assert_inert(result.out + result.err)


def test_an_api_error_with_escapes_in_its_code_and_problems_prints_them_inert(
        api: FakeApi, run):
    api.on("GET", "/tasks/t1", api_error(404, "not_found" + HOSTILE, "gone" + HOSTILE,
                                         {"variable": "V" + HOSTILE, "rule": "r" + HOSTILE,
                                          "message": MARKUP + HOSTILE}))

    result = run("env", "get", "t1")

    assert result.code != 0
    assert_inert(result.out + result.err)
    assert MARKUP in result.err


def test_a_preview_and_a_policy_with_escapes_print_them_inert(api: FakeApi, run,
                                                               task_file: Path):
    api.on("POST", "/env/preview", Answer(200, {
        "ok": False, "policy_version": 1, "variables": [{"name": HOSTILE, "value": MARKUP}],
        "warnings": [], "errors": [{"variable": HOSTILE, "rule": HOSTILE, "message": MARKUP}]}))
    api.on("GET", "/policy", Answer(200, {
        "version": 1, "on_conflict": "reject" + HOSTILE, "author": HOSTILE,
        "defaults": [{"name": HOSTILE, "value": MARKUP}],
        "protected": [{"name": "P", "value": HOSTILE, "reason": MARKUP}]}))

    previewed = run("preview", str(task_file))
    shown = run("policy", "get")

    assert_inert(previewed.out + previewed.err + shown.out + shown.err)


def test_set_env_and_tokens_print_the_servers_words_inert(api: FakeApi, run):
    api.on("PATCH", "/tasks/t1/env", Answer(202, {"id": "t1" + HOSTILE, "revision": 2,
                                                   "status": "pending" + HOSTILE}))
    api.on("POST", "/tokens", Answer(201, {"id": "i" + HOSTILE, "owner": "o" + HOSTILE,
                                           "role": "user" + HOSTILE,
                                           "token": "tok_made" + HOSTILE}))

    changed = run("env", "set", "t1", "A=1")
    made = run("tokens", "create", "bob")

    assert_inert(changed.out + changed.err + made.out + made.err)


def test_the_token_is_printed_once_on_create_and_never_otherwise(api: FakeApi, run):
    made_token = "tok_freshly-made-token-value"
    api.on("POST", "/tokens", Answer(201, {"id": "i1", "owner": "bob", "role": "user",
                                           "token": made_token}))
    api.on("GET", "/tokens", Answer(200, {"items": [
        {"id": "i1", "owner": "bob", "role": "user", "token": made_token}]}))
    api.on("GET", "/tasks/t1", api_error(401, "unauthorized", "bad token " + TOKEN,
                                         {"rule": "auth", "message": "got " + TOKEN}))

    made = run("tokens", "create", "bob")
    listed = run("tokens", "list")
    failed = run("env", "get", "t1")

    assert (made.out + made.err).count(made_token) == 1
    assert made_token not in listed.out + listed.err
    assert TOKEN not in failed.out + failed.err  # the run fixture checks every command too
    assert "bad token [token]" in failed.err


def test_a_reason_of_several_lines_forges_no_line_at_the_margin_and_stays_inert(
        api: FakeApi, run, task_file: Path):
    forged = "task t1 succeeded"
    reason = f"why\n{forged}\r{HOSTILE}\n{MARKUP}"
    api.on("POST", "/tasks", Answer(202, {"id": "t1", "url": "/api/v1/tasks/t1",
                                          "revision": 1, "status": "pending"}))
    api.on("GET", "/tasks/t1", hostile_task(reason=reason))
    api.on("GET", "/tasks/t1/logs", Log(200, ""))
    api.on("GET", "/tasks/t2", api_error(409, "conflict", reason))

    followed = run("submit", str(task_file), "--follow")
    shown = run("show", "t1")
    refused = run("env", "get", "t2")

    for result in (followed, shown, refused):
        assert_inert(result.out + result.err)
        assert not any(r.startswith(forged) for r in (result.out + result.err).splitlines())
    assert f"\n  {forged}\n" in followed.err  # the reason's own line, indented under it
    assert "[bold red]" in refused.err
