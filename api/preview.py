"""Preview: what a task with this env would get, without creating anything.

It calls the same pure functions as the validation and policy workers.
"""

from __future__ import annotations

from typing import Any

from flask import current_app
from flask.views import MethodView
from flask_smorest import Blueprint

from api.schemas import PreviewIn, PreviewOut
from shared import envlist
from shared.policy import platform_env, resolve
from shared.secrets import MASK

blp = Blueprint("preview", __name__, url_prefix="/api/v1/env",
                description="Try an env list against the policy.")

PLACEHOLDER_ID = "<assigned when the task is created>"


@blp.route("/preview")
class Preview(MethodView):
    @blp.arguments(PreviewIn)
    @blp.response(200, PreviewOut)
    def post(self, data: dict[str, Any]) -> dict[str, Any]:
        """Validate the env list and apply the policy; nothing is stored or launched."""
        svc = current_app.extensions["taskenv"]
        policies = svc.policies
        policy = (policies.current() if data["policy_version"] is None
                  else policies.get(data["policy_version"]))
        problems = envlist.validate(data["env"], svc.limits)
        if problems:
            return {"ok": False, "policy_version": policy.version, "variables": [],
                    "warnings": [], "errors": [p.to_dict() for p in problems]}
        result = resolve(envlist.parse(data["env"]), policy,
                         platform_env(PLACEHOLDER_ID, data["name"], 1, policy.version))
        variables = [v.to_dict() for v in result.variables]
        for v in variables:
            if v["secret"]:
                v["value"] = MASK
        return {"ok": result.ok, "policy_version": policy.version, "variables": variables,
                "warnings": [w.to_dict() for w in envlist.advise(data["env"]) + result.warnings],
                "errors": [e.to_dict() for e in result.errors]}
