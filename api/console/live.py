"""The console's live parts: pages that follow a task, and the env preview beside a form.

**Short polling, not server-sent events.**  A page that shows work in flight asks a
small JSON endpoint now and then (``static/live.js``): every 2 s after a change,
backing off by half again each unchanged answer up to every 20 s, and not at all once
the task is final — a page loaded on a final task never asks.  Each answer carries an
``ETag`` made of what it reports (state, revision, exit code, log length); the script
sends it back in ``If-None-Match`` and an unchanged poll is a ``304`` with no body, after
one small read of the task.  Server-sent events would hold a connection and a worker
thread per open page for as long as it stays open, which sync WSGI workers (and the
proxies in front of them) pay for even when nothing happens; a poll costs one short
request every 20 s at rest (three a minute) and needs nothing but plain HTTP.

The log endpoint returns only the bytes after the ``offset`` the page already has;
offsets count from the log's first byte, so they survive the store trimming the log,
and ``skipped`` says how many bytes were dropped before the page could read them.
The preview routes run the preview endpoint's own function (``actions.preview``) on
what the form holds, with the session's CSRF token, so the panel beside the rows shows
what the task would get, problems and all, before anything is submitted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import marshmallow as ma
from flask import Response, abort, jsonify, request

from api import actions, auth
from api.console import forms
from api.console.blueprint import bp
from api.console.pages import env_file_sent, listed_tasks
from api.context import svc
from api.schemas import PreviewIn, PreviewOut
from shared.errors import Problem, TaskenvError
from shared.policy.model import PLATFORM_SCOPE, Policy, project_scope
from shared.policy.rules import Rule
from shared.task import records, replica_logs, states

Row = dict[str, Any]


# --- following a task --------------------------------------------------------------------

def _etag(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


def _unchanged(tag: str) -> Response | None:
    """A ``304`` when the page already has this answer (its ``If-None-Match``)."""
    if tag in request.if_none_match:
        response = Response(status=304)
        response.set_etag(tag)
        return response
    return None


def _answer(body: Any, tag: str) -> Response:
    response = jsonify(body)
    response.set_etag(tag)
    return response


@bp.get("/ui/tasks/<task_id>/live")
def task_live(task_id: str) -> Response:
    """A task's state, revision and exit code, and its log after ``offset`` bytes.

    ``log_revision`` is the revision whose log the page shows (the current one by
    default); ``replica``, the replica whose lines it shows (every replica's without).
    Final tasks answer ``final: true``; the page then stops asking.
    """
    doc = actions.task_to_read(svc(), task_id, auth.scope())[0]  # its maintainers' too
    revision = request.args.get("log_revision", type=int) or doc["revision"]
    if not 1 <= revision <= doc["revision"]:
        abort(400, f"log_revision is between 1 and {doc['revision']}")
    offset = max(0, request.args.get("offset", 0, type=int))
    tail = svc().tasks.logs
    state = {"status": doc["state"], "revision": doc["revision"],
             "exit_code": doc.get("exit_code"), "final": doc["state"] in states.FINAL}
    size = tail.size(task_id, revision)
    tag = _etag(state, revision, size)  # what the page has once it has read to the end
    unchanged = _unchanged(tag) if offset == size else None
    if unchanged is not None:
        return unchanged
    chunk = tail.since(task_id, revision, offset)
    replica = request.args.get("replica", type=int)
    text = chunk.text if replica is None or int(doc.get("replicas") or 1) == 1 \
        else replica_logs.only(chunk.text, replica)  # offsets stay the whole log's
    return _answer({**state, "log": {"revision": revision, "text": text,
                                     "offset": chunk.offset, "reset": chunk.reset,
                                     "skipped": chunk.skipped}}, tag)


@bp.get("/ui/tasks/live")
def tasks_live() -> Response:
    """The task list's page (same query as ``/ui/tasks``): each task's state and revision."""
    found = listed_tasks()[1]
    items = [{"id": d["id"], "status": d["state"], "revision": d["revision"],
              "final": d["state"] in states.FINAL} for d in found.items]
    tag = _etag(items)
    return _unchanged(tag) or _answer({"items": items}, tag)


# --- the env preview beside a form -------------------------------------------------------

def _typed_env(prefix: str) -> list[Row]:
    """The named rows of the form, as the preview takes them (unnamed rows wait)."""
    return [{"name": row["name"], "value": row.get("value", "").replace("\r\n", "\n"),
             "secret": bool(row.get("secret"))}
            for row in forms.rows(request.form, prefix) if row.get("name")]


def _preview(env: list[Row], project: str | None = None, image: str | None = None,
             files: list[Row] | None = None, replicas: str | None = None) -> Response:
    """``actions.preview`` on this env (and the task's files, which the doctor reads); a
    shape the API would refuse comes back as problems naming the variable, like the
    policy's own."""
    try:
        env = actions.with_env_file(env, env_file_sent())
        count = int(replicas) if replicas and replicas.strip().isdigit() else 1
        data = PreviewIn().load({"name": request.form.get("name") or "preview", "env": env,
                                 "project": project or None, "image": image or None,
                                 "files": files or [], "replicas": max(1, count)})
        shown = actions.preview(svc(), data, auth.actor(), auth.identity().is_admin)
    except TaskenvError as error:  # a bad .env line, a project one may not use
        problems = error.problems or [Problem(rule=error.code, message=error.message)]
        shown = {"ok": False, "variables": [], "warnings": [], "errors": problems}
    except ma.ValidationError as error:
        shown = {"ok": False, "variables": [], "warnings": [],
                 "errors": _shape_problems(error, env)}
    return jsonify(PreviewOut().dump(shown))


def _shape_problems(error: ma.ValidationError, env: list[Row]) -> list[Problem]:
    messages = forms.errors_of(error)
    found: list[Problem] = []
    for index, row_messages in (messages.pop("env", None) or {}).items():
        name = env[index]["name"] if isinstance(index, int) and index < len(env) else None
        found += [Problem(rule="request.env", variable=name, message=line)
                  for line in forms.messages(row_messages)]
    return found + [Problem(rule="request", message=line) for line in forms.messages(messages)]


@bp.post("/ui/preview")
def preview_new() -> Response:
    """The new-task form's env as the task would get it, its typed files read by the doctor
    (uploads are read when the form is submitted)."""
    return _preview(_typed_env("env"), request.form.get("project"), request.form.get("image"),
                    _typed_files(), request.form.get("replicas"))


def _typed_files() -> list[Row]:
    """The file editor's rows that name a path, as the preview takes them."""
    return [{"path": row["path"], "content": row.get("content", "").replace("\r\n", "\n")}
            for row in forms.rows(request.form, "file", forms.FILE_TYPED) if row.get("path")]


@bp.post("/ui/tasks/<task_id>/preview")
def preview_edit(task_id: str) -> Response:
    """The env editor's change applied to the task's env, as its next revision would get it.

    A secret left empty keeps its stored value, as saving would.  Only those who may change
    the task have the editor: its project's maintainers, who read it, are refused (403).
    """
    doc = actions.task_to_change(svc(), task_id, auth.scope())
    patch, errors, _, _ = forms.read_env_edit(request.form, doc["env"])
    if patch is None:
        problems = [Problem(rule="form", message=line) for line in forms.messages(errors)]
        return jsonify(PreviewOut().dump({"ok": False, "variables": [], "warnings": [],
                                          "errors": problems}))
    env, problems = records.patch_env(doc.get("next_env") or doc["env"], patch["set"],
                                      patch["unset"])
    if problems:
        return jsonify(PreviewOut().dump({"ok": False, "variables": [], "warnings": [],
                                          "errors": problems}))
    return _preview(env, doc.get("project"), doc.get("image"), doc.get("files"))


# --- suggestions for the name fields ----------------------------------------------------

def suggestions(policies: list[Policy], projects: Sequence[str | None] = (None,)) -> list[Row]:
    """The variables the policies describe, for a ``<datalist>``: each name once, with what
    the policy says of it (protected and why, a default, the rule's description and its
    allowed values).  Glob rules (``NCCL_*``) name no variable and are left out, and so is
    an entry only for tasks of projects other than ``projects`` (the user's, and none):
    no tenant learns what another project's tasks get."""
    def ours(entries: Sequence[Any]) -> list[Any]:
        return [e for e in entries if e.when is None
                or not all(e.when.names_another_project(p) for p in projects)]

    notes: dict[str, list[str]] = {}
    for policy in policies:
        for protected in ours(policy.protected):
            notes.setdefault(protected.name, []).append(f"protected: {protected.reason}")
        for default in ours(policy.defaults):
            shown = "a secret" if default.secret else default.value
            notes.setdefault(default.name, []).append(f"default {shown}"[:120])
        for rule in ours(policy.rules):
            if not any(c in rule.name for c in "*?["):
                notes.setdefault(rule.name, []).extend(_rule_notes(rule))
    return [{"name": name, "label": "; ".join(found)} for name, found in sorted(notes.items())]


def _rule_notes(rule: Rule) -> list[str]:
    found = [rule.description] if rule.description else []
    if rule.allowed:
        found.append("one of " + ", ".join(rule.allowed))
    if rule.required:
        found.append("required")
    return found


@bp.context_processor
def variable_suggestions() -> dict[str, Any]:
    """``env_suggestions()``: the platform's policy and those of the user's projects."""
    def env_suggestions() -> list[Row]:
        mine = svc().projects.of(auth.actor())
        scopes = [project_scope(p) for p in mine]
        found = svc().policies.currents([PLATFORM_SCOPE, *scopes])  # one read
        return suggestions(list(found.values()), [None, *mine])
    return {"env_suggestions": env_suggestions}


@bp.context_processor
def live_helpers() -> dict[str, Any]:
    return {"final_states": sorted(states.FINAL)}

