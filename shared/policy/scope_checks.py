"""A scope's policy checked against every scope above it: it may add, never weaken.

``check_scope_policy`` is what a ``PUT`` of a project's policy runs: the checks every
policy passes (``check_policy``) and those against each policy of the scopes outside it
(``above``: today the platform's), each naming the variable and the entry it conflicts
with.  ``project_conflicts`` runs it again for every project's saved policy when the
platform's changes: a platform policy may be tightened under projects whose policies it
now refuses, and their maintainers are told.  (The rule codes ``layer.*`` keep their
first name: clients match on them.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from shared.env.envlist import EnvVar, Limits
from shared.errors import Problem
from shared.policy.conditions import may_overlap
from shared.policy.endpoints import endpoint_problems, misplaced_allowances
from shared.policy.hooks import DEFAULT_HOOKS, StartupHooks, injection_problems
from shared.policy.model import (
    PLATFORM_SCOPE,
    SCOPE_PREFIX,
    Default,
    Policy,
    Protected,
    check_policy,
    node_problems,
    values_against_rules,
)
from shared.policy.rules import Rule, valid_rules, value_problems
from shared.policy.scopes import Chain
from shared.secrets import MASK


def check_scope_policy(data: Mapping[str, Any], above: Chain | Policy,
                       limits: Limits, hooks: StartupHooks = DEFAULT_HOOKS,
                       reserved: tuple[str, ...] = (), project: str | None = None
                       ) -> list[Problem]:
    """Every reason an inner scope's policy (``data``) cannot be saved under the policies
    of the scopes ``above`` it (a chain, or the platform's policy alone); ``hooks``: the
    start-up hook names only the platform may give a value, and the endpoint variables
    only the platform may, or allow ``project`` to (the policy's own ``scope`` when not
    given); ``reserved``: the variable prefixes backends' own commands read (each backend
    declares its own)."""
    uppers = list(above) if isinstance(above, Chain) else [above]
    rules = valid_rules(data.get("rules"))
    problems = check_policy(data, limits)
    problems += [p for p in node_problems(list(data.get("defaults", [])), [], [],
                                          platform=False) if p.rule == "when.node_scope"]
    problems += injection_problems(data, hooks)
    problems += _endpoint_problems(data, uppers, hooks, project)
    problems += _scheduler_names(data, reserved)
    for upper in uppers:
        problems += _protected_names(data, upper)
        problems += values_against_rules(data, upper.rules, _whose(upper))
        problems += [p for rule_index, rule in enumerate(rules)
                     for p in _unsatisfiable(rule, f"rules[{rule_index}]", upper)]
        problems += _defaults_against(rules, data, upper)
    return problems


def _endpoint_problems(data: Mapping[str, Any], uppers: list[Policy], hooks: StartupHooks,
                       project: str | None) -> list[Problem]:
    """The draft's values of endpoint variables the platform's policy does not allow its
    project (a name a scope above protects is refused for that already), and any
    allowance it would grant itself."""
    if project is None and isinstance(data.get("scope"), str):
        project = data["scope"].removeprefix(SCOPE_PREFIX)
    platform = next((u for u in uppers if u.scope == PLATFORM_SCOPE), None)
    allowed = platform.allowed_endpoints(project) if platform and project else frozenset()
    held = {p.name for upper in uppers for p in upper.protected}
    return (endpoint_problems(data, hooks.endpoints, project, allowed, held)
            + misplaced_allowances(data))


def _whose(policy: Policy) -> str:
    return "the platform's" if policy.scope == PLATFORM_SCOPE else f"{policy.scope}'s"


@dataclass(frozen=True)
class ProjectConflict:
    """A project's saved policy that the platform's policy, saved since, would refuse."""

    project: str
    policy_version: int
    problems: tuple[Problem, ...]

    def variables(self) -> list[str]:
        """The variables the problems name, each once: what an audit entry may keep."""
        return sorted({p.variable for p in self.problems if p.variable})

    def to_dict(self) -> dict[str, Any]:
        return {"project": self.project, "policy_version": self.policy_version,
                "problems": [p.to_dict() for p in self.problems]}


def project_conflicts(projects: Mapping[str, Policy], platform: Policy,
                      limits: Limits, hooks: StartupHooks = DEFAULT_HOOKS,
                      reserved: tuple[str, ...] = ()) -> list[ProjectConflict]:
    """Each project whose current policy ``check_scope_policy`` would refuse under ``platform``,
    by name.  One check per project, whatever the number of tasks."""
    found: list[ProjectConflict] = []
    for name in sorted(projects):
        policy = projects[name]
        problems = check_scope_policy(policy.to_dict(), platform, limits, hooks, reserved,
                                      project=name)
        if problems:
            found.append(ProjectConflict(name, policy.version, tuple(problems)))
    return found


def _protected_names(data: Mapping[str, Any], upper: Policy) -> list[Problem]:
    """Any inner entry for a name an outer scope protects: setting it, protecting it with
    another value or none, all would weaken the outer scope's hold on it."""
    held = {p.name: p for p in upper.protected}
    return [Problem(rule="layer.platform_protected", variable=name, field=field,
                    message=f"{name} conflicts with {_whose(upper)} protected entry "
                            f"{_describe(held[name])}; a policy of an inner scope cannot set, "
                            f"protect or unprotect a name {upper.scope} protects")
            for field, name in _named_entries(data) if name in held]


