"""A revision that ran on this host is never run again, even once Redis forgot its end.

A failover can lose the old primary's last writes, the outcome a runner recorded among
them; the task is then found one state back.  The launcher keeps how each revision ended
(workers/launchers/local/ended.py) past its run directory, and gives it back.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from shared.config import Settings
from shared.store.tasks import TaskStore
from shared.task import states
from tests.workers.launchers.local.test_containment import (
    final,
    launch,
    redis_server,
    settings,
    tasks,
)
from workers.launchers.base import Hooks, Outcome
from workers.launchers.local import ended
from workers.launchers.local.launcher import LocalLauncher, runner_alive
from workers.reconcile import reconcile_once

__all__ = ["redis_server", "settings", "tasks"]  # the fixtures, shared

DONE = Outcome(states.SUCCEEDED, 0)


def test_a_record_lives_one_to_two_buckets_and_names_its_revision(tmp_path: Path) -> None:
    start = 1000 * ended.BUCKET_SECONDS + ended.BUCKET_SECONDS - 1  # a bucket's last second
    ended.keep(tmp_path, "t1", 2, 17.5, DONE, start)
    assert ended.find(tmp_path, "t1", 2, 17.5, start) == DONE
    assert ended.find(tmp_path, "t1", 2, 99.0, start) is None  # the number made again
    assert ended.find(tmp_path, "t1", 3, 17.5, start) is None
    later = start + ended.BUCKET_SECONDS  # the next bucket, to its end
    ended.expire(tmp_path, later)
    assert ended.find(tmp_path, "t1", 2, 17.5, later) == DONE
    gone = start + 1 + ended.BUCKET_SECONDS  # two buckets on: the record's bucket goes
    ended.expire(tmp_path, gone)
    assert ended.find(tmp_path, "t1", 2, 17.5, gone) is None
    assert list((tmp_path / ended.LEDGER).iterdir()) == []


@pytest.mark.sandbox
def test_a_forgotten_run_is_recorded_again_and_not_run_twice(tasks: TaskStore,
                                                            settings: Settings) -> None:
    job = launch(tasks, settings, [["sh", "-c", "echo RAN-ONCE"]])
    assert final(tasks, job.task_id)["state"] == states.SUCCEEDED and job.made_at > 0
    run_dir = Path(settings.work_dir).resolve() / job.task_id / "r1"
    while runner_alive(run_dir):
        time.sleep(0.05)
    launcher = LocalLauncher(Settings(**{**settings.__dict__, "stuck_after_seconds": 0}))
    remade = dataclasses.replace(job, made_at=job.made_at + 1)  # the number made again
    assert launcher.observe(job) == DONE and launcher.observe(remade) is None
    reconcile_once(tasks, launcher, lambda *a: None, stuck_after=60)  # applied
    reconcile_once(tasks, launcher, lambda *a: None, stuck_after=60)  # and forgotten
    assert not run_dir.exists()

    said: list[str] = []
    outcome = launcher.launch(job, Hooks(started=lambda: said.append("started"),
                                         log=said.append))
    assert outcome == DONE and not run_dir.exists()  # nothing started
    assert "already ran on this host" in "".join(said) and "started" not in said
    assert launcher.observe(job) == DONE  # what the reconciler's look finds too
    assert launcher.observe(remade) is None
    assert tasks.read_log(job.task_id, 1).count("RAN-ONCE") == 1
