"""The doctor's whole examination of one revision, as the policy stage and the preview run it.

Pure: the catalog that applies is handed in (see :mod:`shared.doctor.store` for where
the edited layers live), and the task's file limits, which bound what the doctor reads
(by default this process's settings, as the API and the workers read them).  What it
finds is split by severity: advice is a warning; a policy rule with ``documented: true``
reports with its own severity; a script read with no value and no default is an error
only where the task or a policy layer asks for ``strict_env``.  A script the doctor
could not read, too complex or past the files' limits, is a warning even then:
``strict_env`` is about the reads the doctor saw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.config import process_settings
from shared.doctor import advice
from shared.doctor.catalog import Catalog
from shared.doctor.preflight import MISSING, preflight
from shared.errors import Problem
from shared.file_limits import FileLimits
from shared.policy.conditions import TaskFacts, applies
from shared.policy.model import Policy, Resolution

DOCUMENTED = "rule.documented"


def _deployment_files() -> FileLimits:
    return FileLimits.from_settings(process_settings())


@dataclass(frozen=True)
class Doctor:
    """What the doctor knows of the deployment: the catalog that applies to the task, and
    the task's file limits (past them, the doctor reads no further file)."""

    catalog: Catalog
    files: FileLimits = field(default_factory=_deployment_files)


@dataclass
class Findings:
    warnings: list[Problem] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    report: dict[str, Any] | None = None  # the pre-flight report, when the task has scripts


def examine(doc: Mapping[str, Any], result: Resolution, layers: Sequence[Policy],
            doctor: Doctor, task: TaskFacts) -> Findings:
    """Advice on the task's own variables, the policies' ``documented`` rules, and the
    pre-flight read of the task's files against the resolved env."""
    found = Findings()
    own = [v for v in result.variables if v.source == "user"]
    found.warnings += advice.advise(own, doctor.catalog)
    for layer in layers:
        for rule in layer.rules:
            if rule.documented and applies(rule.when, task):
                problems = _undocumented(own, rule, layer, doctor.catalog)
                (found.warnings if rule.severity == "warning" else found.errors).extend(problems)
    files = doc.get("files") or []
    if files:
        strict = bool(doc.get("strict_env")) or any(layer.strict_env for layer in layers)
        report = preflight(files, [v.to_dict() for v in result.variables], doctor.catalog,
                           strict, doctor.files)
        for problem in report.problems():
            blocking = strict and problem.rule == MISSING
            (found.errors if blocking else found.warnings).append(problem)
        found.report = report.to_dict()
    return found


def _undocumented(variables: Sequence[advice.Valued], rule: Any, layer: Policy,
                  catalog: Catalog) -> list[Problem]:
    where = "the platform" if layer.scope == "platform" else \
        f"project {layer.scope.removeprefix('project:')}"
    problems: list[Problem] = []
    for var in variables:
        if not rule.covers(var.name) or var.name in catalog:
            continue
        guesses = advice.likely(var.name, catalog.kin(var.name))
        note = f" (rule {rule.name} of {where}: names it covers must be documented)"
        if guesses:
            problems.append(advice.near_miss(var.name, guesses, catalog, DOCUMENTED, note))
        else:
            problems.append(Problem(
                rule=DOCUMENTED, variable=var.name,
                message=f"{var.name} is not a documented variable{note}"))
    return problems
