"""Training tasks: create, read, list, change the env, read the logs."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import Response, request, url_for
from flask.views import MethodView
from flask_smorest import Blueprint

from api import actions, svc
from api.auth import actor, scope
from api.schemas import (
    EnvPatch,
    ManifestOut,
    TaskAccepted,
    TaskCreate,
    TaskOut,
    TaskPage,
    TaskQuery,
)
from shared import manifest, records
from shared.errors import BadRequest
from shared.workload import Workload

blp = Blueprint("tasks", __name__, url_prefix="/api/v1/tasks",
                description="Training tasks and their env.")

IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "required": False,
               "schema": {"type": "string", "maxLength": 200},
               "description": "Retries with the same key return the same task."}


def task_url(task_id: str) -> str:
    return url_for("tasks.Task", task_id=task_id)


def accepted(doc: dict[str, Any]) -> dict[str, Any]:
    return {"id": doc["id"], "url": task_url(doc["id"]), "revision": doc["revision"],
            "status": doc["state"]}


@blp.route("")
class Tasks(MethodView):
    @blp.arguments(TaskQuery, location="query", unknown=ma.RAISE)
    @blp.response(200, TaskPage)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """List your tasks, newest first; pass ``next_cursor`` back as ``cursor``."""
        page = svc().tasks.list(scope(), query["status"], query["cursor"], query["limit"])
        return {"items": [records.summary_view(d, task_url(d["id"])) for d in page.items],
                "next_cursor": page.next_cursor}

    @blp.arguments(TaskCreate)
    @blp.response(202, TaskAccepted)
    @blp.doc(parameters=[IDEMPOTENCY])
    def post(self, data: dict[str, Any]) -> Any:
        """Create a training task; its env is validated, resolved and launched by workers."""
        key = request.headers.get("Idempotency-Key")
        if key is not None and not 0 < len(key) <= 200:
            raise BadRequest("Idempotency-Key must be 1 to 200 characters")
        doc = actions.create_task(svc(), data, actor(), key)
        return accepted(doc), 202, {"Location": task_url(doc["id"])}


@blp.route("/<task_id>")
class Task(MethodView):
    @blp.response(200, TaskOut)
    def get(self, task_id: str) -> dict[str, Any]:
        """A task's status, errors, warnings and resolved env with each variable's source."""
        return records.public_view(svc().tasks.get(task_id, scope()), task_url(task_id))


@blp.route("/<task_id>/env")
class TaskEnv(MethodView):
    @blp.arguments(EnvPatch)
    @blp.response(202, TaskAccepted)
    def patch(self, data: dict[str, Any], task_id: str) -> Any:
        """Add, modify or delete variables: makes a new revision, launched anew."""
        return _revise(task_id, data["set"], data["unset"], "task.env.patch")


@blp.route("/<task_id>/rerun")
class TaskRerun(MethodView):
    @blp.response(202, TaskAccepted)
    def post(self, task_id: str) -> Any:
        """Resolve the same env against the current policy and launch it again."""
        return _revise(task_id, [], [], "task.rerun")


def _revise(task_id: str, set_: list[dict[str, Any]], unset: list[str], action: str) -> Any:
    doc = actions.revise_task(svc(), task_id, actor(), scope(), set_, unset, action)
    return accepted(doc), 202, {"Location": task_url(task_id)}


@blp.route("/<task_id>/manifest")
class TaskManifest(MethodView):
    @blp.response(200, ManifestOut)
    def get(self, task_id: str) -> dict[str, Any]:
        """The Kubernetes Job (and Secret) this revision was, or would be, submitted as.

        A revision not yet resolved is resolved here against the current policy, as
        preview does; secret values appear only as ``secretKeyRef`` references.
        """
        doc = svc().tasks.get(task_id, scope())
        resolved = doc.get("resolved") is not None
        if not resolved:
            doc = actions.resolved_now(svc(), doc)
        manifests = manifest.build(Workload.from_doc(doc),
                                   manifest.ManifestSettings.from_settings(svc().settings))
        return {"revision": doc["revision"], "resolved": resolved,
                "policy_version": doc["policy_version"], **manifest.for_display(manifests)}


@blp.route("/<task_id>/logs")
class TaskLogs(MethodView):
    @blp.response(200, content_type="text/plain",
                  description="The steps' output (stdout and stderr) as text.")
    @blp.doc(parameters=[{"name": "revision", "in": "query", "required": False,
                          "schema": {"type": "integer", "minimum": 1}}])
    def get(self, task_id: str) -> Response:
        """The output of the task's steps, for the current revision or ``?revision=n``."""
        doc = svc().tasks.get(task_id, scope())
        revision = request.args.get("revision", type=int) or doc["revision"]
        text = svc().tasks.read_log(task_id, revision)
        return Response(text, mimetype="text/plain")
