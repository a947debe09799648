"""The platform policy: defaults injected into every task and protected variables.

Every PUT writes a new immutable version; tasks record the version they were
resolved with, so an old task can always be explained.
"""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from api import actions, project_actions
from api.auth import actor
from api.context import svc
from api.schemas import ImpactOut, PolicyIn, PolicyOut, PolicySaved, PolicyVersions
from shared.secrets import masked_policy

blp = Blueprint("policy", __name__, url_prefix="/api/v1/policy",
                description="Platform-wide defaults and protected variables.")


@blp.route("")
class CurrentPolicy(MethodView):
    @blp.response(200, PolicyOut)
    def get(self) -> dict[str, Any]:
        """The policy new tasks are resolved with."""
        return masked_policy(svc().policies.current().to_dict())

    @blp.arguments(PolicyIn)
    @blp.response(200, PolicySaved)
    def put(self, data: dict[str, Any]) -> dict[str, Any]:
        """Replace the policy: makes a new version; tasks already resolved keep theirs.

        Saved even if some project's policy now conflicts with it (a name the platform now
        protects, a default breaking a new rule); ``project_conflicts`` names each."""
        policy, conflicts = actions.save_policy(svc(), data, actor())
        return {**masked_policy(policy.to_dict()),
                "project_conflicts": [c.to_dict() for c in conflicts]}


@blp.route("/versions")
class Versions(MethodView):
    @blp.response(200, PolicyVersions)
    def get(self) -> dict[str, Any]:
        """Every version number, oldest first."""
        return {"current": svc().policies.current().version,
                "versions": svc().policies.versions()}


@blp.route("/versions/<int:version>")
class Version(MethodView):
    @blp.response(200, PolicyOut)
    def get(self, version: int) -> dict[str, Any]:
        """One version, as it was written."""
        return masked_policy(svc().policies.get(version).to_dict())


@blp.route("/impact")
class Impact(MethodView):
    @blp.arguments(PolicyIn)
    @blp.response(200, ImpactOut)
    def post(self, data: dict[str, Any]) -> dict[str, Any]:
        """What saving this draft platform policy would do: every task not final and the
        1,000 most recent final ones, re-resolved with it (each with its project's policy).
        Nothing is saved."""
        return project_actions.draft_impact(svc(), data)