def _named_entries(data: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, name) of each default and protected entry of a policy's raw data."""
    for where in ("defaults", "protected"):
        for index, entry in enumerate(data.get(where, [])):
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if isinstance(name, str):
                yield f"{where}[{index}].name", name


# Variables a scheduler's commands read as their own options (Slurm's SLURM_CPUS_PER_TASK,
# SLURM_EXPORT_ENV, SRUN_CPUS_PER_TASK, ...): whoever sets them changes how every step of
# the task is started, so only the platform's own policy may.  Each backend declares its
# prefixes (``BackendTraits.reserved_prefixes``).
def _scheduler_names(data: Mapping[str, Any], reserved: tuple[str, ...]) -> list[Problem]:
    if not reserved:
        return []
    return [Problem(rule="layer.scheduler_variable", variable=name, field=field,
                    message=f"{name} is read by the scheduler itself when it starts a step "
                            f"({', '.join(p + '*' for p in reserved)}); only the "
                            "platform's policy may set it")
            for field, name in _named_entries(data) if name.startswith(reserved)]


def _unsatisfiable(rule: Rule, where: str, upper: Policy) -> list[Problem]:
    """The rule can never hold where an outer scope's own protected value applies."""
    problems: list[Problem] = []
    for held in upper.protected:
        if not (rule.covers(held.name) and may_overlap(rule.when, held.when)):
            continue
        if held.value is None:
            if rule.required and rule.name == held.name:
                problems.append(_never(rule, where, held, upper, f"it is required, but "
                                       f"{upper.scope} reserves it and no task can set it"))
            continue
        broken = value_problems(EnvVar(held.name, held.value, held.secret), rule)
        problems += [_never(rule, where, held, upper,
                            f"{_whose(upper)} value breaks it ({p.rule})") for p in broken]
    return problems


def _never(rule: Rule, where: str, held: Protected, upper: Policy, why: str) -> Problem:
    return Problem(rule="layer.rule_unsatisfiable", variable=held.name, field=where,
                   message=f"rule {rule.name} can never be satisfied for {held.name}: {why}; "
                           f"it conflicts with {_whose(upper)} protected entry "
                           f"{_describe(held)}")


def _defaults_against(rules: list[Rule], data: Mapping[str, Any],
                      upper: Policy) -> list[Problem]:
    """An outer scope's defaults (farther from the task than the inner scope's) that break
    an inner rule, unless the inner policy sets a default of the same name for every task
    (then the outer one never applies)."""
    shadowing = {d.get("name") for d in data.get("defaults", [])
                 if isinstance(d, Mapping) and not d.get("when")}
    problems: list[Problem] = []
    for default in upper.defaults:
        if default.name in shadowing:
            continue
        for index, rule in enumerate(rules):
            if rule.covers(default.name) and may_overlap(rule.when, default.when):
                problems += [_default_breaks(p, index, default, upper)
                             for p in value_problems(default, rule)]
    return problems


def _default_breaks(problem: Problem, index: int, default: Default, upper: Policy) -> Problem:
    whose = "the platform" if upper.scope == PLATFORM_SCOPE else upper.scope
    return Problem(rule=problem.rule, variable=default.name, field=f"rules[{index}]",
                   limit=problem.limit,
                   message=f"{whose} default {problem.message}; add a default of your own "
                           f"for {default.name} that satisfies the rule")


def _describe(held: Protected) -> str:
    value = "reserved, no value" if held.value is None else (
        MASK if held.secret else repr(held.value))
    return f"{held.name} ({value}; reason: {held.reason})"
