"""A task's revisions: the list, one revision whole, and what changed between two."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask.views import MethodView
from flask_smorest import Blueprint

from api import actions
from api.context import svc
from api.rest.tasks import readable
from api.schemas import DiffOut, DiffQuery, RevisionList, RevisionOut
from shared.secrets import masked
from shared.task import files as task_files

blp = Blueprint("revisions", __name__, url_prefix="/api/v1/tasks/<task_id>/revisions",
                description="Every revision of a task's env: as set, as resolved, its outcome.")

Doc = dict[str, Any]


def revision_view(task: Doc, rev: Doc) -> Doc:
    """A revision of ``task`` as the API shows it: secrets masked (the drift report is
    stored masked), the resolved env with replica 0's identity, as the container holds it."""
    return {**{name: rev.get(name) for name in RevisionOut().fields if name in rev},
            "revision": rev["revision"], "env": [masked(e) for e in rev.get("env") or []],
            "resolved_env": actions.container_env(svc(), task, rev),
            "files": task_files.summary(rev.get("files") or [])}


@blp.route("")
class Revisions(MethodView):
    @blp.response(200, RevisionList)
    def get(self, task_id: str) -> Doc:
        """Every revision, oldest first: state, policy version, who made it and how, when it
        started and ended, its exit code."""
        doc = readable(task_id)
        return {"items": svc().tasks.revisions(task_id, doc["revision"])}


@blp.route("/<int:number>")
class Revision(MethodView):
    @blp.response(200, RevisionOut)
    def get(self, task_id: str, number: int) -> Doc:
        """One revision: env as set, resolved env with each variable's source (secrets
        masked), errors, warnings, outcome and, for a rerun, its drift report."""
        task = readable(task_id)
        return revision_view(task, actions.revision_of(svc(), task, number))


@blp.route("/<int:old>/diff/<int:new>")
class RevisionDiff(MethodView):
    @blp.arguments(DiffQuery, location="query", unknown=ma.RAISE)
    @blp.response(200, DiffOut)
    def get(self, query: Doc, task_id: str, old: int, new: int) -> Doc:
        """Variables added, removed and changed from revision ``old`` to ``new``, each with
        its values and source; a secret shows only as changed or unchanged."""
        return actions.env_diff(svc(), readable(task_id), old, new, query["of"])
