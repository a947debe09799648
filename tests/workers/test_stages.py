"""The three stages on fakeredis, with a hand-written launcher."""

from __future__ import annotations

from typing import Any

import pytest

from shared.env.envlist import EnvVar, Limits
from shared.errors import LaunchFailed, TransientError
from shared.policy.model import Policy, Protected
from shared.policy.store import PolicyStore
from shared.secrets import REDACTED
from shared.store.tasks import TaskStore
from shared.task import records, states
from shared.task.replica_logs import platform_line
from shared.task.workload import Workload
from workers import outcomes, stages
from workers.launchers.base import Hooks, Outcome

LIMITS = Limits()


class FakeLauncher:
    """Records every launch; reports start, one log line and a chosen outcome."""

    name = "fake"
    sweep_every_pass = True
    never_starts: frozenset[str] = frozenset()

    def __init__(self, outcome: Outcome | None = None, error: Exception | None = None,
                 start: bool = True, output: str | None = None) -> None:
        self.outcome = outcome or Outcome(states.SUCCEEDED, exit_code=0)
        self.error = error
        self.start = start
        self.output = output
        self.launched: list[Workload] = []

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        self.launched.append(workload)
        if self.start:
            hooks.started()
        hooks.log(self.output if self.output is not None else f"hello from {workload.name}\n")
        if self.error is not None:
            raise self.error
        return self.outcome

    def observe(self, workload: Workload) -> Outcome | None:
        return None

    def logs(self, workload: Workload) -> str | None:
        return None


def submit(tasks: TaskStore, env: list[dict[str, Any]] | None = None) -> str:
    doc, _ = tasks.create(records.new_task(
        {"name": "train", "steps": [["python3", "train.py"]], "env": env or []}, "alice"))
    return doc["id"]


def history(tasks: TaskStore, task_id: str) -> list[str]:
    return [e["state"] for e in tasks.get(task_id)["events"]]


def resolved(tasks: TaskStore, task_id: str) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in tasks.get(task_id)["resolved"]}


def run_all(tasks: TaskStore, policies: PolicyStore, launcher: FakeLauncher,
            task_id: str, revision: int = 1) -> None:
    if stages.validate(tasks, LIMITS, task_id, revision):
        if stages.apply_policy(tasks, policies, task_id, revision):
            stages.launch(tasks, launcher, task_id, revision)


def new_revision(tasks: TaskStore, task_id: str, env: list[dict[str, Any]]) -> int:
    doc = tasks.update(task_id, lambda d: records.new_revision(d, env, "alice", "patch"))
    assert doc is not None
    return doc["revision"]


# --- the happy path ----------------------------------------------------------------------

def test_happy_path_walks_every_state(tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks, [{"name": "LR", "value": "0.1"}])
    launcher = FakeLauncher()
    assert stages.validate(tasks, LIMITS, task_id, 1) is True
    assert stages.apply_policy(tasks, policies, task_id, 1) is True
    stages.launch(tasks, launcher, task_id, 1)
    assert history(tasks, task_id) == [states.PENDING, states.VALIDATED, states.RESOLVED,
                                       states.LAUNCHING, states.RUNNING, states.SUCCEEDED]
    doc = tasks.get(task_id)
    assert doc["exit_code"] == 0 and doc["errors"] == []
    assert tasks.read_log(task_id, 1) == platform_line("hello from train")  # the launcher's


def test_the_launcher_gets_the_resolved_env(tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy(defaults=(EnvVar("NCCL_DEBUG", "WARN"),),
                        protected=(Protected("HTTPS_PROXY", "egress", "http://proxy"),)))
    task_id = submit(tasks, [{"name": "LR", "value": "$(HOME);`id`"}])
    launcher = FakeLauncher()
    run_all(tasks, policies, launcher, task_id)
    [workload] = launcher.launched
    assert workload.env_dict() == {
        "TASK_ID": task_id, "TASK_NAME": "train", "TASK_ENV_REVISION": "1",
        "TASK_POLICY_VERSION": "1", "HTTPS_PROXY": "http://proxy", "NCCL_DEBUG": "WARN",
        "LR": "$(HOME);`id`"}
    assert workload.steps == (("python3", "train.py"),)


