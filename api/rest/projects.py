"""Projects and their policies: the layer between the platform's policy and a task.

Platform admins create projects and name their members and maintainers.  A project's
maintainers (and admins) edit its policy, which may add defaults, protected entries
and rules but never weaken the platform's; every save is a new immutable version.
"""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from api import project_actions
from api.auth import actor, identity, require_admin
from api.context import svc
from api.schemas import (
    ImpactOut,
    PolicyIn,
    PolicyOut,
    PolicyVersions,
    ProjectIn,
    ProjectList,
    ProjectOut,
    ProjectPatch,
    ProjectPolicyOut,
)
from shared.policy.model import project_scope
from shared.policy.store import PolicyStore
from shared.secrets import masked_policy

blp = Blueprint("projects", __name__, url_prefix="/api/v1/projects",
                description="Projects, their members and their layered policies.")


def admin_only() -> None:
    require_admin("manage projects")


def maintained(name: str) -> PolicyStore:
    """The project's policy store, if the caller maintains the project or is an admin."""
    svc().projects.maintainable(name, actor(), identity().is_admin)
    return svc().policies.scoped(project_scope(name))


@blp.route("")
class Projects(MethodView):
    @blp.response(200, ProjectList)
    def get(self) -> dict[str, Any]:
        """Every project for an admin; the caller's own projects for anyone else."""
        names = svc().projects.visible_to(actor(), identity().is_admin)
        return {"items": [project_actions.project_view(svc(), p)
                          for p in svc().projects.many(names)]}

    @blp.arguments(ProjectIn)
    @blp.response(201, ProjectOut)
    def post(self, data: dict[str, Any]) -> dict[str, Any]:
        """Create a project (admins)."""
        admin_only()
        project = svc().projects.create(data["name"], data["members"], data["maintainers"],
                                        actor())
        svc().audit.record(actor(), "project.create", project.name,
                           members=list(project.members), maintainers=list(project.maintainers))
        return project_actions.project_view(svc(), project)


@blp.route("/<name>")
class Project(MethodView):
    @blp.response(200, ProjectOut)
    def get(self, name: str) -> dict[str, Any]:
        """One project (admins)."""
        admin_only()
        return project_actions.project_view(svc(), svc().projects.get(name))

    @blp.arguments(ProjectPatch)
    @blp.response(200, ProjectOut)
    def patch(self, data: dict[str, Any], name: str) -> dict[str, Any]:
        """Replace the members or maintainers lists given (admins)."""
        admin_only()
        project = svc().projects.update(name, data["members"], data["maintainers"])
        svc().audit.record(actor(), "project.update", name, members=list(project.members),
                           maintainers=list(project.maintainers))
        return project_actions.project_view(svc(), project)

    @blp.response(204)
    def delete(self, name: str) -> None:
        """Delete a project (admins); its tasks keep their records and policy versions."""
        admin_only()
        project_actions.delete_project(svc(), name, actor())


@blp.route("/<name>/policy")
class ProjectPolicy(MethodView):
    @blp.response(200, ProjectPolicyOut)
    def get(self, name: str) -> dict[str, Any]:
        """The project policy new tasks of the project are resolved with, and what in it
        the platform's current policy refuses (``conflicts``: what to fix)."""
        current = maintained(name).current()
        conflicts = project_actions.policy_conflicts(svc(), current)
        return {**masked_policy(current.to_dict()), "conflicts": [p.to_dict() for p in conflicts]}

    @blp.arguments(PolicyIn)
    @blp.response(200, PolicyOut)
    def put(self, data: dict[str, Any], name: str) -> dict[str, Any]:
        """Replace the project policy: refused, naming each variable and the platform entry,
        if it would set or unprotect what the platform protects or break a platform rule."""
        maintained(name)
        saved = project_actions.save_project_policy(svc(), name, data, actor())
        return masked_policy(saved.to_dict())


@blp.route("/<name>/policy/versions")
class ProjectPolicyVersions(MethodView):
    @blp.response(200, PolicyVersions)
    def get(self, name: str) -> dict[str, Any]:
        """Every version number of the project policy, oldest first."""
        store = maintained(name)
        return {"current": store.current().version, "versions": store.versions()}


@blp.route("/<name>/policy/versions/<int:version>")
class ProjectPolicyVersion(MethodView):
    @blp.response(200, PolicyOut)
    def get(self, name: str, version: int) -> dict[str, Any]:
        """One version of the project policy, as it was written."""
        return masked_policy(maintained(name).get(version).to_dict())


@blp.route("/<name>/policy/impact")
class ProjectPolicyImpact(MethodView):
    @blp.arguments(PolicyIn)
    @blp.response(200, ImpactOut)
    def post(self, data: dict[str, Any], name: str) -> dict[str, Any]:
        """What saving this draft project policy would do to the project's tasks: the
        latest revision of each task not final and the 1,000 most recent final ones.
        Nothing is saved."""
        maintained(name)
        return project_actions.draft_impact(svc(), data, name)
