"""Run ``taskenv`` commands in-process against the fake API, with their output captured."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import cli.commands.env
import cli.commands.tasks
from cli.follow import Follower
from cli.main import main
from tests.cli.fake_api import FakeApi, serving

TOKEN = "tok_cli-tests-secret-token"  # noqa: S105 - a test token, checked never to be printed


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with serving() as fake:
        yield fake


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads the real user's config file or environment."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))
    monkeypatch.delenv("TASKENV_URL", raising=False)
    monkeypatch.delenv("TASKENV_TOKEN", raising=False)
    return tmp_path / "config-home" / "taskenv" / "config.toml"


@pytest.fixture(autouse=True)
def follow_on_a_clock_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A follow's pauses (0.3 s between polls, backing off to 2 s) pass on a clock of the
    follow's own, not in real time: the fake API answers each poll in turn, whenever it
    comes, and the elapsed times printed are still the pauses' sum."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    for module in (cli.commands.tasks, cli.commands.env):
        monkeypatch.setattr(module, "Follower",
                            functools.partial(Follower, sleep=sleep, clock=lambda: now[0]))


@pytest.fixture
def run(api: FakeApi, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    monkeypatch.setenv("TASKENV_URL", api.base)
    monkeypatch.setenv("TASKENV_TOKEN", TOKEN)

    def invoke(*args: str) -> Result:
        code = main(list(args))
        captured = capsys.readouterr()
        assert TOKEN not in captured.out + captured.err
        return Result(code, captured.out, captured.err)

    return invoke