def test_resolution_records_sources_and_policy_version(tasks: TaskStore,
                                                       policies: PolicyStore) -> None:
    policies.put(Policy(defaults=(EnvVar("NCCL_DEBUG", "WARN"),)))
    task_id = submit(tasks, [{"name": "NCCL_DEBUG", "value": "INFO"}])
    stages.validate(tasks, LIMITS, task_id, 1)
    stages.apply_policy(tasks, policies, task_id, 1)
    doc = tasks.get(task_id)
    assert doc["state"] == states.RESOLVED
    assert doc["policy_version"] == 1
    assert resolved(tasks, task_id)["NCCL_DEBUG"] == {
        "name": "NCCL_DEBUG", "value": "INFO", "source": "user", "overrode": ["default"],
        "secret": False, "shadowed": [{"source": "default", "scope": "platform", "value": "WARN"}]}


def test_a_task_keeps_the_policy_version_it_was_resolved_with(tasks: TaskStore,
                                                             policies: PolicyStore) -> None:
    policies.put(Policy(defaults=(EnvVar("D", "old"),)))
    task_id = submit(tasks)
    stages.validate(tasks, LIMITS, task_id, 1)
    stages.apply_policy(tasks, policies, task_id, 1)
    policies.put(Policy(defaults=(EnvVar("D", "new"),)))
    assert tasks.get(task_id)["policy_version"] == 1
    assert resolved(tasks, task_id)["D"]["value"] == "old"


# --- rejections --------------------------------------------------------------------------

def test_invalid_env_is_rejected_with_every_error(tasks: TaskStore,
                                                  policies: PolicyStore) -> None:
    task_id = submit(tasks, [{"name": "1BAD", "value": "x"}, {"name": "NUL", "value": "\x00"}])
    assert stages.validate(tasks, LIMITS, task_id, 1) is False
    doc = tasks.get(task_id)
    assert doc["state"] == states.REJECTED
    assert {(e["rule"], e["variable"]) for e in doc["errors"]} == {
        ("name.shell", "1BAD"), ("value.nul", "NUL")}
    assert stages.apply_policy(tasks, policies, task_id, 1) is False


def test_text_that_is_not_valid_unicode_is_rejected_not_left_pending(
        tasks: TaskStore) -> None:
    # The API accepts "\ud800" (valid JSON).  The user should get a problem naming the
    # variable, not a crash that ends the task as failed with an internal reason.
    task_id = submit(tasks, [{"name": "A", "value": "\ud800"}])
    assert stages.validate(tasks, LIMITS, task_id, 1) is False
    assert tasks.get(task_id)["state"] == states.REJECTED


def test_protected_conflict_is_rejected_naming_variable_and_reason(
        tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy(protected=(Protected("HTTPS_PROXY", "egress goes via the proxy",
                                             "http://proxy"),)))
    task_id = submit(tasks, [{"name": "HTTPS_PROXY", "value": "http://mine"}])
    launcher = FakeLauncher()
    run_all(tasks, policies, launcher, task_id)
    doc = tasks.get(task_id)
    assert doc["state"] == states.REJECTED
    [error] = doc["errors"]
    assert error["variable"] == "HTTPS_PROXY" and error["rule"] == "policy.protected"
    assert "egress goes via the proxy" in error["message"]
    assert doc["policy_version"] == 1
    assert launcher.launched == []


def test_user_setting_a_platform_variable_is_rejected(tasks: TaskStore,
                                                      policies: PolicyStore) -> None:
    task_id = submit(tasks, [{"name": "TASK_ID", "value": "mine"}])
    run_all(tasks, policies, FakeLauncher(), task_id)
    doc = tasks.get(task_id)
    assert doc["state"] == states.REJECTED
    assert [e["variable"] for e in doc["errors"]] == ["TASK_ID"]


