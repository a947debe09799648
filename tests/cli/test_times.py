"""Every time the CLI prints names its zone: the reader's, as an ISO 8601 offset."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from cli import render
from tests.cli.fake_api import Answer, FakeApi

AT = "2026-12-01T15:04:05.123Z"
# A POSIX zone needs no tz database: five and a half hours east of UTC.
IN_KOLKATA = "2026-12-01T20:34:05+05:30"


@pytest.fixture
def reader_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def set_zone(zone: str) -> None:
        monkeypatch.setenv("TZ", zone)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()  # the process's zone back as it was, for the tests after


def test_a_time_is_shown_in_the_readers_zone_with_its_offset(reader_zone):
    reader_zone("IST-5:30")
    assert render.when(AT) == IN_KOLKATA
    reader_zone("UTC0")
    assert render.when(AT) == "2026-12-01T15:04:05+00:00"


def test_a_time_without_a_zone_is_never_passed_off_as_the_readers(reader_zone):
    reader_zone("IST-5:30")
    assert render.when("2026-12-01T15:04:05") == "2026-12-01T15:04:05 (time zone unknown)"
    assert render.when("") == "" and render.when(None) == ""


def answers(api: FakeApi) -> None:
    """A time in every answer that the CLI prints one from."""
    api.on("GET", "/tasks/t1", Answer(200, {
        "id": "t1", "status": "cancelled", "revision": 1, "errors": [], "warnings": [],
        "created_at": AT, "updated_at": AT, "cancelled_by": "ann", "cancelled_at": AT}))
    api.on("GET", "/tasks", Answer(200, {"items": [
        {"id": "t1", "name": "n", "status": "running", "revision": 1, "updated_at": AT}],
        "next_cursor": None}))
    api.on("GET", "/tokens", Answer(200, {"items": [
        {"id": "k1", "owner": "bob", "role": "user", "created_at": AT}]}))
    policy = {"version": 1, "author": "admin", "created_at": AT, "defaults": [],
              "protected": [], "on_conflict": "reject"}
    api.on("GET", "/policy", Answer(200, policy))
    api.on("GET", "/policy/versions", Answer(200, {"current": 1, "versions": [1]}))
    api.on("GET", "/policy/versions/1", Answer(200, policy))
    api.on("GET", "/tasks/t1/revisions", Answer(200, {"items": [
        {"revision": 1, "state": "succeeded", "made_at": AT, "started_at": AT,
         "ended_at": AT}]}))


@pytest.mark.parametrize(("command", "times"), [
    (("show", "t1"), 3), (("tasks",), 1), (("tokens", "list"), 1), (("policy", "get"), 1),
    (("policy", "history"), 1), (("revisions", "t1"), 3)])
def test_every_command_that_prints_a_time_names_its_zone(api: FakeApi, run, reader_zone,
                                                         command: tuple[str, ...],
                                                         times: int):
    reader_zone("IST-5:30")
    answers(api)

    result = run(*command)

    assert result.code == 0, result.err
    assert result.out.count(IN_KOLKATA) == times, result.out
    assert "2026-12-01 " not in result.out  # no time left without its zone
