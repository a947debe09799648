"""What the validation and policy stages decide for a task record.

Pure functions from a record to ``(new state, fields to set)``.  The workers
apply them through the store's compare-and-set; the manifest endpoint and the
preview call them for a task the workers have not resolved, so all always agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shared.config import DEFAULT_IMAGE
from shared.doctor.checkup import Doctor, Findings, examine
from shared.env import envlist
from shared.env.envlist import Limits
from shared.env.identity import Group, differing, replica_env
from shared.errors import Problem
from shared.policy.conditions import TaskFacts
from shared.policy.hooks import DEFAULT_HOOKS, StartupHooks
from shared.policy.model import (
    Policy,
    Resolution,
    Resolved,
    node_defaults,
    platform_env,
    resolve_scopes,
)
from shared.policy.scopes import Chain
from shared.task import revisions, states

Decision = tuple[str, dict[str, Any]]
# A preview resolves a task that does not exist yet: TASK_ID shows this instead.
PLACEHOLDER_ID = "<assigned when the task is created>"


def decide_validation(doc: dict[str, Any], limits: Limits, chain: Chain | None = None
                      ) -> Decision:
    """With ``chain`` (the policies of the task's scopes), a list the validation rules
    reject is judged against the policies too, so its rejection names every problem at
    once (:func:`every_problem`); a valid list meets them in the policy stage."""
    problems = envlist.validate(doc["env"], limits)
    if problems:
        if chain is not None:
            problems += policy_problems(doc, chain, limits)
        return states.REJECTED, {"errors": _stored(problems)}
    return states.VALIDATED, {"warnings": _stored(envlist.advise(doc["env"]))}


def every_problem(doc: dict[str, Any], chain: Chain, limits: Limits) -> list[Problem]:
    """Every problem of the record's env, uncapped: the validation rules' first, then
    the policy's on the entries it can judge.  What the API refuses before storing, the
    validation stage, preview and the manifest endpoint all report through this."""
    problems = envlist.validate(doc["env"], limits)
    if not problems:
        return list(_resolution(doc, chain).errors)
    return problems + policy_problems(doc, chain, limits)


def policy_problems(doc: dict[str, Any], chain: Chain, limits: Limits) -> list[Problem]:
    """What the policy refuses in a list the validation rules reject: judged on the
    entries well-formed enough to judge (a name that follows the rule, a string value,
    each name once), as the policy stage would judge them once the rest is fixed."""
    judged = {**doc, "env": envlist.judgeable(doc["env"], limits)}
    return list(_resolution(judged, chain).errors)


def decide_policy(doc: dict[str, Any], chain: Chain,
                  earlier: dict[str, Any] | None = None,
                  hooks: StartupHooks = DEFAULT_HOOKS, doctor: Doctor | None = None
                  ) -> Decision:
    """``chain``: the current policies of the task's scopes.  ``earlier``: the revision a
    rerun started from; its resolved env is compared with this one's, variable by
    variable (the drift report).  ``hooks``: the start-up hook names only the platform's
    policy may give a value.  ``doctor``: the catalog that applies; its advice joins the
    warnings (see :mod:`shared.doctor`)."""
    result = _resolution(doc, chain, hooks)
    state, decided = _policy_decision(doc, chain.platform, result,
                                      _examined(doc, result, chain, doctor))
    if earlier is not None and earlier.get("resolved") is not None:
        decided["drift"] = revisions.drift(earlier["resolved"],
                                           [v.to_dict() for v in result.variables],
                                           earlier.get("policy_version"),
                                           chain.platform.version)
    return state, decided


def preview(env: list[dict[str, Any]], name: str, chain: Chain, limits: Limits,
            task: Mapping[str, Any] | None = None,
            hooks: StartupHooks = DEFAULT_HOOKS,
            doctor: Doctor | None = None, group: Group | None = None) -> dict[str, Any]:
    """What a new task with this env would get: both stages' decisions, nothing stored.

    ``task`` holds the facts conditions look at (``project``, ``resources``, ``image``,
    ``replicas``); ``not_applied`` lists the conditional entries that do not reach such a
    task, and why.  Unlike a rejected record, a preview the policy refuses still lists the
    variables.  They are replica 0's, its identity included (``group``: the task's
    replicas and where replica 0 listens); ``differs`` names what the other replicas hold
    differently.
    """
    doc: dict[str, Any] = {**(task or {}), "id": PLACEHOLDER_ID, "name": name, "revision": 1,
                           "env": env}
    group = group or Group(int(doc.get("replicas") or 1),
                           int(doc.get("procs_per_replica") or 1))
    shown = {"policy_version": chain.platform.version, "policy_versions": chain.versions(),
             "not_applied": not_applied(chain, facts_of(doc)),
             "replicas": group.replicas, "differs": differs(group)}
    state, checked = decide_validation(doc, limits, chain)
    if state == states.REJECTED:
        return {"ok": False, **shown, "variables": [], "warnings": [],
                "errors": checked["errors"]}
    doc.update(checked)
    result = _resolution(doc, chain, hooks)
    state, decided = _policy_decision(doc, chain.platform, result,
                                      _examined(doc, result, chain, doctor))
    out = {"ok": state == states.RESOLVED, **shown,
           "variables": with_identity([v.to_dict() for v in result.variables], group, 0),
           "warnings": decided["warnings"], "errors": decided.get("errors", [])}
    if "doctor" in decided:
        out["doctor"] = decided["doctor"]
    if "per_node" in decided:  # resolved on each node: which may reach it, and where
        out["per_node"] = decided["per_node"]
    return out


def with_identity(variables: list[dict[str, Any]], group: Group, index: int
                  ) -> list[dict[str, Any]]:
    """A resolved env as replica ``index`` holds it: its identity after the platform's
    other variables, where a reader looks for who the task is."""
    platform = [v for v in variables if v.get("source") == "platform"]
    rest = [v for v in variables if v.get("source") != "platform"]
    identity = [Resolved(name, value, "platform").to_dict()
                for name, value in replica_env(group, index)]
    return platform + identity + rest


def differs(group: Group) -> list[dict[str, str]]:
    """What the other replicas hold differently from replica 0."""
    last = group.replicas - 1
    return [{"name": name, "values": f"the replica's index: 0 in replica 0 ... {last} in "
                                     f"replica {last}"} for name in differing(group)]


def draft_resolution(doc: dict[str, Any], chain: Chain, limits: Limits,
                     hooks: StartupHooks = DEFAULT_HOOKS) -> Resolution:
    """What both stages would make of the record's env under these policies (a draft's
    impact): a validation problem rejects it as the validation stage would."""
    problems = envlist.validate(doc["env"], limits)
    if problems:
        return Resolution(chain.platform.version, errors=problems)
    return _resolution(doc, chain, hooks)


def not_applied(chain: Iterable[Policy], task: TaskFacts) -> list[dict[str, Any]]:
    """The conditional entries whose ``when`` this task does not match (a per-node one that
    may reach it on some node is the preview's ``per_node``, not here)."""
    found: list[dict[str, Any]] = []
    for policy in chain:
        kinds = (("default", policy.defaults), ("protected", policy.protected),
                 ("rule", policy.rules))
        for kind, entries in kinds:
            # An entry for another project's tasks is that project's business: unnamed.
            found += [{"name": e.name, "kind": kind, "scope": policy.scope,
                       "when": e.when.text()}
                      for e in entries if e.when is not None and not e.when.matches(task)
                      and not (e.when.node is not None and e.when.matches_task(task))
                      and not e.when.names_another_project(task.project)]
    return found


def facts_of(doc: Mapping[str, Any]) -> TaskFacts:
    """What conditions see of a task; without an image, the launchers' default one."""
    return TaskFacts.from_doc(doc, DEFAULT_IMAGE)


def _resolution(doc: dict[str, Any], chain: Chain,
                hooks: StartupHooks = DEFAULT_HOOKS) -> Resolution:
    return resolve_scopes(envlist.parse(doc["env"]), chain.policies,
                          platform_env(doc["id"], doc["name"], doc["revision"],
                                       chain.platform.version),
                          facts_of(doc), hooks, pinned=doc.get("pinned_defaults") or ())


def _examined(doc: dict[str, Any], result: Resolution, chain: Chain,
              doctor: Doctor | None) -> Findings:
    if doctor is None:
        return Findings()
    return examine(doc, result, chain.policies, doctor, facts_of(doc))


def _policy_decision(doc: dict[str, Any], policy: Policy, result: Resolution,
                     found: Findings | None = None) -> Decision:
    # The validation stage's warnings are capped already; at most one more cap's worth here.
    found = found or Findings()
    common: dict[str, Any] = {
        "policy_version": policy.version, "policy_versions": result.versions,
        "warnings": doc["warnings"] + _stored(result.warnings + found.warnings)}
    if found.report is not None:
        common["doctor"] = found.report
    errors = result.errors + found.errors
    if errors:
        return states.REJECTED, {"errors": _stored(errors), **common}
    per_node = node_defaults(policy, facts_of(doc), {v.name for v in result.variables})
    if per_node:  # said only when some: a task without pays nothing
        common["per_node"] = per_node
    return states.RESOLVED, {"resolved": [v.to_dict() for v in result.variables], **common}


def _stored(problems: list[Problem]) -> list[dict[str, Any]]:
    """Problems as a record keeps them: capped, so a list's size never depends on the input's."""
    return [p.to_dict() for p in envlist.capped(problems)]