def test_drop_mode_resolves_with_a_visible_warning(tasks: TaskStore,
                                                   policies: PolicyStore) -> None:
    policies.put(Policy(protected=(Protected("HTTPS_PROXY", "egress", "http://proxy"),),
                        on_conflict="drop"))
    task_id = submit(tasks, [{"name": "HTTPS_PROXY", "value": "http://mine"}])
    launcher = FakeLauncher()
    run_all(tasks, policies, launcher, task_id)
    doc = tasks.get(task_id)
    assert doc["state"] == states.SUCCEEDED
    [warning] = doc["warnings"]
    assert warning["variable"] == "HTTPS_PROXY" and "egress" in warning["message"]
    assert launcher.launched[0].env_dict()["HTTPS_PROXY"] == "http://proxy"
    assert resolved(tasks, task_id)["HTTPS_PROXY"]["overrode"] == ["user"]


# --- duplicate and stale messages --------------------------------------------------------

def test_redelivered_validate_is_a_no_op(tasks: TaskStore) -> None:
    task_id = submit(tasks)
    assert stages.validate(tasks, LIMITS, task_id, 1) is True
    before = tasks.get(task_id)
    assert stages.validate(tasks, LIMITS, task_id, 1) is False
    assert tasks.get(task_id) == before


def test_redelivered_apply_policy_is_a_no_op(tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks)
    stages.validate(tasks, LIMITS, task_id, 1)
    assert stages.apply_policy(tasks, policies, task_id, 1) is True
    before = tasks.get(task_id)
    assert stages.apply_policy(tasks, policies, task_id, 1) is False
    assert tasks.get(task_id) == before


def test_redelivered_launch_launches_once(tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks)
    launcher = FakeLauncher()
    run_all(tasks, policies, launcher, task_id)
    before = tasks.get(task_id)
    stages.launch(tasks, launcher, task_id, 1)
    assert len(launcher.launched) == 1
    assert tasks.get(task_id) == before


def test_launch_while_still_launching_does_not_launch_again(tasks: TaskStore,
                                                            policies: PolicyStore) -> None:
    task_id = submit(tasks)
    stages.validate(tasks, LIMITS, task_id, 1)
    stages.apply_policy(tasks, policies, task_id, 1)
    tasks.transition(task_id, 1, states.RESOLVED, states.LAUNCHING)  # another worker has it
    launcher = FakeLauncher()
    stages.launch(tasks, launcher, task_id, 1)
    assert launcher.launched == []


def test_stale_revision_messages_are_no_ops(tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks, [{"name": "A", "value": "1"}])
    revision = new_revision(tasks, task_id, [{"name": "A", "value": "2"}])
    launcher = FakeLauncher()
    assert stages.validate(tasks, LIMITS, task_id, 1) is False
    assert tasks.get(task_id)["state"] == states.PENDING
    run_all(tasks, policies, launcher, task_id, revision)
    assert [w.env_dict()["A"] for w in launcher.launched] == ["2"]
    assert launcher.launched[0].revision == 2


def test_stale_messages_at_later_stages_are_no_ops(tasks: TaskStore,
                                                   policies: PolicyStore) -> None:
    task_id = submit(tasks)
    stages.validate(tasks, LIMITS, task_id, 1)
    stages.apply_policy(tasks, policies, task_id, 1)
    new_revision(tasks, task_id, [])
    launcher = FakeLauncher()
    assert stages.apply_policy(tasks, policies, task_id, 1) is False
    stages.launch(tasks, launcher, task_id, 1)
    assert launcher.launched == []
    doc = tasks.get(task_id)
    assert (doc["revision"], doc["state"]) == (2, states.PENDING)


