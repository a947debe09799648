"""Training tasks: create, read, list, change the env, read the logs."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import marshmallow as ma
from flask import Response, request, url_for
from flask.views import MethodView
from flask_smorest import Blueprint

from api import actions, cursors
from api.auth import actor, scope
from api.context import svc
from api.schemas import (
    EnvPatch,
    EnvQuery,
    ManifestOut,
    RerunIn,
    TaskAccepted,
    TaskCancelled,
    TaskCreate,
    TaskEnvOut,
    TaskOut,
    TaskPage,
    TaskQuery,
)
from shared.env import envfile
from shared.errors import BadRequest, NotFound, StateConflict
from shared.secrets import masked
from shared.task import manifest, records, replica_logs
from shared.task.workload import Workload

blp = Blueprint("tasks", __name__, url_prefix="/api/v1/tasks",
                description="Training tasks and their env.")

IF_MATCH = {"name": "If-Match", "in": "header", "required": False,
            "schema": {"type": "string", "example": '"3-5f1c0a9e2b7d4c86"'},
            "description": "The revision the change was made against: the ETag of GET "
                           "/tasks/{id} (\"3-5f1c…\") or the bare revision (\"3\"). Only "
                           "the revision is compared: a state the workers moved on "
                           "(pending to running) does not make the change stale, a new "
                           "revision does (412 with the current revision)."}
IF_NONE_MATCH = {"name": "If-None-Match", "in": "header", "required": False,
                 "schema": {"type": "string", "example": '"3-5f1c0a9e2b7d4c86"'},
                 "description": "The ETag the caller has: 304 without a body when nothing "
                                "the task's answer holds has changed since."}
# What If-Match takes: a revision, alone or as the first part of the task's ETag.
REVISION_TAG = re.compile(r"([0-9]{1,12})(?:-[0-9a-f]{16})?")
BYTE_OFFSET = re.compile(r"[0-9]{1,15}")
WHOLE_NUMBER = re.compile(r"-?[0-9]{1,15}")
IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "required": False,
               "schema": {"type": "string", "maxLength": 200},
               "description": "Retries with the same key return the same task."}


def task_url(task_id: str) -> str:
    return url_for("tasks.Task", task_id=task_id)


def readable(task_id: str) -> dict[str, Any]:
    """A task the caller may read: its own (any, for an admin), or as a maintainer one of
    its project's.  Every read goes through here; a task it may not read is 404."""
    return actions.task_to_read(svc(), task_id, scope())[0]


def accepted(doc: dict[str, Any]) -> dict[str, Any]:
    return {"id": doc["id"], "url": task_url(doc["id"]), "revision": doc["revision"],
            "status": doc["state"], "how": doc.get("how") or "create"}


@blp.route("")
class Tasks(MethodView):
    @blp.arguments(TaskQuery, location="query", unknown=ma.RAISE)
    @blp.response(200, TaskPage)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """List your tasks, newest first; pass ``next_cursor`` back as ``cursor``."""
        page = svc().tasks.page(scope(), query["status"], cursors.decode(query["cursor"]),
                                query["limit"])
        return {"items": [records.summary_view(d, task_url(d["id"])) for d in page.items],
                "next_cursor": cursors.encode(page.next_cursor)}

    @blp.arguments(TaskCreate())
    @blp.response(202, TaskAccepted)
    @blp.doc(parameters=[IDEMPOTENCY])
    def post(self, data: dict[str, Any]) -> Any:
        """Create a training task; its env is validated, resolved and launched by workers."""
        key = request.headers.get("Idempotency-Key")
        if key is not None and not 0 < len(key) <= 200:
            raise BadRequest("Idempotency-Key must be 1 to 200 characters")
        doc = actions.create_task(svc(), data, actor(), key)
        return ({**accepted(doc), "advice": actions.advice(svc(), doc)}, 202,
                {"Location": task_url(doc["id"])})


@blp.route("/<task_id>")
class Task(MethodView):
    @blp.response(200, TaskOut, headers={"ETag": {
        "description": "<revision>-<digest of this answer>: a new one whenever anything "
                       "here changes; send it in If-None-Match (304 while unchanged) or "
                       "If-Match (its revision is compared).",
        "schema": {"type": "string"}}})
    @blp.alt_response(304, description="If-None-Match named the current ETag: nothing "
                      "changed, no body.")
    @blp.doc(parameters=[IF_NONE_MATCH])
    def get(self, task_id: str) -> Any:
        """A task's status, errors, warnings and resolved env with each variable's source.

        The ``ETag`` (``"<revision>-<digest>"``) changes whenever anything this answer
        holds changes (its state, exit code, resolved env...), so ``If-None-Match`` gets a
        ``304`` while nothing did.  ``If-Match`` on a change compares its revision only.
        """
        doc = readable(task_id)
        view = records.public_view(doc, task_url(task_id))
        view["resolved_env"] = actions.container_env(svc(), doc, doc)
        kept = doc.get("next_env")
        view["next_env"] = None if kept is None else [masked(e) for e in kept]
        view.update(cancelled_by=doc.get("cancelled_by"), cancelled_at=doc.get("cancelled_at"))
        tag = etag(doc["revision"], view)
        if request.if_none_match.contains_weak(tag):
            return Response(status=304, headers={"ETag": f'"{tag}"'})
        return view, 200, {"ETag": f'"{tag}"'}


