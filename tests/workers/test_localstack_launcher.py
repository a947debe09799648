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


@pytest.mark.sandbox
def test_make_run_says_at_start_when_steps_cannot_be_contained_and_how_to_run_anyway() -> None:
    unwritable = Settings(local_cgroup_parent="/taskenv-no-such-parent/x")
    problem = launcher_problem(unwritable)
    assert problem is not None and "cannot contain steps" in problem
    assert "TASKENV_LOCAL_CONTAINMENT=warn" in problem
    assert launcher_problem(Settings(local_cgroup_parent="/taskenv-no-such-parent/x",
                                     local_containment="warn")) is None
