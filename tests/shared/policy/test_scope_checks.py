"""project_conflicts: every project's saved policy checked again under a new platform policy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.env.envlist import Limits
from shared.policy.model import Policy
from shared.policy.scope_checks import ProjectConflict, check_scope_policy, project_conflicts
from shared.secrets import MIN_SECRET_LENGTH

LIMITS = Limits()
SECRET = "s3cr3t-value-nobody-may-read"
assert len(SECRET) >= MIN_SECRET_LENGTH

NEW_PLATFORM = Policy.from_dict({
    "version": 4,
    "defaults": [],
    "protected": [{"name": "HF_HOME", "value": "/shared/hf", "reason": "one cache for all"}],
    "rules": [{"name": "NCCL_DEBUG", "allowed": ["WARN", "INFO"],
               "description": "TRACE fills the disks"}],
})


def project(version: int, **data: Any) -> Policy:
    return Policy.from_dict({"defaults": [], "protected": [], **data, "version": version})


def test_only_projects_the_platform_now_refuses_are_named_in_name_order() -> None:
    projects = {
        "vision": project(3, defaults=[{"name": "HF_HOME", "value": "/data/vision"}]),
        "audio": project(7, defaults=[{"name": "NCCL_DEBUG", "value": "TRACE"}]),
        "speech": project(2, defaults=[{"name": "NCCL_DEBUG", "value": "INFO"}]),
        "empty": project(0),
    }
    found = project_conflicts(projects, NEW_PLATFORM, LIMITS)
    assert [(c.project, c.policy_version) for c in found] == [("audio", 7), ("vision", 3)]
    audio, vision = found
    assert [(p.variable, p.rule) for p in audio.problems] == [("NCCL_DEBUG", "rule.allowed")]
    assert "TRACE fills the disks" in audio.problems[0].message
    assert [(p.variable, p.rule) for p in vision.problems] == [
        ("HF_HOME", "layer.platform_protected")]


def test_a_conflict_has_the_problems_a_put_of_the_same_policy_would_get() -> None:
    policy = project(5, protected=[{"name": "HF_HOME", "reason": "ours"}],
                     defaults=[{"name": "NCCL_DEBUG", "value": "TRACE"}])
    (conflict,) = project_conflicts({"vision": policy}, NEW_PLATFORM, LIMITS)
    assert list(conflict.problems) == check_scope_policy(policy.to_dict(), NEW_PLATFORM, LIMITS)
    assert conflict.variables() == ["HF_HOME", "NCCL_DEBUG"]
    shape = conflict.to_dict()
    assert shape["project"] == "vision" and shape["policy_version"] == 5
    assert {p["variable"] for p in shape["problems"]} == {"HF_HOME", "NCCL_DEBUG"}


def test_a_project_rule_the_new_platform_defaults_break_is_a_conflict() -> None:
    platform = Policy.from_dict({"defaults": [{"name": "OMP_NUM_THREADS", "value": "64"}],
                                "protected": []})
    policy = project(1, rules=[{"name": "OMP_NUM_THREADS", "max": 8}])
    (conflict,) = project_conflicts({"vision": policy}, platform, LIMITS)
    assert [(p.variable, p.rule) for p in conflict.problems] == [("OMP_NUM_THREADS", "rule.max")]


@pytest.mark.parametrize("rule", [
    {"allowed": ["a", "b"]}, {"pattern": "[0-9]+"}, {"min": 1, "max": 2}, {"max_length": 3},
])
def test_a_secret_project_default_never_shows_its_value(rule: dict[str, Any]) -> None:
    platform = Policy.from_dict({
        "defaults": [], "rules": [{"name": "WANDB_API_KEY", **rule}],
        "protected": [{"name": "HF_TOKEN", "value": "platform-token-0123456789",
                       "secret": True, "reason": "the platform's own"}]})
    policy = project(2, defaults=[
        {"name": "WANDB_API_KEY", "value": SECRET, "secret": True},
        {"name": "HF_TOKEN", "value": SECRET, "secret": True}])
    (conflict,) = project_conflicts({"vision": policy}, platform, LIMITS)
    assert conflict.variables() == ["HF_TOKEN"]  # a secret is never checked against a rule
    text = repr(conflict.to_dict())
    assert SECRET not in text and "platform-token-0123456789" not in text


NAMES = st.sampled_from(["HF_HOME", "NCCL_DEBUG", "LR", "OMP_NUM_THREADS"])
VALUES = st.sampled_from(["TRACE", "INFO", "/data", "64", "0.1"])
DEFAULTS = st.lists(st.fixed_dictionaries({"name": NAMES, "value": VALUES}),
                    max_size=3, unique_by=lambda d: d["name"])


@given(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), DEFAULTS, max_size=4))
def test_a_project_is_named_exactly_when_the_check_refuses_its_policy(
        defaults: dict[str, list[dict[str, str]]]) -> None:
    projects = {name: project(1, defaults=entries) for name, entries in defaults.items()}
    found = {c.project: c for c in project_conflicts(projects, NEW_PLATFORM, LIMITS)}
    for name, policy in projects.items():
        problems = check_scope_policy(policy.to_dict(), NEW_PLATFORM, LIMITS)
        expected = ProjectConflict(name, 1, tuple(problems)) if problems else None
        assert found.get(name) == expected


def test_a_project_may_not_inject_slurms_own_variables_each_named() -> None:
    # The prefixes the Slurm backend declares, as the API passes them (every backend's).
    from workers.launchers.registry import reserved_prefixes

    data = {"defaults": [{"name": "SLURM_CPUS_PER_TASK", "value": "64"}],
            "protected": [{"name": "SRUN_EXPORT_ENV", "value": "ALL", "reason": "x"}]}
    problems = check_scope_policy(data, NEW_PLATFORM, LIMITS, reserved=reserved_prefixes())
    named = {(p.rule, p.variable, p.field) for p in problems}
    assert named == {("layer.scheduler_variable", "SLURM_CPUS_PER_TASK", "defaults[0].name"),
                     ("layer.scheduler_variable", "SRUN_EXPORT_ENV", "protected[0].name")}
    platform = Policy.from_dict({"version": 1, "defaults": data["defaults"], "protected": []})
    assert project_conflicts({"p": project(1)}, platform, LIMITS) == []  # the platform may
