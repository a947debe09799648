"""Each replica's identity: the variables the platform sets per replica, and who may not."""

from __future__ import annotations

import pytest

from shared.env.envlist import EnvVar, Limits
from shared.env.identity import IDENTITY_NAMES, Group, differing, replica_env
from shared.policy.conditions import TaskFacts, When, check_when
from shared.policy.model import Policy, Protected, check_policy, resolve_scopes
from shared.policy.rules import Rule
from shared.policy.scopes import Chain
from shared.task.resolution import preview

LIMITS = Limits()


def test_every_replica_gets_the_pytorchjob_and_torchrun_variables() -> None:
    group = Group(replicas=3, master_addr="job-0.job", master_port=29500)
    env = [dict(replica_env(group, k)) for k in range(3)]
    assert [e["RANK"] for e in env] == ["0", "1", "2"]
    assert [e["PET_NODE_RANK"] for e in env] == ["0", "1", "2"]
    assert [e["TASK_REPLICA"] for e in env] == ["0", "1", "2"]
    for e in env:
        assert (e["WORLD_SIZE"], e["TASK_REPLICAS"], e["PET_NNODES"]) == ("3", "3", "3")
        assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == ("job-0.job", "29500")
        assert (e["PET_MASTER_ADDR"], e["PET_MASTER_PORT"]) == ("job-0.job", "29500")
        assert e["PET_NPROC_PER_NODE"] == "1"
        assert set(e) == set(IDENTITY_NAMES)


def test_a_single_replica_is_a_world_of_one() -> None:
    env = dict(replica_env(Group(), 0))
    assert (env["RANK"], env["WORLD_SIZE"], env["PET_NNODES"]) == ("0", "1", "1")
    assert env["MASTER_ADDR"] == "127.0.0.1" and differing(Group()) == []


def test_with_several_processes_per_replica_torchrun_sets_rank_and_world_size() -> None:
    env = dict(replica_env(Group(replicas=2, procs_per_replica=4), 1))
    assert "RANK" not in env and "WORLD_SIZE" not in env
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_NPROC_PER_NODE"]) == ("2", "1", "4")


def test_a_replica_outside_the_group_is_a_bug() -> None:
    with pytest.raises(ValueError, match="replica 3"):
        replica_env(Group(replicas=3), 3)


def test_a_user_naming_identity_variables_is_refused_naming_each() -> None:
    user = [EnvVar("RANK", "0"), EnvVar("MASTER_ADDR", "x"), EnvVar("LR", "1")]
    result = resolve_scopes(user, [Policy()], [], TaskFacts())
    assert [(e.rule, e.variable) for e in result.errors] == [
        ("platform.identity", "RANK"), ("platform.identity", "MASTER_ADDR")]
    assert "per replica" in result.errors[0].message


def test_a_policy_naming_identity_variables_is_refused_entry_by_entry() -> None:
    data = {"defaults": [{"name": "WORLD_SIZE", "value": "8"}],
            "protected": [{"name": "MASTER_PORT", "value": "1", "reason": "r"}],
            "rules": [{"name": "PET_NNODES", "max": 4}, {"name": "NCCL_*", "max_length": 9}]}
    problems = [p for p in check_policy(data, LIMITS) if p.rule == "policy.platform_identity"]
    assert [(p.variable, p.field) for p in problems] == [
        ("WORLD_SIZE", "defaults[0].name"), ("MASTER_PORT", "protected[0].name"),
        ("PET_NNODES", "rules[0].name")]
    assert all("per replica" in p.message for p in problems)


def test_a_stored_version_naming_one_is_applied_without_it_and_says_so() -> None:
    old = Policy(version=4, defaults=(EnvVar("WORLD_SIZE", "8"), EnvVar("NCCL_DEBUG", "WARN")),
                 protected=(Protected("RANK", "no", "0"),),
                 rules=(Rule("WORLD_SIZE", required=True),))
    result = resolve_scopes([], [old], [], TaskFacts())
    assert result.ok and [v.name for v in result.variables] == ["NCCL_DEBUG"]
    assert sorted(w.variable for w in result.warnings if w.rule == "policy.identity_ignored") \
        == ["RANK", "WORLD_SIZE"]


def test_a_condition_on_replicas_reaches_only_distributed_tasks() -> None:
    assert check_when({"replicas": ">1"}, "when") == []
    assert check_when({"replicas": "many"}, "defaults[0].when")[0].rule == "when.replicas_invalid"
    when = When.from_dict({"replicas": ">1"})
    assert when is not None and when.text() == "replicas>1"
    assert when.matches(TaskFacts(replicas=4)) and not when.matches(TaskFacts(replicas=1))
    policy = Policy(version=2, defaults=(
        _default("NCCL_ASYNC_ERROR_HANDLING", "1", {"replicas": ">1"}),))
    multi = resolve_scopes([], [policy], [], TaskFacts(replicas=2))
    single = resolve_scopes([], [policy], [], TaskFacts(replicas=1))
    assert [(v.name, v.when) for v in multi.variables] == [("NCCL_ASYNC_ERROR_HANDLING",
                                                            "replicas>1")]
    assert single.variables == []


def test_preview_shows_replica_zero_and_what_the_others_hold() -> None:
    got = preview([{"name": "LR", "value": "1"}], "t", Chain.of(Policy()), LIMITS, {"replicas": 3})
    env = {v["name"]: v["value"] for v in got["variables"]}
    assert (env["RANK"], env["WORLD_SIZE"], env["TASK_REPLICA"]) == ("0", "3", "0")
    assert got["replicas"] == 3
    assert [d["name"] for d in got["differs"]] == ["TASK_REPLICA", "RANK", "PET_NODE_RANK"]
    assert "2 in replica 2" in got["differs"][0]["values"]


def test_preview_refuses_an_identity_variable_before_submitting() -> None:
    got = preview([{"name": "WORLD_SIZE", "value": "2"}], "t", Chain.of(Policy()), LIMITS)
    assert got["ok"] is False
    assert [(e["rule"], e["variable"]) for e in got["errors"]] == [
        ("platform.identity", "WORLD_SIZE")]


def _default(name: str, value: str, when: dict[str, str]) -> EnvVar:
    from shared.policy.model import Default
    return Default(name, value, False, When.from_dict(when))