def test_messages_for_a_vanished_task_are_no_ops(tasks: TaskStore,
                                                 policies: PolicyStore) -> None:
    assert stages.validate(tasks, LIMITS, "gone", 1) is False
    assert stages.apply_policy(tasks, policies, "gone", 1) is False


# --- launch outcomes ---------------------------------------------------------------------

def resolve_only(tasks: TaskStore, policies: PolicyStore, task_id: str) -> None:
    assert stages.validate(tasks, LIMITS, task_id, 1)
    assert stages.apply_policy(tasks, policies, task_id, 1)


def test_permanent_launcher_error_fails_the_task_with_a_reason(tasks: TaskStore,
                                                               policies: PolicyStore) -> None:
    task_id = submit(tasks)
    run_all(tasks, policies, FakeLauncher(error=LaunchFailed("no such image")), task_id)
    doc = tasks.get(task_id)
    assert doc["state"] == states.FAILED
    assert "no such image" in doc["reason"] and "fake" in doc["reason"]


def test_permanent_launcher_error_before_start_fails_the_task(tasks: TaskStore,
                                                              policies: PolicyStore) -> None:
    task_id = submit(tasks)
    run_all(tasks, policies, FakeLauncher(error=LaunchFailed("refused"), start=False), task_id)
    assert tasks.get(task_id)["state"] == states.FAILED
    assert states.RUNNING not in history(tasks, task_id)


def test_unexpected_launcher_error_propagates_and_fail_ends_the_revision(
        tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks)
    resolve_only(tasks, policies, task_id)
    with pytest.raises(RuntimeError, match="boom"):
        stages.launch(tasks, FakeLauncher(error=RuntimeError("boom")), task_id, 1)
    outcomes.fail(tasks, task_id, 1, "taskenv.launch failed: RuntimeError")  # Celery's on_failure
    doc = tasks.get(task_id)
    assert (doc["state"], doc["reason"]) == (states.FAILED, "taskenv.launch failed: RuntimeError")


def test_fail_leaves_a_finished_revision_alone(tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks)
    run_all(tasks, policies, FakeLauncher(), task_id)
    outcomes.fail(tasks, task_id, 1, "late failure")
    assert tasks.get(task_id)["state"] == states.SUCCEEDED


def test_transient_launcher_error_gives_the_revision_back_for_a_retry(
        tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks)
    resolve_only(tasks, policies, task_id)
    flaky = FakeLauncher(error=TransientError("429 from the backend"), start=False)
    with pytest.raises(TransientError):
        stages.launch(tasks, flaky, task_id, 1)
    assert tasks.get(task_id)["state"] == states.RESOLVED
    flaky.error = None
    stages.launch(tasks, flaky, task_id, 1)  # the retry
    assert tasks.get(task_id)["state"] == states.SUCCEEDED
    assert len(flaky.launched) == 2


def test_failed_outcome_records_exit_code_and_reason(tasks: TaskStore,
                                                     policies: PolicyStore) -> None:
    task_id = submit(tasks)
    outcome = Outcome(states.FAILED, exit_code=3, reason="step 2 exited with 3")
    run_all(tasks, policies, FakeLauncher(outcome=outcome), task_id)
    doc = tasks.get(task_id)
    assert (doc["state"], doc["exit_code"], doc["reason"]) == (
        states.FAILED, 3, "step 2 exited with 3")


