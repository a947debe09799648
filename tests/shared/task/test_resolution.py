"""Preview: the validation and policy stages' decisions for a task not yet created."""

from __future__ import annotations

from shared.env.envlist import EnvVar, Limits
from shared.env.identity import IDENTITY_NAMES
from shared.policy.model import Policy, Protected
from shared.policy.scopes import Chain
from shared.task import states
from shared.task.resolution import PLACEHOLDER_ID, decide_policy, decide_validation, preview

LIMITS = Limits()
POLICY = Policy(version=3, defaults=(EnvVar("DATA_DIR", "/data"),),
                protected=(Protected("NCCL_P2P_DISABLE", "no p2p here", "1"),))


def test_a_preview_resolves_as_the_stages_would() -> None:
    env = [{"name": "LR", "value": "0.1"}]
    got = preview(env, "train", Chain.of(POLICY), LIMITS)
    doc = {"id": PLACEHOLDER_ID, "name": "train", "revision": 1, "env": env}
    _, checked = decide_validation(doc, LIMITS)
    state, decided = decide_policy({**doc, **checked}, Chain.of(POLICY))
    assert state == states.RESOLVED and got["ok"] is True
    shared = [v for v in got["variables"] if v["name"] not in IDENTITY_NAMES]
    assert shared == decided["resolved"] and got["warnings"] == decided["warnings"]
    assert got["policy_version"] == 3 and got["errors"] == []
    assert {"name": "TASK_ID", "value": PLACEHOLDER_ID, "source": "platform", "overrode": [],
            "secret": False} in got["variables"]


def test_a_preview_the_policy_refuses_still_lists_the_variables() -> None:
    got = preview([{"name": "NCCL_P2P_DISABLE", "value": "0"}], "train", Chain.of(POLICY), LIMITS)
    assert got["ok"] is False
    assert [e["rule"] for e in got["errors"]] == ["policy.protected"]
    assert {v["name"] for v in got["variables"]} >= {"DATA_DIR", "NCCL_P2P_DISABLE"}


def test_an_invalid_env_lists_no_variables() -> None:
    got = preview([{"name": "bad name", "value": "1"}, {"name": "1X", "value": "2"}],
                  "train", Chain.of(POLICY), LIMITS)
    assert got == {"ok": False, "policy_version": 3, "policy_versions": {"platform": 3},
                   "not_applied": [], "variables": [], "warnings": [], "errors": got["errors"],
                   "replicas": 1, "differs": []}
    assert [e["variable"] for e in got["errors"]] == ["bad name", "1X"]


THREE_PROBLEMS = [{"name": "1BAD", "value": "x"}, {"name": "LR", "value": "0.1"},
                  {"name": "LR", "value": "0.2"}, {"name": "NCCL_P2P_DISABLE", "value": "0"}]


def test_a_list_the_validation_rules_reject_is_judged_by_the_policy_too() -> None:
    doc = {"id": "t1", "name": "train", "revision": 1, "env": THREE_PROBLEMS}
    state, checked = decide_validation(doc, LIMITS, Chain.of(POLICY))
    assert state == states.REJECTED
    assert [(e["rule"], e["variable"]) for e in checked["errors"]] == [
        ("name.shell", "1BAD"), ("name.duplicate", "LR"),
        ("policy.protected", "NCCL_P2P_DISABLE")]
    assert "no p2p here" in checked["errors"][2]["message"]


def test_a_preview_names_every_problem_the_policy_s_included() -> None:
    got = preview(THREE_PROBLEMS, "train", Chain.of(POLICY), LIMITS)
    assert got["ok"] is False
    assert [e["rule"] for e in got["errors"]] == ["name.shell", "name.duplicate",
                                                   "policy.protected"]


def test_every_problem_is_capped_with_the_policy_s_counted() -> None:
    env = [{"name": "1BAD", "value": "x"}] * 120 + [{"name": "NCCL_P2P_DISABLE", "value": "0"}]
    doc = {"id": "t1", "name": "train", "revision": 1, "env": env, "steps": [["true"]]}
    _, checked = decide_validation(doc, LIMITS, Chain.of(POLICY))
    assert len(checked["errors"]) == 101 and checked["errors"][-1]["rule"] == "errors.truncated"


def test_the_policy_judges_a_name_s_first_entry_only() -> None:
    from shared.env.envlist import judgeable
    env = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}, {"name": "B", "value": 3},
           {"name": "2X", "value": "1"}, {"name": "C", "value": "1", "secret": "yes"}]
    assert judgeable(env, LIMITS) == [{"name": "A", "value": "1"}]


def test_per_node_defaults_travel_with_the_revision_and_never_override() -> None:
    from shared.policy.conditions import When
    from shared.policy.model import Default
    from shared.task.workload import Workload

    gpu, cpu = When(node="gpu-*"), When(node="cpu-*")
    policy = Policy(version=4, defaults=(
        Default("NCCL_SOCKET_IFNAME", "ib0", False, gpu),
        Default("NCCL_SOCKET_IFNAME", "eth1", False, cpu),
        Default("LR", "0.5", False, When(node="*")),
        Default("BIG", "1", False, When.from_dict({"node": "*", "gpus": ">=8"}))))
    env = [{"name": "LR", "value": "0.1"}]
    doc = {"id": "t1", "name": "train", "revision": 1, "env": env, "steps": [["true"]]}
    _, checked = decide_validation(doc, LIMITS)
    state, decided = decide_policy({**doc, **checked}, Chain.of(policy))

    assert state == states.RESOLVED
    # Not resolved here: no task knows its node before it runs.
    assert "NCCL_SOCKET_IFNAME" not in {v["name"] for v in decided["resolved"]}
    # The user's LR wins everywhere; BIG is for tasks of 8 GPUs and more.
    assert decided["per_node"] == [
        {"name": "NCCL_SOCKET_IFNAME", "value": "ib0", "node": "gpu-*", "policy_version": 4},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth1", "node": "cpu-*", "policy_version": 4}]
    workload = Workload.from_doc({**doc, **checked, **decided})
    assert workload.node_env("gpu-07") == {"NCCL_SOCKET_IFNAME": "ib0"}
    assert workload.node_env("cpu-1") == {"NCCL_SOCKET_IFNAME": "eth1"}
    assert workload.node_env("login") == {}
    plain = decide_policy({**doc, **checked}, Chain.of(POLICY))[1]
    assert "per_node" not in plain  # a task without pays nothing


def test_a_preview_shows_the_per_node_defaults_that_may_reach_the_task() -> None:
    from shared.policy.conditions import When
    from shared.policy.model import Default

    policy = Policy(version=5, defaults=(
        Default("NCCL_SOCKET_IFNAME", "ib0", False, When(node="gpu-*")),
        Default("BIG", "1", False, When.from_dict({"node": "*", "gpus": ">=8"}))))
    got = preview([], "train", Chain.of(policy), LIMITS)
    assert got["per_node"] == [{"name": "NCCL_SOCKET_IFNAME", "value": "ib0",
                                "node": "gpu-*", "policy_version": 5}]
    assert [(e["name"], e["when"]) for e in got["not_applied"]] == [("BIG", "gpus>=8 and node=*")]
