"""The platform policy: defaults injected into every task and protected variables.

Every PUT writes a new immutable version; tasks record the version they were
resolved with, so an old task can always be explained.
"""

from __future__ import annotations

import time
from typing import Any

from flask import current_app
from flask.views import MethodView
from flask_smorest import Blueprint

from api.auth import actor
from api.schemas import PolicyIn, PolicyOut, PolicyVersions
from shared.errors import PolicyInvalid
from shared.policy import Policy, check_policy
from shared.secrets import MASK

blp = Blueprint("policy", __name__, url_prefix="/api/v1/policy",
                description="Platform-wide defaults and protected variables.")


def svc() -> Any:
    return current_app.extensions["taskenv"]


def shown(policy: Policy) -> dict[str, Any]:
    out = policy.to_dict()
    for entry in [*out["defaults"], *out["protected"]]:
        if entry.get("secret") and "value" in entry:
            entry["value"] = MASK
    return out


@blp.route("")
class CurrentPolicy(MethodView):
    @blp.response(200, PolicyOut)
    def get(self) -> dict[str, Any]:
        """The policy new tasks are resolved with."""
        return shown(svc().policies.current())

    @blp.arguments(PolicyIn)
    @blp.response(200, PolicyOut)
    def put(self, data: dict[str, Any]) -> dict[str, Any]:
        """Replace the policy: makes a new version; tasks already resolved keep theirs."""
        problems = check_policy(data, svc().limits)
        if problems:
            raise PolicyInvalid("the policy cannot be saved", problems)
        policy = svc().policies.put(Policy.from_dict(
            {**data, "author": actor(), "created_at": time.time()}))
        svc().audit.record(actor(), "policy.put", f"v{policy.version}",
                           defaults=[d.name for d in policy.defaults],
                           protected=[p.name for p in policy.protected],
                           on_conflict=policy.on_conflict)
        return shown(policy)


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
        return shown(svc().policies.get(version))
