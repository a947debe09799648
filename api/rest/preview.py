"""Preview: what a task with this env would get, without creating anything.

It calls the same pure functions as the validation and policy workers
(``shared.task.resolution.preview``).
"""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from api import actions
from api.auth import actor, identity
from api.context import svc
from api.schemas import PreviewIn, PreviewOut

blp = Blueprint("preview", __name__, url_prefix="/api/v1/env",
                description="Try an env list against the policy.")


@blp.route("/preview")
class Preview(MethodView):
    @blp.arguments(PreviewIn)
    @blp.response(200, PreviewOut)
    def post(self, data: dict[str, Any]) -> dict[str, Any]:
        """Validate the env list and apply the policies; nothing is stored or launched.

        With ``project``, ``resources`` and ``image``, the answer is what such a task
        would get: each variable with its source, scope and the condition that matched,
        and ``not_applied`` naming the conditional entries that do not reach it.
        """
        return actions.preview(svc(), data, actor(), identity().is_admin)