def test_running_outcome_leaves_the_task_running_after_one_transition(
        tasks: TaskStore, policies: PolicyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    task_id = submit(tasks)
    moves: list[str] = []
    move = tasks.move

    def recorded(task_id: str, revision: int, expected: Any, new_state: str,
                 **changes: Any) -> Any:
        moves.append(new_state)
        return move(task_id, revision, expected, new_state, **changes)

    monkeypatch.setattr(tasks, "move", recorded)
    run_all(tasks, policies, FakeLauncher(outcome=Outcome(states.RUNNING)), task_id)
    assert tasks.get(task_id)["state"] == states.RUNNING
    assert moves == [states.RUNNING]  # the started hook's; the outcome adds none


def test_launcher_that_never_reports_start_still_succeeds(tasks: TaskStore,
                                                          policies: PolicyStore) -> None:
    task_id = submit(tasks)
    run_all(tasks, policies, FakeLauncher(start=False), task_id)
    assert history(tasks, task_id)[-2:] == [states.LAUNCHING, states.SUCCEEDED]


# --- secrets and advice ------------------------------------------------------------------

def test_secrets_reach_the_launcher_in_clear_and_the_log_redacted(
        tasks: TaskStore, policies: PolicyStore) -> None:
    policies.put(Policy(defaults=(EnvVar("DB_PASSWORD", "default-pass-42", secret=True),)))
    task_id = submit(tasks, [{"name": "API_TOKEN", "value": "tok-123456", "secret": True}])
    launcher = FakeLauncher(output="using tok-123456 and default-pass-42 now\n")
    run_all(tasks, policies, launcher, task_id)
    env = launcher.launched[0].env_dict()
    assert env["API_TOKEN"] == "tok-123456" and env["DB_PASSWORD"] == "default-pass-42"
    log_text = tasks.read_log(task_id, 1)
    assert log_text == platform_line(f"using {REDACTED} and {REDACTED} now")


def test_secret_looking_plain_variables_get_a_warning_that_survives_the_policy_stage(
        tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks, [{"name": "WANDB_API_KEY", "value": "abc"},
                             {"name": "HF_TOKEN", "value": "hf-token-x", "secret": True}])
    run_all(tasks, policies, FakeLauncher(), task_id)
    doc = tasks.get(task_id)
    assert doc["state"] == states.SUCCEEDED
    assert [(w["rule"], w["variable"]) for w in doc["warnings"]] == [
        ("secret.suggested", "WANDB_API_KEY")]


# --- cancel ------------------------------------------------------------------------------

class StoppableLauncher(FakeLauncher):
    """A launcher whose workloads run until cancelled; ``lingers`` cancels leave one up."""

    def __init__(self, lingers: int = 0, on_launch: Any = None) -> None:
        super().__init__(Outcome(states.RUNNING))
        self.running: set[tuple[str, int]] = set()
        self.cancelled: list[Workload] = []
        self.lingers = lingers
        self.on_launch = on_launch

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        if self.on_launch is not None:
            self.on_launch()  # what lands while the backend starts it
        self.running.add((workload.task_id, workload.revision))
        return super().launch(workload, hooks)

    def cancel(self, workload: Workload) -> None:
        self.cancelled.append(workload)
        if self.lingers:
            self.lingers -= 1
            return
        self.running.discard((workload.task_id, workload.revision))

    def observe(self, workload: Workload) -> Outcome | None:
        running = (workload.task_id, workload.revision) in self.running
        return Outcome(states.RUNNING) if running else None


def cancel_now(tasks: TaskStore, task_id: str, revision: int = 1) -> None:
    assert tasks.transition(task_id, revision, set(states.ACTIVE), states.CANCELLED,
                            cancelled_by="alice") is not None


def test_a_cancel_landing_while_the_backend_starts_stops_the_workload(
        tasks: TaskStore, policies: PolicyStore) -> None:
    task_id = submit(tasks)
    launcher = StoppableLauncher(on_launch=lambda: cancel_now(tasks, task_id))
    run_all(tasks, policies, launcher, task_id)
    assert [w.revision for w in launcher.cancelled] == [1]
    assert launcher.running == set()
    assert tasks.get(task_id)["state"] == states.CANCELLED  # the started hook lost its CAS


@pytest.mark.parametrize("stage", ["validate", "policy", "launch"])
def test_a_cancelled_task_never_reaches_the_backend(tasks: TaskStore, policies: PolicyStore,
                                                    stage: str) -> None:
    task_id = submit(tasks)
    launcher = StoppableLauncher()
    if stage != "validate":
        assert stages.validate(tasks, LIMITS, task_id, 1)
    if stage == "launch":
        assert stages.apply_policy(tasks, policies, task_id, 1)
    cancel_now(tasks, task_id)
    run_all(tasks, policies, launcher, task_id)
    stages.launch(tasks, launcher, task_id, 1)
    assert launcher.launched == [] and tasks.get(task_id)["state"] == states.CANCELLED


def running_task(tasks: TaskStore, policies: PolicyStore, launcher: StoppableLauncher) -> str:
    task_id = submit(tasks, [{"name": "LR", "value": "0.1"}])
    run_all(tasks, policies, launcher, task_id)
    assert tasks.get(task_id)["state"] == states.RUNNING
    return task_id


def test_stop_cancels_the_workload_of_a_cancelled_revision(tasks: TaskStore,
                                                          policies: PolicyStore) -> None:
    launcher = StoppableLauncher()
    task_id = running_task(tasks, policies, launcher)
    cancel_now(tasks, task_id)
    enqueued: list[tuple[str, int]] = []
    stages.stop(tasks, launcher, task_id, 1, lambda *m: enqueued.append(m))
    assert launcher.running == set() and enqueued == []


def test_stop_never_touches_a_revision_that_was_not_cancelled(tasks: TaskStore,
                                                             policies: PolicyStore) -> None:
    launcher = StoppableLauncher()
    task_id = running_task(tasks, policies, launcher)
    stages.stop(tasks, launcher, task_id, 1, lambda *m: None)
    assert launcher.cancelled == [] and launcher.running == {(task_id, 1)}


def restart(tasks: TaskStore, task_id: str) -> None:
    """What the API does for apply: restart: revision 1 cancelled, 2 pending, waiting."""
    cancel_now(tasks, task_id)
    tasks.update(task_id, lambda d: {**records.new_revision(
        d, [{"name": "LR", "value": "0.2"}], "alice", "restart"), "apply": "restart"})


def test_a_restart_starts_its_revision_only_once_the_old_workload_is_gone(
        tasks: TaskStore, policies: PolicyStore) -> None:
    launcher = StoppableLauncher(lingers=1)
    task_id = running_task(tasks, policies, launcher)
    restart(tasks, task_id)
    enqueued: list[tuple[str, int]] = []
    with pytest.raises(TransientError, match="still stopping"):
        stages.stop(tasks, launcher, task_id, 1, lambda *m: enqueued.append(m))
    assert enqueued == []  # never two at once: revision 2 waits
    stages.stop(tasks, launcher, task_id, 1, lambda *m: enqueued.append(m))  # the retry
    assert enqueued == [(task_id, 2)]
    run_all(tasks, policies, launcher, task_id, 2)
    assert launcher.running == {(task_id, 2)}
    assert resolved(tasks, task_id)["LR"]["value"] == "0.2"
    assert tasks.revision(task_id, 1)["state"] == states.CANCELLED


def test_a_revision_that_replaced_a_waiting_restart_starts_once_the_old_workload_is_gone(
        tasks: TaskStore, policies: PolicyStore) -> None:
    launcher = StoppableLauncher(lingers=0)
    task_id = running_task(tasks, policies, launcher)
    restart(tasks, task_id)
    # A second change while revision 2 waited: revision 3 waits for revision 1's stop.
    tasks.update(task_id, lambda d: {**records.new_revision(
        d, [{"name": "LR", "value": "0.3"}], "alice", "patch"), "apply": "restart",
        "replaces": 1})
    enqueued: list[tuple[str, int]] = []
    stages.stop(tasks, launcher, task_id, 1, lambda *m: enqueued.append(m))
    assert enqueued == [(task_id, 3)]
    run_all(tasks, policies, launcher, task_id, 3)
    assert launcher.running == {(task_id, 3)}
    assert resolved(tasks, task_id)["LR"]["value"] == "0.3"
