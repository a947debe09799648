"""What the validation and policy stages decide for a task record.

Pure functions from a record to ``(new state, fields to set)``.  The workers
apply them through the store's compare-and-set; the manifest endpoint and the
preview call them for a task the workers have not resolved, so all always agree.
"""

from __future__ import annotations

from typing import Any

from shared import envlist, states
from shared.envlist import Limits
from shared.policy import Policy, Resolution, platform_env, resolve

Decision = tuple[str, dict[str, Any]]
# A preview resolves a task that does not exist yet: TASK_ID shows this instead.
PLACEHOLDER_ID = "<assigned when the task is created>"


def decide_validation(doc: dict[str, Any], limits: Limits) -> Decision:
    problems = envlist.validate(doc["env"], limits)
    if problems:
        return states.REJECTED, {"errors": [p.to_dict() for p in problems]}
    return states.VALIDATED, {"warnings": [p.to_dict() for p in envlist.advise(doc["env"])]}


def decide_policy(doc: dict[str, Any], policy: Policy) -> Decision:
    return _policy_decision(doc, policy, _resolution(doc, policy))


def preview(env: list[dict[str, Any]], name: str, policy: Policy,
            limits: Limits) -> dict[str, Any]:
    """What a new task with this env would get: both stages' decisions, nothing stored.

    Unlike a rejected record, a preview the policy refuses still lists the variables.
    """
    doc: dict[str, Any] = {"id": PLACEHOLDER_ID, "name": name, "revision": 1, "env": env}
    state, checked = decide_validation(doc, limits)
    if state == states.REJECTED:
        return {"ok": False, "policy_version": policy.version, "variables": [],
                "warnings": [], "errors": checked["errors"]}
    doc.update(checked)
    result = _resolution(doc, policy)
    state, decided = _policy_decision(doc, policy, result)
    return {"ok": state == states.RESOLVED, "policy_version": policy.version,
            "variables": [v.to_dict() for v in result.variables],
            "warnings": decided["warnings"], "errors": decided.get("errors", [])}


def _resolution(doc: dict[str, Any], policy: Policy) -> Resolution:
    return resolve(envlist.parse(doc["env"]), policy,
                   platform_env(doc["id"], doc["name"], doc["revision"], policy.version))


def _policy_decision(doc: dict[str, Any], policy: Policy, result: Resolution) -> Decision:
    common = {"policy_version": policy.version,
              "warnings": doc["warnings"] + [w.to_dict() for w in result.warnings]}
    if not result.ok:
        return states.REJECTED, {"errors": [e.to_dict() for e in result.errors], **common}
    return states.RESOLVED, {"resolved": [v.to_dict() for v in result.variables], **common}
