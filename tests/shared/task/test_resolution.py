"""Preview: the validation and policy stages' decisions for a task not yet created."""

from __future__ import annotations

from shared.env.envlist import EnvVar, Limits
from shared.policy.model import Policy, Protected
from shared.task import states
from shared.task.resolution import PLACEHOLDER_ID, decide_policy, decide_validation, preview

LIMITS = Limits()
POLICY = Policy(version=3, defaults=(EnvVar("DATA_DIR", "/data"),),
                protected=(Protected("NCCL_P2P_DISABLE", "no p2p here", "1"),))


def test_a_preview_resolves_as_the_stages_would() -> None:
    env = [{"name": "LR", "value": "0.1"}]
    got = preview(env, "train", POLICY, LIMITS)
    doc = {"id": PLACEHOLDER_ID, "name": "train", "revision": 1, "env": env}
    _, checked = decide_validation(doc, LIMITS)
    state, decided = decide_policy({**doc, **checked}, POLICY)
    assert state == states.RESOLVED and got["ok"] is True
    assert got["variables"] == decided["resolved"] and got["warnings"] == decided["warnings"]
    assert got["policy_version"] == 3 and got["errors"] == []
    assert {"name": "TASK_ID", "value": PLACEHOLDER_ID, "source": "platform", "overrode": [],
            "secret": False} in got["variables"]


def test_a_preview_the_policy_refuses_still_lists_the_variables() -> None:
    got = preview([{"name": "NCCL_P2P_DISABLE", "value": "0"}], "train", POLICY, LIMITS)
    assert got["ok"] is False
    assert [e["rule"] for e in got["errors"]] == ["policy.protected"]
    assert {v["name"] for v in got["variables"]} >= {"DATA_DIR", "NCCL_P2P_DISABLE"}


def test_an_invalid_env_stops_the_preview_before_the_policy() -> None:
    got = preview([{"name": "bad name", "value": "1"}, {"name": "1X", "value": "2"}],
                  "train", POLICY, LIMITS)
    assert got == {"ok": False, "policy_version": 3, "policy_versions": {"platform": 3},
                   "not_applied": [], "variables": [], "warnings": [], "errors": got["errors"]}
    assert [e["variable"] for e in got["errors"]] == ["bad name", "1X"]
