"""Impact of a draft policy: rejections, value changes, who is touched, in a stable order."""

from __future__ import annotations

from typing import Any

from shared.env.envlist import EnvVar
from shared.policy.conditions import TaskFacts
from shared.policy.impact import TaskSnapshot, impact, value_changes
from shared.policy.model import Policy, Resolution, Resolved, platform_env, resolve_scopes

CURRENT = Policy.from_dict({"version": 1, "defaults": [
    {"name": "NCCL_DEBUG", "value": "WARN"},
    {"name": "DB_PASS", "value": "pw-before", "secret": True}]})


def snapshot(task_id: str, owner: str, env: dict[str, str], gpus: int = 0,
             policy: Policy | None = CURRENT) -> TaskSnapshot:
    user = tuple(EnvVar(n, v) for n, v in env.items())
    facts = TaskFacts(gpus=gpus)
    resolved, rejected = None, False
    if policy is not None:
        now = resolve_scopes(user, [policy], platform_env(task_id, "t", 1, policy.version), facts)
        resolved = tuple(now.variables) if now.ok else None
        rejected = not now.ok
    return TaskSnapshot(task_id, owner, user, facts, resolved, rejected)


def with_draft(draft: Policy) -> Any:
    def resolve_one(s: TaskSnapshot) -> Resolution:
        return resolve_scopes(s.env, [draft], platform_env(s.id, "t", 2, draft.version), s.facts)
    return resolve_one


DRAFT = Policy.from_dict({
    "version": 2,
    "defaults": [{"name": "NCCL_DEBUG", "value": "INFO", "when": {"gpus": ">=1"}},
                 {"name": "DB_PASS", "value": "pw-after", "secret": True}],
    "protected": [{"name": "SEED", "value": "1", "reason": "reproducible runs"}],
    "rules": [{"name": "LR", "max": 1, "description": "stable training"}],
})

TASKS = [
    snapshot("t3", "bob", {"LR": "5"}),
    snapshot("t1", "alice", {}, gpus=2),
    snapshot("t2", "alice", {"SEED": "7", "LR": "9"}),
    snapshot("t4", "carol", {"NCCL_DEBUG": "TRACE"}, gpus=1),
    snapshot("t5", "bob", {}, gpus=4),
]


def test_rejections_are_counted_with_their_variables_and_rules() -> None:
    got = impact(TASKS, with_draft(DRAFT))["rejected"]
    assert (got["tasks"], got["owners"]) == (2, 2)
    assert (got["newly_rejected"], got["already_rejected"]) == (2, 0)
    assert got["examples"] == ["t2", "t3"]
    assert [(p["variable"], p["rule"], p["tasks"], p["owners"]) for p in got["problems"]] == [
        ("LR", "rule.max", 2, 2), ("SEED", "policy.protected", 1, 1)]
    assert "stable training" in got["problems"][0]["message"]


def test_value_changes_name_old_and_new_and_whom_they_touch() -> None:
    got = impact(TASKS, with_draft(DRAFT))
    changes = [(c["variable"], c["kind"], c["old"], c["new"], c["tasks"], c["owners"],
                c["examples"]) for c in got["changes"]]
    assert changes == [
        ("DB_PASS", "changed", None, None, 3, 3, ["t1", "t4", "t5"]),
        ("NCCL_DEBUG", "changed", "WARN", "INFO", 2, 2, ["t1", "t5"]),
        ("SEED", "added", None, "1", 3, 3, ["t1", "t4", "t5"]),
    ]
    assert got["tasks"] == 5 and got["unchanged"] == 0 and got["accepted"] == 0


def test_a_secret_change_shows_no_value() -> None:
    got = impact(TASKS, with_draft(DRAFT))
    secret = [c for c in got["changes"] if c["variable"] == "DB_PASS"][0]
    assert secret["secret"] is True and secret["old"] is None and secret["new"] is None
    assert "pw-before" not in repr(got) and "pw-after" not in repr(got)


