"""What the validation and policy stages decide for a task record.

Pure functions from a record to ``(new state, fields to set)``.  The workers
apply them through the store's compare-and-set; the manifest endpoint calls them
for a revision the workers have not resolved yet, so both always agree.
"""

from __future__ import annotations

from typing import Any

from shared import envlist, states
from shared.envlist import Limits
from shared.policy import Policy, platform_env, resolve

Decision = tuple[str, dict[str, Any]]


def decide_validation(doc: dict[str, Any], limits: Limits) -> Decision:
    problems = envlist.validate(doc["env"], limits)
    if problems:
        return states.REJECTED, {"errors": [p.to_dict() for p in problems]}
    return states.VALIDATED, {"warnings": [p.to_dict() for p in envlist.advise(doc["env"])]}


def decide_policy(doc: dict[str, Any], policy: Policy) -> Decision:
    result = resolve(envlist.parse(doc["env"]), policy,
                     platform_env(doc["id"], doc["name"], doc["revision"], policy.version))
    common = {"policy_version": policy.version,
              "warnings": doc["warnings"] + [w.to_dict() for w in result.warnings]}
    if not result.ok:
        return states.REJECTED, {"errors": [e.to_dict() for e in result.errors], **common}
    return states.RESOLVED, {"resolved": [v.to_dict() for v in result.variables], **common}
