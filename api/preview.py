"""Preview: what a task with this env would get, without creating anything.

It calls the same pure functions as the validation and policy workers
(``shared.resolution.preview``).
"""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from api import actions, svc
from api.schemas import PreviewIn, PreviewOut

blp = Blueprint("preview", __name__, url_prefix="/api/v1/env",
                description="Try an env list against the policy.")


@blp.route("/preview")
class Preview(MethodView):
    @blp.arguments(PreviewIn)
    @blp.response(200, PreviewOut)
    def post(self, data: dict[str, Any]) -> dict[str, Any]:
        """Validate the env list and apply the policy; nothing is stored or launched."""
        return actions.preview(svc(), data)
