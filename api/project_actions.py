"""What admins and maintainers do to projects and their policies, for the API and pages.

A project policy is saved only if :func:`shared.policy.scope_checks.check_scope_policy`
finds nothing it would weaken in the policies of the scopes above it; a draft's impact is
measured with the same merge the policy stage runs
(``shared.task.resolution.draft_resolution``), over the latest revision of every task not
final plus the most recent 1,000 final ones in scope.  A platform policy
may be saved under projects it now refuses; ``platform_conflicts`` names them.
"""

from __future__ import annotations

import time
from typing import Any

import marshmallow as ma

from shared.access.projects import Project
from shared.env import envlist
from shared.errors import PolicyInvalid, Problem
from shared.policy.impact import TaskSnapshot, impact
from shared.policy.model import (
    SCOPE_PREFIX,
    Policy,
    Resolution,
    Resolved,
    check_policy,
    project_scope,
)
from shared.policy.scope_checks import ProjectConflict, check_scope_policy, project_conflicts
from shared.policy.scopes import Chain
from shared.store.tasks import Doc
from shared.task import states
from shared.task.resolution import draft_resolution, facts_of
from workers.services import Services

FINAL_CONSIDERED = 1000


def project_view(svc: Services, project: Project) -> Doc:
    policy = svc.policies.scoped(project_scope(project.name)).current()
    return {**project.to_dict(), "policy_version": policy.version}


def delete_project(svc: Services, name: str, actor: str) -> None:
    """The project and its memberships go; its policy versions stay, so the tasks resolved
    with them can still be explained (a project made again under this name starts empty)."""
    svc.projects.delete(name)
    svc.policies.scoped(project_scope(name)).retire()
    svc.audit.record(actor, "project.delete", name)


def draft_problems(svc: Services, data: Doc, project: str | None) -> list[Problem]:
    """Why the draft cannot be saved: a platform draft on its own, a project draft
    against the current policies of every scope above the project's."""
    if project is None:
        return check_policy(data, svc.limits)
    return check_scope_policy(data, _above(svc, project), svc.limits, svc.hooks,
                              svc.reserved_prefixes, project=project)


def _above(svc: Services, project: str) -> Chain:
    """The current policies of the scopes outside ``project``'s."""
    return svc.policies.chain({"project": project}).above(project_scope(project))


def platform_conflicts(svc: Services, platform: Policy) -> list[ProjectConflict]:
    """Every project whose current policy ``platform`` would refuse: the projects' current
    versions in one read, each version's body read once per process."""
    names = svc.projects.names()
    current = svc.policies.currents([project_scope(name) for name in names])
    return project_conflicts({name: current[project_scope(name)] for name in names}, platform,
                             svc.limits, svc.hooks, svc.reserved_prefixes)


def policy_conflicts(svc: Services, project_policy: Policy) -> list[Problem]:
    """What in a project's policy the current policies above it refuse (a platform policy
    saved after it may have protected a name or added a rule)."""
    project = project_policy.scope.removeprefix(SCOPE_PREFIX)
    return check_scope_policy(project_policy.to_dict(), _above(svc, project), svc.limits,
                              svc.hooks, svc.reserved_prefixes)


def save_project_policy(svc: Services, name: str, data: Doc, actor: str,
                        shape: ma.Schema | None = None) -> Policy:
    """Check the draft against the platform's policy, store it as the project's next
    version and audit it.  ``shape``: the API's schema, for data from a page."""
    problems = draft_problems(svc, data, name)
    if problems:
        raise PolicyInvalid(f"the policy of project {name} cannot be saved", problems)
    if shape is not None:
        data = shape.load(data)
    store = svc.policies.scoped(project_scope(name))
    policy = store.put(Policy.from_dict({**data, "author": actor, "created_at": time.time()}))
    svc.audit.record(actor, "project.policy.put", f"{name} v{policy.version}",
                     defaults=[d.name for d in policy.defaults],
                     protected=[p.name for p in policy.protected],
                     rules=[r.name for r in policy.rules])
    return policy


def draft_impact(svc: Services, data: Doc, project: str | None = None) -> Doc:
    """What saving ``data`` (the platform's draft, or ``project``'s) would do; nothing is
    saved.  A draft that could not be saved is refused with the same problems."""
    problems = draft_problems(svc, data, project)
    if problems:
        raise PolicyInvalid("the draft policy cannot be saved", problems)
    draft = Policy.from_dict({**data, "scope": project_scope(project) if project else None})
    docs = {d["id"]: d for d in _latest(svc, project)}

    chains: dict[Any, Chain] = {}  # one read per project, not per task

    def resolve_draft(snapshot: TaskSnapshot) -> Resolution:
        doc = docs[snapshot.id]
        key = doc.get("project")
        if key not in chains:  # the draft stands in for its scope's current policy
            chains[key] = svc.policies.chain(doc).with_policy(draft)
        return draft_resolution(doc, chains[key], svc.limits, svc.hooks)

    return impact_view(impact((snapshot(d) for d in docs.values()), resolve_draft))


def _latest(svc: Services, project: str | None) -> list[Doc]:
    found = (svc.tasks.find(t) for t in svc.tasks.latest_ids(project, FINAL_CONSIDERED))
    return [d for d in found if d is not None]


def snapshot(doc: Doc) -> TaskSnapshot:
    """A record's current revision as the impact sees it; an env the validation stage
    refused still counts (the draft rejects it too)."""
    env = [e for e in doc["env"] if isinstance(e.get("name"), str)
           and isinstance(e.get("value"), str)]
    resolved = doc.get("resolved")
    return TaskSnapshot(doc["id"], doc["owner"], tuple(envlist.parse(env)), facts_of(doc),
                        None if resolved is None
                        else tuple(Resolved.from_dict(v) for v in resolved),
                        rejected=doc["state"] == states.REJECTED)


def impact_view(found: dict[str, Any]) -> Doc:
    """``shared.policy.impact``'s summary in the API's shape: counts first, then the rejections
    and the value changes, each with how many tasks and owners it touches."""
    rejected = found["rejected"]
    changed = found["tasks"] - rejected["tasks"] - found["accepted"] - found["unchanged"]
    return {
        "considered": found["tasks"], "rejected": rejected["tasks"],
        "newly_rejected": rejected["newly_rejected"],
        "already_rejected": rejected["already_rejected"], "accepted": found["accepted"],
        "changed": changed, "unchanged": found["unchanged"],
        "rejections": rejected["problems"],
        "changes": [{"name": c.pop("variable"), **c} for c in found["changes"]],
    }