def etag(revision: int, view: dict[str, Any]) -> str:
    """``<revision>-<digest of the answer>``: a new state, exit code or env is a new tag,
    and the revision stays readable in it for ``If-Match``."""
    text = json.dumps(view, sort_keys=True, default=str, separators=(",", ":"))
    return f"{revision}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def if_match() -> int | None:
    """The revision ``If-Match`` names: the task's ETag (``"3-5f1c…"``) or a bare revision
    (``3``, ``"3"``, ``W/"3"``); None without one."""
    raw = request.headers.get("If-Match")
    if raw is None or raw.strip() == "*":
        return None
    text = raw.strip().removeprefix("W/").strip('"')
    found = REVISION_TAG.fullmatch(text)  # ASCII digits only: "²".isdigit() is True
    if not found:
        raise BadRequest(f"If-Match must name a revision (a number or the task's ETag), "
                         f"not {raw[:40]!r}")
    return int(found.group(1))


@blp.route("/<task_id>/cancel")
class TaskCancel(MethodView):
    @blp.response(202, TaskCancelled)
    @blp.alt_response(200, schema=TaskCancelled, description="Cancelled already: nothing "
                      "changed.")
    @blp.doc(parameters=[IF_MATCH])
    def post(self, task_id: str) -> Any:
        """Cancel the task: a revision not yet launched never starts, a running one is
        stopped (the process group, the pod or the Job with its pods).  Cancelling a
        cancelled task again answers 200; a task that has ended, 409."""
        doc, changed = actions.cancel_task(svc(), task_id, actor(), scope(), if_match())
        body = {**accepted(doc), "cancelled_by": doc.get("cancelled_by"),
                "cancelled_at": doc.get("cancelled_at")}
        return body, 202 if changed else 200, {"Location": task_url(task_id)}


@blp.route("/<task_id>/env")
class TaskEnv(MethodView):
    @blp.arguments(EnvQuery, location="query", unknown=ma.RAISE)
    @blp.response(200, TaskEnvOut)
    @blp.alt_response(200, content_type="text/plain", description=(
        "format=dotenv: the env as set (resolved=true: the resolved env) as .env text that "
        "parses back to the same values; each secret is left out, named in a comment."))
    def get(self, query: dict[str, Any], task_id: str) -> Any:
        """The env as set and the resolved env (secrets masked), or either as a .env file."""
        doc = readable(task_id)
        if query["format"] == "dotenv":
            return _dotenv(doc, query["resolved"])
        return {"revision": doc["revision"], "env": [masked(e) for e in doc["env"]],
                "resolved_env": actions.container_env(svc(), doc, doc)}

    @blp.arguments(EnvPatch())
    @blp.response(202, TaskAccepted)
    @blp.doc(parameters=[IF_MATCH])
    def patch(self, data: dict[str, Any], task_id: str) -> Any:
        """Add, modify or delete variables: makes a new revision, launched anew.

        ``env_file`` adds the variables of a .env text to ``set``.  On a running task
        ``apply`` says when the change takes effect: ``restart`` stops the run and
        launches the new revision once it is gone; ``next-run`` keeps it (``next_env``)
        for the next rerun while the run carries on.
        """
        set_ = actions.with_env_file(data["set"], data.get("env_file"))
        doc = actions.revise_task(svc(), task_id, actor(), scope(), set_, data["unset"],
                                  "task.env.patch", apply=data["apply"], if_match=if_match(),
                                  files=data["files"])
        return ({**accepted(doc), "advice": actions.advice(svc(), doc)}, 202,
                {"Location": task_url(task_id)})


def _dotenv(doc: dict[str, Any], resolved: bool) -> Response:
    entries = doc.get("resolved") if resolved else doc["env"]
    if entries is None:
        raise StateConflict(f"revision {doc['revision']} is not resolved yet "
                            f"({doc['state']}): export the env as set instead")
    which = "resolved env" if resolved else "env as set"
    header = f"task {doc['id']} revision {doc['revision']}, {which}"
    return Response(envfile.export(entries, header), mimetype="text/plain")


