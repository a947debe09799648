"""The dry-run launcher runs nothing and records what a launch would place and run."""

from __future__ import annotations

from shared.policy.model import Resolved
from shared.task.files import TaskFile
from shared.task.workload import Workload
from tests.workers.conftest import RecordingHooks
from workers.launchers.dryrun.launcher import DryRunLauncher


def test_a_dry_run_records_the_task_s_files() -> None:
    workload = Workload(task_id="t1", revision=1, name="dry", policy_version=1,
                        steps=(("sh", "prepare.sh"),), env=(Resolved("A", "1", "user"),),
                        files=(TaskFile("prepare.sh", "echo hi\n", 0o755),
                               TaskFile("conf/a.yaml", "x: 1\n")))
    hooks = RecordingHooks()
    outcome = DryRunLauncher().launch(workload, hooks.hooks)
    assert outcome.state == "succeeded" and hooks.started == 1
    assert "1 steps, 1 variables, 2 files" in hooks.text
    assert "file prepare.sh (8 bytes, mode 755)" in hooks.text
    assert "file conf/a.yaml (5 bytes, mode 644)" in hooks.text
