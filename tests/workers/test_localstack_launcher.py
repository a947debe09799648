"""make run says at start, once, when its launcher cannot run any task here."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config import Settings
from workers.localstack import launcher_problem


def test_a_missing_bwrap_is_named_with_how_to_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap anywhere on it
    problem = launcher_problem(Settings())
    assert problem is not None and "apt-get install bubblewrap" in problem


def test_other_launchers_and_a_present_bwrap_are_fine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert launcher_problem(Settings(launcher="dryrun")) is None
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert launcher_problem(Settings()) is None