@blp.route("/<task_id>/rerun")
class TaskRerun(MethodView):
    @blp.arguments(RerunIn(), required=False)
    @blp.response(202, TaskAccepted)
    @blp.doc(parameters=[IF_MATCH])
    def post(self, data: dict[str, Any] | None, task_id: str) -> Any:
        """Run a revision again (the current one by default) as a new revision.

        Without ``pin`` its env as set is resolved against the current policy; with
        ``pin: true`` its resolved values are kept where today's policy allows them.
        The new revision carries a drift report: what differs from that revision, and why.
        """
        data = data or {}
        doc = actions.rerun_task(svc(), task_id, actor(), scope(), data.get("revision"),
                                 bool(data.get("pin")), if_match=if_match())
        return accepted(doc), 202, {"Location": task_url(task_id)}


@blp.route("/<task_id>/manifest")
class TaskManifest(MethodView):
    @blp.response(200, ManifestOut)
    def get(self, task_id: str) -> dict[str, Any]:
        """The Kubernetes Job (and Secret) this revision was, or would be, submitted as.

        A revision not yet resolved is resolved here against the current policy, as
        preview does; secret values appear only as ``secretKeyRef`` references.
        """
        doc = readable(task_id)
        resolved = doc.get("resolved") is not None
        if not resolved:
            doc = actions.resolved_now(svc(), doc)
        manifests = manifest.build(Workload.from_doc(doc),
                                   manifest.ManifestSettings.from_settings(svc().settings))
        return {"revision": doc["revision"], "resolved": resolved,
                "policy_version": doc["policy_version"], **manifest.for_display(manifests)}


LOG_HEADERS = {
    "Log-Offset": {"description": "With offset: where the next read starts (bytes since "
                                  "the log began); send it back as offset.",
                   "schema": {"type": "integer"}},
    "Log-Skipped": {"description": "With offset: bytes dropped (the log keeps its newest "
                                   "part) before the caller could read them.",
                    "schema": {"type": "integer"}},
}


def whole_number(name: str) -> int | None:
    """A query parameter that must be a whole number when given: ``?replica=abc`` is a 400
    naming it, never the answer to a question not asked (the whole log)."""
    text = request.args.get(name)
    if text is None:
        return None
    if not WHOLE_NUMBER.fullmatch(text):
        raise BadRequest(f"{name} must be a whole number, not {text[:40]!r}")
    return int(text)


@blp.route("/<task_id>/logs")
class TaskLogs(MethodView):
    @blp.response(200, content_type="text/plain", headers=LOG_HEADERS,
                  description="The steps' output (stdout and stderr) as text.  The "
                              "platform's own lines (==> step n/m, taskenv: ...) start "
                              "with U+001F, which a step's output never holds (a U+001F "
                              "it printed is shown as U+241F).")
    @blp.doc(parameters=[
        {"name": "revision", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 1}},
        {"name": "offset", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 0},
         "description": "Only the output after this many bytes (at most 256 KiB of it; ask "
                        "again from Log-Offset): how a client follows a running task. "
                        "Offsets count from the log's first byte and survive trimming."},
        {"name": "replica", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 0},
         "description": "A task of several replicas: only replica k's lines, unprefixed "
                        "(offsets still count the whole log's bytes)."}])
    def get(self, task_id: str) -> Response:
        """The output of the task's steps, for the current revision or ``?revision=n``;
        with ``?offset=n`` only what came after byte n, to follow a task as it runs.

        A task of several replicas: every replica's lines, each prefixed with
        ``[replica k]``; ``?replica=k`` keeps replica k's, unprefixed."""
        doc = readable(task_id)
        revision = whole_number("revision") or doc["revision"]
        if not 1 <= revision <= doc["revision"]:
            raise NotFound(f"task {task_id} has no revision {revision}")
        replica = whole_number("replica")
        replicas = int(doc.get("replicas") or 1)
        if replica is not None and not 0 <= replica < replicas:
            raise NotFound(f"task {task_id} has no replica {replica}: its replicas are "
                           f"0..{replicas - 1}")

        def shown(text: str) -> str:
            return replica_logs.only(text, replica) if replica is not None and replicas > 1 \
                else text

        offset = request.args.get("offset")
        if offset is None:
            return Response(shown(svc().tasks.read_log(task_id, revision)),
                            mimetype="text/plain")
        if not BYTE_OFFSET.fullmatch(offset):
            raise BadRequest(f"offset must be a number of bytes, not {offset[:40]!r}")
        chunk = svc().tasks.logs.since(task_id, revision, int(offset))
        return Response(shown(chunk.text), mimetype="text/plain",
                        headers={"Log-Offset": str(chunk.offset),
                                 "Log-Skipped": str(chunk.skipped)})
