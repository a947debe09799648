"""The admin policy: check_policy, and resolve's precedence, conflicts and provenance."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.env.envlist import EnvVar, Limits
from shared.errors import Problem
from shared.policy.conditions import TaskFacts, applies
from shared.policy.model import (
    ON_CONFLICT,
    PLATFORM_NAMES,
    Policy,
    Protected,
    Resolution,
    Resolved,
    Shadowed,
    check_policy,
    platform_env,
    resolve,
    resolve_scopes,
)
from shared.policy.scope_checks import check_scope_policy
from shared.secrets import MASK, MIN_SECRET_LENGTH
from shared.task.workload import Workload

LIMITS = Limits()


def platform(task_id: str = "t-1", name: str = "train", revision: int = 1,
             version: int = 0) -> list[EnvVar]:
    return platform_env(task_id, name, revision, version)


def run(user: list[EnvVar], policy: Policy) -> Resolution:
    return resolve(user, policy, platform(version=policy.version))


def find(result: Resolution, name: str) -> Resolved | None:
    matches = [v for v in result.variables if v.name == name]
    assert len(matches) <= 1, result.variables
    return matches[0] if matches else None


def legacy(var: Resolved | None) -> Resolved:
    """The provenance a single-layer resolve has always given, without scopes and versions."""
    assert var is not None
    return Resolved(var.name, var.value, var.source, var.overrode, var.secret)


def the_one(problems: list[Problem], rule: str) -> Problem:
    found = [p for p in problems if p.rule == rule]
    assert len(found) == 1, problems
    return found[0]


def locked(name: str, value: str | None = None, reason: str = "set by the cluster admins",
           secret: bool = False) -> Protected:
    return Protected(name, reason, value, secret)


# --- platform variables ------------------------------------------------------------------

def test_platform_env_names_the_task_revision_and_policy_version() -> None:
    env = {v.name: v.value for v in platform_env("abc", "train", 3, 7)}
    assert env == {"TASK_ID": "abc", "TASK_NAME": "train", "TASK_ENV_REVISION": "3",
                   "TASK_POLICY_VERSION": "7"}


def test_platform_variables_come_first_with_source_platform() -> None:
    result = run([EnvVar("A", "1")], Policy(defaults=(EnvVar("D", "d"),)))
    first = result.variables[:len(PLATFORM_NAMES)]
    assert [v.name for v in first] == list(PLATFORM_NAMES)
    assert {v.source for v in first} == {"platform"}


@pytest.mark.parametrize("name", PLATFORM_NAMES)
def test_user_setting_a_platform_name_is_an_error(name: str) -> None:
    result = run([EnvVar(name, "mine")], Policy())
    assert not result.ok
    error = the_one(result.errors, "platform.reserved")
    assert error.variable == name and name in error.message
    assert find(result, name).source == "platform"
    assert find(result, name).value != "mine"


def test_user_setting_a_platform_name_is_an_error_even_in_drop_mode() -> None:
    result = run([EnvVar("TASK_ID", "mine")], Policy(on_conflict="drop"))
    assert the_one(result.errors, "platform.reserved").variable == "TASK_ID"


# --- defaults and user -------------------------------------------------------------------

def test_defaults_are_injected_when_the_user_does_not_set_them() -> None:
    result = run([], Policy(defaults=(EnvVar("NCCL_DEBUG", "WARN"),)))
    assert result.ok
    assert legacy(find(result, "NCCL_DEBUG")) == Resolved("NCCL_DEBUG", "WARN", "default", ())


def test_user_overrides_a_default_and_provenance_says_so() -> None:
    result = run([EnvVar("NCCL_DEBUG", "INFO")], Policy(defaults=(EnvVar("NCCL_DEBUG", "WARN"),)))
    assert result.ok
    assert legacy(find(result, "NCCL_DEBUG")) == Resolved("NCCL_DEBUG", "INFO", "user",
                                                          ("default",))


def test_a_user_variable_nobody_else_sets_overrode_nothing() -> None:
    result = run([EnvVar("LR", "0.1")], Policy(defaults=(EnvVar("D", "d"),)))
    assert legacy(find(result, "LR")) == Resolved("LR", "0.1", "user", ())


def test_secret_flags_are_carried_into_the_resolved_env() -> None:
    policy = Policy(defaults=(EnvVar("DS", "d", secret=True),),
                    protected=(locked("PS", "p", secret=True),))
    result = run([EnvVar("US", "u", secret=True), EnvVar("PLAIN", "x")], policy)
    assert {v.name for v in result.variables if v.secret} == {"DS", "PS", "US"}


def test_user_values_arrive_unchanged() -> None:
    values = ["$(HOME)", "`id`", "a;b", "line1\nline2", "数据/路径", "🚀"]
    user = [EnvVar(f"V{i}", v) for i, v in enumerate(values)]
    assert [find(run(user, Policy()), f"V{i}").value for i in range(len(values))] == values


# --- protected ---------------------------------------------------------------------------

def test_protected_value_is_injected_when_the_user_does_not_set_it() -> None:
    result = run([], Policy(protected=(locked("HTTPS_PROXY", "http://proxy:3128"),)))
    assert legacy(find(result, "HTTPS_PROXY")) == Resolved("HTTPS_PROXY", "http://proxy:3128",
                                                  "protected", ())


def test_protected_name_without_value_is_reserved_not_injected() -> None:
    result = run([], Policy(protected=(locked("CUDA_VISIBLE_DEVICES"),)))
    assert result.ok
    assert find(result, "CUDA_VISIBLE_DEVICES") is None


@pytest.mark.parametrize("value", ["http://proxy:3128", None])
def test_reject_mode_error_names_the_variable_and_the_admins_reason(value: str | None) -> None:
    policy = Policy(protected=(locked("HTTPS_PROXY", value, reason="egress goes via the proxy"),))
    result = run([EnvVar("HTTPS_PROXY", "http://mine")], policy)
    assert not result.ok
    error = the_one(result.errors, "policy.protected")
    assert error.variable == "HTTPS_PROXY"
    assert "HTTPS_PROXY" in error.message
    assert "egress goes via the proxy" in error.message
    assert result.warnings == []


def test_reject_is_the_default_mode() -> None:
    assert Policy().on_conflict == "reject"
    result = run([EnvVar("P", "x")], Policy(protected=(locked("P", "v"),)))
    assert not result.ok


def test_reject_mode_reports_every_conflict_at_once() -> None:
    policy = Policy(protected=(locked("P1", "v"), locked("P2")))
    result = run([EnvVar("P1", "x"), EnvVar("P2", "y"), EnvVar("TASK_ID", "z")], policy)
    assert sorted(e.variable for e in result.errors) == ["P1", "P2", "TASK_ID"]


def test_drop_mode_replaces_the_user_value_with_the_protected_one_and_warns() -> None:
    policy = Policy(protected=(locked("P", "admin", reason="fixed by ops"),), on_conflict="drop")
    result = run([EnvVar("P", "mine")], policy)
    assert result.ok
    assert legacy(find(result, "P")) == Resolved("P", "admin", "protected", ("user",))
    warning = the_one(result.warnings, "policy.protected")
    assert warning.variable == "P"
    assert "fixed by ops" in warning.message


def test_drop_mode_leaves_a_reserved_name_absent_and_warns() -> None:
    policy = Policy(protected=(locked("R", reason="the scheduler sets it"),), on_conflict="drop")
    result = run([EnvVar("R", "mine"), EnvVar("OTHER", "kept")], policy)
    assert result.ok
    assert find(result, "R") is None
    assert find(result, "OTHER").value == "kept"
    warning = the_one(result.warnings, "policy.protected")
    assert warning.variable == "R" and "the scheduler sets it" in warning.message


def test_drop_mode_without_a_conflict_has_no_warning() -> None:
    policy = Policy(protected=(locked("P", "admin"),), on_conflict="drop")
    result = run([EnvVar("U", "1")], policy)
    assert result.warnings == [] and result.errors == []
    assert legacy(find(result, "P")) == Resolved("P", "admin", "protected", ())


def test_precedence_platform_over_protected_over_user_over_default() -> None:
    policy = Policy(version=4, defaults=(EnvVar("D", "default"), EnvVar("U", "default")),
                    protected=(locked("P", "protected"),), on_conflict="drop")
    user = [EnvVar("U", "user"), EnvVar("P", "user"), EnvVar("TASK_NAME", "user")]
    result = run(user, policy)
    got = {v.name: (v.value, v.source) for v in result.variables}
    assert got["TASK_NAME"] == ("train", "platform")
    assert got["P"] == ("protected", "protected")
    assert got["U"] == ("user", "user")
    assert got["D"] == ("default", "default")


def test_policy_version_is_recorded() -> None:
    policy = Policy(version=12, defaults=(EnvVar("D", "d"),))
    result = resolve([], policy, platform_env("t", "n", 1, policy.version))
    assert result.policy_version == 12
    assert find(result, "TASK_POLICY_VERSION").value == "12"


def test_as_env_maps_names_to_values() -> None:
    result = run([EnvVar("A", "1")], Policy(defaults=(EnvVar("D", "d"),)))
    env = result.as_env()
    assert env["A"] == "1" and env["D"] == "d" and env["TASK_ID"] == "t-1"


def test_resolved_to_dict_lists_provenance() -> None:
    shadowed = (Shadowed("default", "platform", "0.1"),)
    assert Resolved("A", "1", "user", ("default",), shadowed=shadowed).to_dict() == {
        "name": "A", "value": "1", "source": "user", "overrode": ["default"], "secret": False,
        "shadowed": [{"source": "default", "scope": "platform", "value": "0.1"}]}


def test_policy_round_trips_through_a_dict() -> None:
    policy = Policy(version=3, defaults=(EnvVar("D", "d", secret=True),),
                    protected=(locked("P", "v"), locked("R", secret=True)),
                    on_conflict="drop", author="admin", created_at=1.5)
    assert Policy.from_dict(policy.to_dict()) == policy


# --- check_policy ------------------------------------------------------------------------

def policy_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "defaults": [{"name": "NCCL_DEBUG", "value": "WARN"}],
        "protected": [{"name": "HTTPS_PROXY", "value": "http://proxy", "reason": "egress"},
                      {"name": "CUDA_VISIBLE_DEVICES", "reason": "the scheduler sets it"}],
        "on_conflict": "reject",
    }
    data.update(changes)
    return data


def test_a_consistent_policy_has_no_problems() -> None:
    assert check_policy(policy_data(), LIMITS) == []
    assert check_policy({}, LIMITS) == []


def test_same_name_default_and_protected_is_ambiguous() -> None:
    data = policy_data(protected=[{"name": "NCCL_DEBUG", "value": "INFO", "reason": "r"}])
    problem = the_one(check_policy(data, LIMITS), "policy.ambiguous")
    assert problem.variable == "NCCL_DEBUG" and "NCCL_DEBUG" in problem.message


def test_same_name_default_and_reserved_is_ambiguous() -> None:
    data = policy_data(protected=[{"name": "NCCL_DEBUG", "reason": "r"}])
    assert the_one(check_policy(data, LIMITS), "policy.ambiguous").variable == "NCCL_DEBUG"


@pytest.mark.parametrize("name", PLATFORM_NAMES)
def test_platform_names_cannot_be_defaulted(name: str) -> None:
    data = policy_data(defaults=[{"name": name, "value": "x"}])
    assert the_one(check_policy(data, LIMITS), "policy.platform_reserved").variable == name


@pytest.mark.parametrize("entry", [{"value": "x"}, {}])
def test_platform_names_cannot_be_protected(entry: dict[str, Any]) -> None:
    data = policy_data(protected=[{"name": "TASK_ID", "reason": "r", **entry}])
    assert the_one(check_policy(data, LIMITS), "policy.platform_reserved").variable == "TASK_ID"


@pytest.mark.parametrize("reason", [{}, {"reason": ""}, {"reason": "   "}, {"reason": None}])
def test_protected_needs_a_reason(reason: dict[str, Any]) -> None:
    data = policy_data(protected=[{"name": "P", "value": "v", **reason}])
    problem = the_one(check_policy(data, LIMITS), "policy.reason_required")
    assert problem.variable == "P" and "P" in problem.message


def test_duplicate_defaults_are_reported_with_their_position() -> None:
    data = policy_data(defaults=[{"name": "D", "value": "1"}, {"name": "D", "value": "2"}])
    problem = the_one(check_policy(data, LIMITS), "name.duplicate")
    assert problem.variable == "D"
    assert problem.field == "defaults[1].name"


def test_duplicate_reserved_names_are_reported_once() -> None:
    data = policy_data(protected=[{"name": "R", "reason": "r"}, {"name": "R", "reason": "r"}])
    problem = the_one(check_policy(data, LIMITS), "name.duplicate")
    assert problem.variable == "R" and problem.field.startswith("protected")


def test_duplicate_protected_names_with_values_are_reported_once() -> None:
    data = policy_data(protected=[{"name": "P", "value": "1", "reason": "r"},
                                  {"name": "P", "value": "2", "reason": "r"}])
    problem = the_one(check_policy(data, LIMITS), "name.duplicate")
    assert problem.variable == "P" and problem.field.startswith("protected")


def test_bad_default_name_points_at_the_default() -> None:
    data = policy_data(defaults=[{"name": "OK", "value": "1"}, {"name": "1BAD", "value": "2"}])
    problem = the_one(check_policy(data, LIMITS), "name.shell")
    assert problem.variable == "1BAD"
    assert problem.field == "defaults[1].name"


@pytest.mark.parametrize("value", ["v", None])
def test_bad_protected_name_is_reported(value: str | None) -> None:
    data = policy_data(protected=[{"name": "BAD-NAME", "value": value, "reason": "r"}])
    problem = the_one(check_policy(data, LIMITS), "name.shell")
    assert problem.variable == "BAD-NAME"
    assert problem.field == "protected[0].name"


def test_bad_protected_name_points_at_its_own_position_in_a_mixed_list() -> None:
    data = policy_data(protected=[
        {"name": "WITH_VALUE", "value": "v", "reason": "r"},
        {"name": "RESERVED_BAD-", "reason": "r"},
        {"name": "VALUED_BAD-", "value": "v", "reason": "r"},
    ])
    fields = {p.variable: p.field for p in check_policy(data, LIMITS) if p.rule == "name.shell"}
    assert fields == {"RESERVED_BAD-": "protected[1].name", "VALUED_BAD-": "protected[2].name"}


def test_protected_values_follow_the_value_rules() -> None:
    data = policy_data(protected=[{"name": "P", "value": "a\x00b", "reason": "r"},
                                  {"name": "Q", "value": 5, "reason": "r"}])
    problems = check_policy(data, LIMITS)
    assert the_one(problems, "value.nul").variable == "P"
    assert the_one(problems, "value.type").variable == "Q"


def test_default_value_over_the_byte_limit_names_the_limit() -> None:
    data = {"defaults": [{"name": "D", "value": "x" * 9}]}
    problem = the_one(check_policy(data, Limits(max_value_bytes=8)), "value.max_bytes")
    assert problem.variable == "D" and problem.limit == 8
    assert problem.field == "defaults[0].value"


@pytest.mark.parametrize("mode", ["overwrite", "ignore", "", None])
def test_on_conflict_must_be_reject_or_drop(mode: object) -> None:
    problem = the_one(check_policy(policy_data(on_conflict=mode), LIMITS), "policy.on_conflict")
    assert problem.field == "on_conflict"
    assert "reject" in problem.message and "drop" in problem.message


@pytest.mark.parametrize("mode", ["reject", "drop"])
def test_on_conflict_modes_accepted(mode: str) -> None:
    assert check_policy(policy_data(on_conflict=mode), LIMITS) == []


def test_check_policy_reports_all_problems_at_once() -> None:
    data = {
        "defaults": [{"name": "TASK_ID", "value": "x"}, {"name": "1BAD", "value": "y"},
                     {"name": "BOTH", "value": "z"}],
        "protected": [{"name": "BOTH", "value": "p", "reason": "r"},
                      {"name": "NOREASON", "reason": ""}],
        "on_conflict": "sometimes",
    }
    rules = sorted(p.rule for p in check_policy(data, LIMITS))
    assert rules == sorted(["policy.platform_reserved", "name.shell", "policy.ambiguous",
                            "policy.reason_required", "policy.on_conflict"])


# --- properties --------------------------------------------------------------------------

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True).filter(
    lambda n: n not in PLATFORM_NAMES)
VALUES = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)


def secret_if_long(value: str | None, secret: bool) -> bool:
    """A drawn secret flag, dropped where the value is too short to be a secret."""
    return secret and len(value or "") >= MIN_SECRET_LENGTH


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[EnvVar], Policy]:
    """A policy that passes check_policy, and a valid user list that may collide with it."""
    names = draw(st.lists(NAMES, unique=True, max_size=12))
    kinds = [draw(st.sampled_from(["default", "locked", "reserved", "free"])) for _ in names]
    defaults = tuple(EnvVar(n, v, secret_if_long(v, draw(st.booleans())))
                     for n, k in zip(names, kinds, strict=True) if k == "default"
                     for v in [draw(VALUES)])
    protected = tuple(
        Protected(n, draw(st.text(min_size=1, max_size=8).filter(str.strip)),
                  v, secret_if_long(v, draw(st.booleans())))
        for n, k in zip(names, kinds, strict=True) if k in ("locked", "reserved")
        for v in [draw(VALUES) if k == "locked" else None])
    policy = Policy(version=draw(st.integers(0, 50)), defaults=defaults, protected=protected,
                    on_conflict=draw(st.sampled_from(["reject", "drop"])))
    assert check_policy(policy.to_dict(), LIMITS) == []
    candidates = [*names, *PLATFORM_NAMES, *draw(st.lists(NAMES, max_size=4))]
    user_names = draw(st.lists(st.sampled_from(candidates), unique=True, max_size=10))
    user = [EnvVar(n, draw(VALUES), draw(st.booleans())) for n in user_names]
    return user, policy


def resolved_for(user: list[EnvVar], policy: Policy) -> Resolution:
    return resolve(user, policy, platform_env("task-1", "train", 2, policy.version))


@given(scenarios())
def test_property_protected_value_always_wins(scenario: tuple[list[EnvVar], Policy]) -> None:
    user, policy = scenario
    result = resolved_for(user, policy)
    for p in policy.protected:
        if p.value is not None:
            got = find(result, p.name)
            assert got is not None and got.value == p.value and got.source == "protected"


@given(scenarios())
def test_property_reserved_name_never_comes_from_the_user(
        scenario: tuple[list[EnvVar], Policy]) -> None:
    user, policy = scenario
    result = resolved_for(user, policy)
    for p in policy.protected:
        if p.value is None:
            got = find(result, p.name)
            assert got is None or got.source != "user"


@given(scenarios())
def test_property_no_duplicate_names(scenario: tuple[list[EnvVar], Policy]) -> None:
    user, policy = scenario
    names = [v.name for v in resolved_for(user, policy).variables]
    assert len(names) == len(set(names))


@given(scenarios())
def test_property_every_default_not_overridden_appears(
        scenario: tuple[list[EnvVar], Policy]) -> None:
    user, policy = scenario
    result = resolved_for(user, policy)
    user_names = {v.name for v in user}
    for d in policy.defaults:
        got = find(result, d.name)
        if d.name in user_names:
            assert got is not None and got.source == "user" and got.overrode == ("default",)
        else:
            assert legacy(got) == Resolved(d.name, d.value, "default", (), d.secret)


@given(scenarios())
def test_property_platform_variables_present_and_unchanged(
        scenario: tuple[list[EnvVar], Policy]) -> None:
    user, policy = scenario
    expected = platform_env("task-1", "train", 2, policy.version)
    result = resolved_for(user, policy)
    for var in expected:
        assert legacy(find(result, var.name)) == Resolved(var.name, var.value, "platform")


@given(scenarios())
def test_property_resolve_is_deterministic(scenario: tuple[list[EnvVar], Policy]) -> None:
    user, policy = scenario
    assert resolved_for(user, policy) == resolved_for(list(user), policy)


@given(scenarios())
def test_property_conflicts_are_never_silent(scenario: tuple[list[EnvVar], Policy]) -> None:
    user, policy = scenario
    result = resolved_for(user, policy)
    reported = {p.variable for p in [*result.errors, *result.warnings]}
    locked_names = {p.name for p in policy.protected} | set(PLATFORM_NAMES)
    assert {v.name for v in user if v.name in locked_names} <= reported


# --- layers: platform > project ----------------------------------------------------------

PLATFORM_POLICY = Policy.from_dict({
    "version": 4,
    "defaults": [{"name": "NCCL_DEBUG", "value": "WARN"},
                 {"name": "OMP_NUM_THREADS", "value": "4"}],
    "protected": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128", "reason": "egress"},
                  {"name": "CUDA_VISIBLE_DEVICES", "reason": "the scheduler sets it"},
                  {"name": "HF_TOKEN", "value": "hf_platform", "secret": True, "reason": "org"}],
    "rules": [{"name": "NUM_WORKERS", "min": 1, "max": 64, "description": "64 cores"}],
})


def project(version: int = 7, **data: Any) -> Policy:
    return Policy.from_dict({"version": version, "scope": "project:vision", **data})


def layered(user: list[EnvVar], *layers: Policy, task: TaskFacts = TaskFacts()) -> Resolution:
    return resolve_scopes(user, layers, platform(version=layers[0].version), task)


def test_a_project_default_overrides_a_platform_default_and_says_so_with_both_scopes() -> None:
    vision = project(defaults=[{"name": "NCCL_DEBUG", "value": "INFO"}])
    result = layered([], PLATFORM_POLICY, vision)
    got = find(result, "NCCL_DEBUG")
    assert got is not None and (got.value, got.source) == ("INFO", "default")
    assert (got.scope, got.policy_version, got.overrode) == ("project:vision", 7, ("default",))
    assert got.shadowed == (Shadowed("default", "platform", "WARN"),)
    assert got.to_dict()["shadowed"] == [{"source": "default", "scope": "platform",
                                          "value": "WARN"}]
    assert result.versions == {"platform": 4, "project:vision": 7}
    assert result.policy_version == 4


def test_a_user_value_shadows_both_defaults_each_named() -> None:
    vision = project(defaults=[{"name": "NCCL_DEBUG", "value": "INFO"}])
    got = find(layered([EnvVar("NCCL_DEBUG", "TRACE")], PLATFORM_POLICY, vision), "NCCL_DEBUG")
    assert got is not None and (got.source, got.scope, got.policy_version) == ("user", None, None)
    assert [(s.source, s.scope, s.value) for s in got.shadowed] == [
        ("default", "project:vision", "INFO"), ("default", "platform", "WARN")]


def test_the_platforms_own_entries_name_scope_and_version() -> None:
    got = find(layered([], PLATFORM_POLICY, project()), "HTTPS_PROXY")
    assert got is not None and (got.source, got.scope, got.policy_version) == (
        "protected", "platform", 4)


def test_a_project_protected_value_beats_the_user_and_a_platform_default() -> None:
    vision = project(protected=[{"name": "OMP_NUM_THREADS", "value": "8", "reason": "our nodes"}],
                     on_conflict="drop")
    result = layered([EnvVar("OMP_NUM_THREADS", "2", secret=True)], PLATFORM_POLICY, vision)
    got = find(result, "OMP_NUM_THREADS")
    assert got is not None and (got.value, got.source, got.scope) == ("8", "protected",
                                                                     "project:vision")
    assert [(s.source, s.scope, s.value) for s in got.shadowed] == [
        ("user", None, MASK), ("default", "platform", "4")]
    warning = the_one(result.warnings, "policy.protected")
    assert "project vision" in warning.message and "our nodes" in warning.message


def test_the_protecting_layers_on_conflict_decides() -> None:
    vision = project(protected=[{"name": "SEED", "value": "1", "reason": "reproducible"}],
                     on_conflict="reject")
    lenient_platform = Policy(version=1, on_conflict="drop")
    result = layered([EnvVar("SEED", "2")], lenient_platform, vision)
    error = the_one(result.errors, "policy.protected")
    assert error.variable == "SEED"
    assert "project vision" in error.message and "reproducible" in error.message


def test_a_platform_protected_secret_shadowing_a_project_entry_is_masked() -> None:
    sneaky = project(protected=[{"name": "HF_TOKEN", "value": "hf_project", "reason": "r"}])
    got = find(layered([], PLATFORM_POLICY, sneaky), "HF_TOKEN")
    assert got is not None and (got.value, got.scope) == ("hf_platform", "platform")
    assert got.shadowed == (Shadowed("protected", "project:vision", "hf_project"),)
    leaked = project(defaults=[{"name": "HF_TOKEN", "value": "x", "secret": True}])
    got = find(layered([], PLATFORM_POLICY, leaked), "HF_TOKEN")
    assert got is not None and got.shadowed == (Shadowed("default", "project:vision", MASK),)


def test_rules_of_every_layer_reject_with_names_and_descriptions() -> None:
    vision = project(rules=[{"name": "DATA_ROOT", "required": True, "description": "our data"}])
    result = layered([EnvVar("NUM_WORKERS", "128")], PLATFORM_POLICY, vision)
    assert sorted((e.rule, e.variable) for e in result.errors) == [
        ("rule.max", "NUM_WORKERS"), ("rule.required", "DATA_ROOT")]
    messages = " ".join(e.message for e in result.errors)
    assert "64 cores" in messages and "our data" in messages and "project vision" in messages


def test_a_gpu_only_default_reaches_a_gpu_task_and_not_a_cpu_one() -> None:
    vision = project(defaults=[{"name": "NCCL_IB_DISABLE", "value": "0",
                                "when": {"gpus": ">=1"}}])
    gpu = find(layered([], PLATFORM_POLICY, vision, task=TaskFacts(gpus=2)), "NCCL_IB_DISABLE")
    assert gpu is not None and (gpu.value, gpu.when) == ("0", "gpus>=1")
    assert gpu.to_dict()["when"] == "gpus>=1"
    assert find(layered([], PLATFORM_POLICY, vision, task=TaskFacts(gpus=0)),
                "NCCL_IB_DISABLE") is None


def test_conditional_defaults_of_one_name_pick_the_matching_value() -> None:
    data = {"defaults": [{"name": "NCCL_ALGO", "value": "Ring", "when": {"gpus": "<=8"}},
                         {"name": "NCCL_ALGO", "value": "Tree", "when": {"gpus": ">8"}}]}
    assert check_policy(data, LIMITS) == []
    policy = Policy.from_dict(data)
    assert find(resolve([], policy, platform(), TaskFacts(gpus=16)), "NCCL_ALGO").value == "Tree"
    assert find(resolve([], policy, platform(), TaskFacts(gpus=1)), "NCCL_ALGO").value == "Ring"


def test_overlapping_conditional_duplicates_are_refused() -> None:
    data = {"defaults": [{"name": "A", "value": "1", "when": {"gpus": ">=1"}},
                         {"name": "A", "value": "2", "when": {"gpus": "<4"}}]}
    assert the_one(check_policy(data, LIMITS), "name.duplicate").field == "defaults[1].name"


def test_a_conditional_protected_entry_frees_the_name_elsewhere() -> None:
    policy = Policy.from_dict({"protected": [{"name": "NCCL_P2P_DISABLE", "value": "1",
                                              "reason": "no NVLink", "when": {"image": "old:*"}}]})
    user = [EnvVar("NCCL_P2P_DISABLE", "0")]
    assert not resolve(user, policy, platform(), TaskFacts(image="old:1")).ok
    mine = find(resolve(user, policy, platform(), TaskFacts(image="new:1")), "NCCL_P2P_DISABLE")
    assert mine is not None and mine.source == "user"


def test_check_policy_checks_conditions_and_rules_and_values_against_its_own_rules() -> None:
    data = {"defaults": [{"name": "NCCL_DEBUG", "value": "TRACE", "when": {"gpus": "lots"}},
                         {"name": "LR", "value": "5"}],
            "rules": [{"name": "LR", "max": 1, "description": "keep it stable"},
                      {"name": "X", "pattern": "("}]}
    problems = check_policy(data, LIMITS)
    assert sorted((p.rule, p.field) for p in problems) == [
        ("rule.max", "defaults[1].value"), ("rule.pattern_invalid", "rules[1].pattern"),
        ("when.gpus_invalid", "defaults[0].when.gpus")]
    assert "keep it stable" in the_one(problems, "rule.max").message


def test_a_default_for_tasks_a_rule_never_sees_is_fine() -> None:
    data = {"defaults": [{"name": "NCCL_ALGO", "value": "Tree", "when": {"gpus": "0"}}],
            "rules": [{"name": "NCCL_*", "allowed": ["Ring"], "when": {"gpus": ">=1"}}]}
    assert check_policy(data, LIMITS) == []


# --- check_scope_policy: a project never weakens the platform ---------------------------------

@pytest.mark.parametrize("entry", [
    {"defaults": [{"name": "HTTPS_PROXY", "value": "http://mine"}]},
    {"protected": [{"name": "HTTPS_PROXY", "value": "http://mine", "reason": "r"}]},
    {"protected": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128", "reason": "same"}]},
    {"protected": [{"name": "HTTPS_PROXY", "reason": "unset it"}]},
    {"defaults": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0", "when": {"gpus": ">=1"}}]},
])
def test_a_project_cannot_set_or_unprotect_a_platform_protected_name(
        entry: dict[str, Any]) -> None:
    problems = check_scope_policy(entry, PLATFORM_POLICY, LIMITS)
    problem = the_one(problems, "layer.platform_protected")
    name = problem.variable
    assert name in ("HTTPS_PROXY", "CUDA_VISIBLE_DEVICES")
    assert problem.field is not None and problem.field.endswith("[0].name")
    assert "platform's protected entry" in problem.message
    reason = {"HTTPS_PROXY": "egress", "CUDA_VISIBLE_DEVICES": "the scheduler sets it"}[name]
    assert reason in problem.message


def test_the_platforms_secret_value_is_not_shown_in_a_conflict() -> None:
    problem = the_one(check_scope_policy({"defaults": [{"name": "HF_TOKEN", "value": "x"}]},
                                  PLATFORM_POLICY, LIMITS), "layer.platform_protected")
    assert "hf_platform" not in problem.message and MASK in problem.message


def test_a_project_value_breaking_a_platform_rule_is_refused() -> None:
    data = {"defaults": [{"name": "NUM_WORKERS", "value": "128"}],
            "protected": [{"name": "NUM_WORKERS_HINT", "value": "2", "reason": "r"}]}
    problem = the_one(check_scope_policy(data, PLATFORM_POLICY, LIMITS), "rule.max")
    assert (problem.variable, problem.field) == ("NUM_WORKERS", "defaults[0].value")
    assert "platform's rule" in problem.message and "64 cores" in problem.message


def test_a_project_rule_the_platforms_protected_value_breaks_is_refused() -> None:
    data = {"rules": [{"name": "HTTPS_*", "pattern": "https://.*"},
                      {"name": "CUDA_VISIBLE_DEVICES", "required": True}]}
    problems = check_scope_policy(data, PLATFORM_POLICY, LIMITS)
    assert sorted((p.rule, p.variable, p.field) for p in problems) == [
        ("layer.rule_unsatisfiable", "CUDA_VISIBLE_DEVICES", "rules[1]"),
        ("layer.rule_unsatisfiable", "HTTPS_PROXY", "rules[0]")]


def test_a_project_rule_a_platform_default_breaks_needs_a_project_default() -> None:
    data: dict[str, Any] = {"rules": [{"name": "NCCL_DEBUG", "allowed": ["INFO"]}]}
    problem = the_one(check_scope_policy(data, PLATFORM_POLICY, LIMITS), "rule.allowed")
    assert problem.variable == "NCCL_DEBUG" and "platform default" in problem.message
    data["defaults"] = [{"name": "NCCL_DEBUG", "value": "INFO"}]
    assert check_scope_policy(data, PLATFORM_POLICY, LIMITS) == []


def test_a_project_adding_within_the_limits_passes() -> None:
    data = {"defaults": [{"name": "NCCL_DEBUG", "value": "INFO"},
                         {"name": "NUM_WORKERS", "value": "8"}],
            "protected": [{"name": "DATA_ROOT", "value": "/mnt/vision", "reason": "our data"}],
            "rules": [{"name": "HTTPS_PROXY", "pattern": "http://.*"},
                      {"name": "LR", "min": 0, "max": 1}], "on_conflict": "drop"}
    assert check_scope_policy(data, PLATFORM_POLICY, LIMITS) == []


def test_check_layer_includes_the_checks_of_every_policy() -> None:
    data = {"defaults": [{"name": "TASK_ID", "value": "x"}], "on_conflict": "maybe"}
    rules = {p.rule for p in check_scope_policy(data, PLATFORM_POLICY, LIMITS)}
    assert rules == {"policy.platform_reserved", "policy.on_conflict"}


# --- stored forms ---------------------------------------------------------------------------

def test_a_policy_with_scope_rules_and_conditions_round_trips() -> None:
    policy = project(defaults=[{"name": "A", "value": "1", "when": {"gpus": ">=1"}}],
                     protected=[{"name": "P", "reason": "r", "when": {"image": "cuda:*"}}],
                     rules=[{"name": "NCCL_*", "max_length": 8, "when": {"project": "v*"}}])
    assert Policy.from_dict(policy.to_dict()) == policy
    assert policy.to_dict()["scope"] == "project:vision"


def test_a_version_stored_before_scopes_and_rules_still_loads() -> None:
    old = {"version": 2, "defaults": [{"name": "D", "value": "d"}],
           "protected": [{"name": "P", "reason": "r"}], "on_conflict": "drop",
           "author": "admin", "created_at": 1.0}
    policy = Policy.from_dict(old)
    assert (policy.scope, policy.rules) == ("platform", ())
    assert policy == Policy(2, (EnvVar("D", "d"),), (Protected("P", "r"),), "drop", "admin", 1.0)


@pytest.mark.parametrize("overrode", [["default"], [{"source": "default", "scope": "platform",
                                                     "value": "WARN"}]])
def test_stored_provenance_loads_in_either_form(overrode: list[Any]) -> None:
    doc = {"id": "t", "revision": 1, "name": "n", "steps": [], "policy_version": 1,
           "resolved": [{"name": "A", "value": "1", "source": "user", "overrode": overrode}]}
    var = Workload.from_doc(doc).env[0]
    assert (var.name, var.source, var.overrode, var.secret) == ("A", "user", ("default",), False)


def test_provenance_round_trips_through_a_record() -> None:
    vision = project(defaults=[{"name": "NCCL_DEBUG", "value": "INFO", "when": {"gpus": "0"}}])
    for var in layered([EnvVar("OMP_NUM_THREADS", "1")], PLATFORM_POLICY, vision).variables:
        assert Resolved.from_dict(var.to_dict()) == var


# --- properties across layers --------------------------------------------------------------

@st.composite
def layered_scenarios(draw: st.DrawFn) -> tuple[list[EnvVar], Policy, Policy, TaskFacts]:
    """A platform policy, a project policy check_scope_policy accepts, a task and its env."""
    names = draw(st.lists(NAMES, unique=True, min_size=1, max_size=10))
    conds = st.one_of(st.none(), st.sampled_from([{"gpus": ">=1"}, {"gpus": "0"},
                                                  {"image": "cuda:*"}]))

    def entries(kinds: list[str], protected: bool) -> list[dict[str, Any]]:
        out = []
        for n, k in zip(names, kinds, strict=True):
            if k in ("locked", "reserved") and protected:
                entry: dict[str, Any] = {"name": n, "reason": "r"}
                if k == "locked":
                    entry["value"] = draw(VALUES)
            elif k == "default" and not protected:
                entry = {"name": n, "value": draw(VALUES)}
            else:
                continue
            if (when := draw(conds)) is not None:
                entry["when"] = when
            entry["secret"] = secret_if_long(entry.get("value"), draw(st.booleans()))
            out.append(entry)
        return out

    kinds = st.sampled_from(["default", "locked", "reserved", "free"])
    platform_kinds = [draw(kinds) for _ in names]
    project_kinds = [draw(kinds) for _ in names]
    platform_data = {"defaults": entries(platform_kinds, False),
                     "protected": entries(platform_kinds, True),
                     "on_conflict": draw(st.sampled_from(ON_CONFLICT))}
    assert check_policy(platform_data, LIMITS) == []
    base = Policy.from_dict({**platform_data, "version": 3})
    held = {p.name for p in base.protected}
    project_kinds = ["free" if n in held else k for n, k in zip(names, project_kinds,
                                                                 strict=True)]
    project_data = {"defaults": entries(project_kinds, False),
                    "protected": entries(project_kinds, True),
                    "on_conflict": draw(st.sampled_from(ON_CONFLICT))}
    assert check_scope_policy(project_data, base, LIMITS) == []
    vision = Policy.from_dict({**project_data, "version": 5, "scope": "project:vision"})
    candidates = [*names, *PLATFORM_NAMES, *draw(st.lists(NAMES, max_size=3))]
    user_names = draw(st.lists(st.sampled_from(candidates), unique=True, max_size=10))
    user = [EnvVar(n, draw(VALUES), draw(st.booleans())) for n in user_names]
    task = TaskFacts(gpus=draw(st.integers(0, 4)), image=draw(st.sampled_from(["cuda:12", "x"])))
    return user, base, vision, task


@given(layered_scenarios())
def test_property_a_platform_protected_name_only_ever_holds_the_platforms_value(
        scenario: tuple[list[EnvVar], Policy, Policy, TaskFacts]) -> None:
    user, base, vision, task = scenario
    result = layered(user, base, vision, task=task)
    for held in base.protected:
        got = find(result, held.name)
        if applies(held.when, task):
            assert got is None if held.value is None else (
                got is not None and got.value == held.value and got.scope == "platform")
        elif got is not None and got.source != "user":
            assert got.scope == "platform"  # only the platform itself may have set it


@given(layered_scenarios())
def test_property_under_reject_no_task_variable_is_silently_dropped(
        scenario: tuple[list[EnvVar], Policy, Policy, TaskFacts]) -> None:
    user, base, vision, task = scenario
    strict = [replace(base, on_conflict="reject"), replace(vision, on_conflict="reject")]
    result = layered(user, *strict, task=task)
    assert result.warnings == []
    errors = {e.variable for e in result.errors}
    for var in user:
        got = find(result, var.name)
        kept = got is not None and (got.source, got.value) == ("user", var.value)
        assert kept or var.name in errors, var


@given(layered_scenarios())
def test_property_every_variable_names_its_layer(
        scenario: tuple[list[EnvVar], Policy, Policy, TaskFacts]) -> None:
    user, base, vision, task = scenario
    versions = {"platform": 3, "project:vision": 5}
    for var in layered(user, base, vision, task=task).variables:
        if var.source in ("default", "protected"):
            assert var.policy_version == versions[var.scope]  # type: ignore[index]
        else:
            assert (var.scope, var.policy_version) == (None, None)
        assert var.overrode == tuple(dict.fromkeys(s.source for s in var.shadowed))
