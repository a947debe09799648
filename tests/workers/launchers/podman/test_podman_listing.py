"""The podman launcher's ``changes``: one ``podman ps`` per pass, whatever runs.

A fake ``podman`` on PATH (a shell script) prints a listing the test writes and
records every call, so no podman is needed.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from shared.config import Settings
from shared.task import manifest
from tests.workers.conftest import build_workload
from workers.launchers.base import Change, Outcome
from workers.launchers.podman.launcher import POD_REMOVED, PodmanLauncher

FAKE_PODMAN = """#!/bin/sh
echo "$*" >> "$FAKE_PODMAN_DIR/calls"
case "$1" in
  ps) cat "$FAKE_PODMAN_DIR/listing.json" ;;
  container) cat "$FAKE_PODMAN_DIR/inspect.json" ;;
  volume) [ "$2" = ls ] && echo '[]' ;;
  pod) [ "$2" = rm ] || [ "$2" = stop ] ;;
  *) echo "unexpected: $*" >&2; exit 125 ;;
esac
"""


class FakePodman:
    def __init__(self, home: Path) -> None:
        self.home = home

    def lists(self, containers: list[dict[str, Any]]) -> None:
        (self.home / "listing.json").write_text(json.dumps(containers))

    def inspects(self, state: dict[str, Any]) -> None:
        (self.home / "inspect.json").write_text(json.dumps([{"State": state}]))

    def calls(self) -> list[str]:
        path = self.home / "calls"
        return path.read_text().splitlines() if path.exists() else []


def install_fake(home: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> FakePodman:
    """``script`` as the ``podman`` on the PATH, its calls and answers kept in ``home``."""
    home.mkdir(exist_ok=True)
    program = home / "podman"
    program.write_text(script)
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{home}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_PODMAN_DIR", str(home))
    return FakePodman(home)


@pytest.fixture
def podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePodman:
    return install_fake(tmp_path, monkeypatch, FAKE_PODMAN)


def listed(workload: Any, state: str = "running", exit_code: int = 0) -> dict[str, Any]:
    """One container of ``podman ps --all --format json``, as kube play labels it."""
    return {"Names": [f"{workload.run_name}-{manifest.CONTAINER_NAME}"], "State": state,
            "ExitCode": exit_code, "Labels": manifest.task_labels(workload)}


def test_one_listing_per_pass_reports_only_what_changed(podman):
    launcher = PodmanLauncher(Settings(launcher="podman"))
    done, oom, removed, steady = (build_workload([["true"]]) for _ in range(4))
    podman.lists([listed(w) for w in (done, oom, removed, steady)])

    first = launcher.changes()
    podman.lists([listed(done, "exited", 0), listed(oom, "exited", 137), listed(steady)])
    podman.inspects({"Status": "exited", "ExitCode": 137, "OOMKilled": True})
    second = launcher.changes()
    again = launcher.changes()  # not recorded yet: the ends are reported again
    for change in second:
        launcher.applied(change)  # recorded: the ended pods are removed
    podman.lists([listed(steady)])
    third = launcher.changes()

    assert {(c.task_id, c.outcome) for c in first} == {
        (w.task_id, Outcome("running")) for w in (done, oom, removed, steady)}
    assert set(second) == {
        Change(done.task_id, 1, Outcome("succeeded", exit_code=0)),
        Change(oom.task_id, 1, Outcome("failed", 137, "container killed: out of memory")),
        Change(removed.task_id, 1, None, POD_REMOVED)}
    assert set(again) == set(second)
    assert third == []  # the pods removed once recorded are no news
    assert launcher.seen(oom) is None and launcher.seen(removed) is None
    assert launcher.seen(steady) == Outcome("running")
    calls = podman.calls()
    listings = [c for c in calls if c.startswith("ps ")]
    assert listings == ["ps --all --filter label=app.kubernetes.io/managed-by=taskenv "
                        "--format json"] * 4
    assert len([c for c in calls if c.startswith("container ")]) == 1  # the failed one, once
    assert [c for c in calls if c.startswith("pod ")] == [
        c for w in (done, oom) for c in (f"pod stop --ignore --time 0 {w.run_name}",
                                         f"pod rm --force --ignore {w.run_name}")]
    assert len([c for c in calls if c.startswith("volume rm")]) == 3  # and what each left
    assert [c for c in calls if c.startswith("volume ls")] == ["volume ls --format json"]


def test_containers_of_no_task_are_ignored(podman):
    launcher = PodmanLauncher(Settings(launcher="podman"))
    podman.lists([{"Names": ["abc-infra"], "State": "running", "Labels": {}},
                  {"Names": ["other-task"], "State": "exited", "ExitCode": 1,
                   "Labels": {manifest.LABEL_TASK_ID: "x", manifest.LABEL_REVISION: "two"}}])

    assert launcher.changes() == []