def test_the_summary_does_not_depend_on_the_order_of_the_tasks() -> None:
    draft = with_draft(DRAFT)
    assert impact(TASKS, draft) == impact(list(reversed(TASKS)), draft)


def test_the_current_policy_as_draft_changes_nothing() -> None:
    got = impact(TASKS[1:2] + TASKS[3:], with_draft(CURRENT))
    assert got["changes"] == [] and got["rejected"]["tasks"] == 0 and got["unchanged"] == 3


def test_a_task_without_a_resolution_now_is_counted_when_the_draft_accepts_it() -> None:
    waiting = snapshot("t9", "dan", {"LR": "0.1"}, policy=None)
    broken = snapshot("t8", "dan", {"LR": "7"}, policy=None)
    got = impact([waiting, broken], with_draft(DRAFT))
    assert got["accepted"] == 1 and got["rejected"]["tasks"] == 1
    assert got["rejected"]["newly_rejected"] == 1 and got["changes"] == []


STRICT_NOW = Policy.from_dict({"version": 1, "rules": [{"name": "LR", "max": 3}]})


def test_tasks_rejected_today_are_counted_apart_from_those_the_draft_newly_rejects() -> None:
    """Five tasks the draft rejects, three of them rejected today already: the draft's
    doing is two."""
    tasks = [snapshot(f"old{n}", "erin", {"LR": "8"}, policy=STRICT_NOW) for n in range(3)]
    tasks += [snapshot("new1", "bob", {"LR": "2"}, policy=STRICT_NOW),
              snapshot("new2", "carol", {"LR": "2.5"}, policy=STRICT_NOW),
              snapshot("fine", "carol", {"LR": "0.5"}, policy=STRICT_NOW)]
    draft = Policy.from_dict({"version": 2, "rules": [{"name": "LR", "max": 1}]})

    got = impact(tasks, with_draft(draft))["rejected"]

    assert (got["tasks"], got["newly_rejected"], got["already_rejected"]) == (5, 2, 3)
    assert got["examples"][:2] == ["new1", "new2"]  # the draft's doing first
    [problem] = got["problems"]
    assert (problem["variable"], problem["tasks"], problem["newly_rejected"],
            problem["already_rejected"]) == ("LR", 5, 2, 3)


def test_removed_variables_and_platform_variables() -> None:
    before = [Resolved("TASK_ID", "a", "platform"), Resolved("GONE", "x", "default"),
              Resolved("TASK_POLICY_VERSION", "1", "platform")]
    after = [Resolved("TASK_ID", "a", "platform"), Resolved("TASK_POLICY_VERSION", "2", "platform")]
    assert [fields for _, fields in value_changes(before, after)] == [
        {"variable": "GONE", "kind": "removed", "secret": False, "old": "x", "new": None,
         "source": None}]


def test_a_variable_becoming_secret_is_a_change() -> None:
    found = value_changes([Resolved("K", "v", "user")], [Resolved("K", "v", "user", secret=True)])
    assert [(f["kind"], f["old"], f["new"]) for _, f in found] == [("changed", None, None)]


def test_a_secret_is_never_compared_by_value_so_a_draft_cannot_test_a_guess() -> None:
    # A draft that drops a task's own secret for a protected value it guesses: "changed"
    # must not depend on whether the guess was right.
    user = [Resolved("HF_TOKEN", "real-token-value", "user", secret=True)]
    verdicts = [value_changes(user, [Resolved("HF_TOKEN", guess, "protected", secret=True,
                                              scope="project:x", policy_version=0)])
                for guess in ("real-token-value", "wrong-guess-value")]
    assert verdicts[0] == verdicts[1] and len(verdicts[0]) == 1
    same_entry = [Resolved("DB_PASS", "a-secret-value", "default", secret=True,
                           scope="platform", policy_version=3)]
    assert value_changes(same_entry, [Resolved("DB_PASS", "other-value-xx", "default",
                                               secret=True, scope="platform",
                                               policy_version=3)]) == []
