"""The web console: server-rendered pages where users create tasks and edit their env,
and admins edit the policy.

Pages authenticate by a session, made by pasting an API token once.  The cookie
holds only a random id; the session lives in Redis (:mod:`api.console.sessions`) and keeps
the token's SHA-256 digest and the identity's id, and every request looks the
identity up again, so logging out or revoking the token ends the session.
Every POST carries a per-session CSRF token.  Task actions go through
:mod:`api.actions`, the same code path as the JSON API; forms are read by
:mod:`api.console.forms`.  Pages show tasks only through ``records.public_view``,
so a secret value never reaches a template.
"""

from __future__ import annotations

import hmac
import re
import secrets
from datetime import UTC, datetime
from typing import Any

import marshmallow as ma
import redis
from flask import (
    abort,
    current_app,
    flash,
    g,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from markupsafe import Markup
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.http import HTTP_STATUS_CODES

from api import actions, auth, cursors
from api.console import forms, sessions
from api.console.blueprint import bp
from api.context import svc
from api.errors import status_for
from api.schemas import TaskQuery, escaped
from shared.access.projects import CHANGE
from shared.access.tokens import Identity, digest
from shared.errors import (
    EnvInvalid,
    Problem,
    SecretsUnavailable,
    StateConflict,
    TaskenvError,
    TooManyRequests,
)
from shared.secrets import MASK, blanked, masked
from shared.store.tasks import REVISION_FIELDS, Page, TaskStore
from shared.task import records, replica_logs, states
from shared.timestamps import rfc3339

# No inline script or style anywhere: only our own static files may run or style the page.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
NEW_FORM_ROWS = 4
BLANK_ROWS = 3
SAFE_NEXT = re.compile(r"/ui/[A-Za-z0-9_/-]*")  # login sends back to our own pages only
FORM_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]


def page(template: str, status: int = 200, **context: Any) -> tuple[str, int]:
    """A rendered page.  Text the API refuses now (a lone surrogate, which UTF-8 cannot
    encode) may be held by a record stored before it did: such text is shown escaped
    (``\\ud800``, as the JSON API shows it), and the page still renders."""
    return escaped(render_template(template, **context)), status


# --- session, CSRF and headers -----------------------------------------------------------

def csrf_token() -> str:
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return str(session["csrf"])


def session_identity() -> Identity | None:
    who = session.get("who")
    if not isinstance(who, dict):
        return None
    found = svc().tokens.by_digest(str(who.get("digest")))
    return found if found is not None and found.id == who.get("id") else None


def undecodable_fields() -> list[str]:
    """The fields of a URL-encoded form sent now that are not UTF-8 (``forms``)."""
    if request.mimetype != "application/x-www-form-urlencoded":
        return []
    return forms.undecodable_fields(request.get_data(cache=True))


@bp.before_request
def guard() -> Any:
    if request.endpoint == "pages.not_found":  # changes nothing: no session or CSRF needed
        g.identity = session_identity()  # the navigation, for whoever is signed in
        return None
    if request.method not in ("GET", "HEAD"):
        undecodable = undecodable_fields()  # before the form is read: its bytes are kept
        sent, expected = request.form.get("csrf", ""), str(session.get("csrf", ""))
        if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
            abort(400, "This form is out of date or was not sent from this site: "
                       "reload the page and try again.")
        if undecodable:
            raise EnvInvalid("The form cannot be read: it is not UTF-8 text.", [Problem(
                rule="form.encoding", field=name, message=f"{name}: its bytes are not "
                "UTF-8 text (a lone surrogate's, or another encoding's); send UTF-8")
                for name in undecodable])
    if request.endpoint == "pages.login":
        return None
    g.identity = session_identity()  # api.auth.scope() and actor() read it, as for the API
    if g.identity is None:  # logged out, idle, or its token revoked: start over
        sessions.renew(session)
        back = request.path if request.method == "GET" else None
        return redirect(url_for(".login", next=back))
    auth.check_task_id()
    return None


@bp.after_request
def page_headers(response: Any) -> Any:
    # api.auth.security_headers runs after this one and only fills in what is missing.
    response.headers["Content-Security-Policy"] = CSP
    return response


@bp.context_processor
def helpers() -> dict[str, Any]:
    return {"csrf_token": csrf_token, "MASK": MASK, "NOTE": records.NOTE,
            "row_errors": forms.row_errors, "max_replicas": lambda: svc().settings.max_replicas}


bp.add_app_template_filter(forms.messages, "messages")


@bp.app_template_filter("when")
def when(timestamp: float | None) -> Markup:
    """A ``<time>`` in UTC; static/live.js shows it in the reader's time zone, with the
    exact time on hover."""
    if timestamp is None:
        return Markup("")
    exact = rfc3339(timestamp)  # the API's own way of writing a moment
    moment = datetime.fromtimestamp(float(timestamp), UTC)
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(
        exact, moment.strftime("%Y-%m-%d %H:%M:%S UTC"))


def error_page(code: int, message: str, problems: list[Problem] | None = None) -> Any:
    title = HTTP_STATUS_CODES.get(code, "Error")
    return page("error.html", code, code=code, title=title, message=message,
                problems=problems or [])


@bp.errorhandler(TaskenvError)
def taskenv_error(error: TaskenvError) -> Any:
    return error_page(status_for(error), error.message, error.problems)


@bp.errorhandler(HTTPException)
def http_error(error: HTTPException) -> Any:
    return error_page(error.code or 500, error.description or "")


@bp.errorhandler(redis.RedisError)
def redis_error(error: redis.RedisError) -> Any:
    return error_page(503, "The task store is unavailable; try again shortly.")


@bp.route("/ui", methods=ANY_METHOD)
@bp.route("/ui/", methods=ANY_METHOD)
@bp.route("/ui/<path:unknown>", methods=ANY_METHOD)
def not_found(unknown: str = "") -> Any:
    """Any other ``/ui`` address is the console's too: an HTML 404 page (405 for a page
    asked with the wrong method), signed in or not, never the API's JSON.  ``/ui`` itself
    is the task list."""
    if not unknown and request.method == "GET":
        return redirect(url_for(".tasks"))
    takes = methods_elsewhere()
    if takes:
        raise MethodNotAllowed(takes, f"{request.path} takes {' or '.join(takes)}, "
                                      f"not {request.method}.")
    abort(404, f"There is no page at {request.path}: the link may be mistyped, or the "
               "page may have moved.")


def methods_elsewhere() -> list[str]:
    """The methods a real page at this path answers (the catch-all aside)."""
    adapter = current_app.url_map.bind_to_environ(request.environ)
    found = []
    for method in ("GET", "POST"):
        try:
            rule, _ = adapter.match(method=method, return_rule=True)
        except HTTPException:
            continue
        if rule.endpoint != request.endpoint:
            found.append(method)
    return found


# --- login -------------------------------------------------------------------------------

@bp.get("/")
def index() -> Any:
    return redirect(url_for(".tasks"))


@bp.route("/ui/login", methods=["GET", "POST"])
def login() -> Any:
    next_ = request.values.get("next", "")
    if request.method == "GET":
        return page("login.html", next=next_)
    token = request.form.get("token", "").strip()
    try:
        identity = auth.identify(token)  # one budget of failures with the API, per address
    except TooManyRequests:
        return page("login.html", 429, next=next_,
                    error="Too many failed logins: try again in a minute.")
    if identity is None:
        return page("login.html", 401, next=next_, error="This token is not known here.")
    sessions.renew(session)  # a new id (and CSRF token) at login: nothing carries over
    session["who"] = {"id": identity.id, "digest": digest(token), "owner": identity.owner}
    return redirect(next_ if SAFE_NEXT.fullmatch(next_) else url_for(".tasks"))


@bp.post("/ui/logout")
def logout() -> Any:
    sessions.renew(session)  # the stored session is deleted: a saved cookie names nothing
    return redirect(url_for(".login"))


# --- tasks -------------------------------------------------------------------------------

def listed_tasks() -> tuple[dict[str, Any], Page]:
    """The caller's tasks for the list query in the URL (the list page and its live poll);
    with ``project``, that project's tasks, for its maintainers and admins."""
    args = {k: v for k, v in request.args.items() if v}
    project = args.pop("project", None)
    try:
        query = TaskQuery().load(args)
    except ma.ValidationError as error:
        abort(400, f"Bad list parameters: {error.messages}")
    cursor = cursors.decode(query["cursor"])
    if project is None:
        return {**query, "project": None}, svc().tasks.page(auth.scope(), query["status"],
                                                            cursor, query["limit"])
    if query["status"] is not None:  # the project's index has no per-state split to page
        abort(400, "A project's tasks are listed in every state: filter by status among "
                   "your own tasks.")
    svc().projects.maintainable(project, auth.actor(), auth.identity().is_admin)
    return {**query, "project": project}, svc().tasks.page(cursor=cursor, limit=query["limit"],
                                                           project=project)


def listable_projects() -> list[str]:
    """The projects whose tasks the list page offers: those maintained; for admins, all."""
    return svc().projects.overseen_by(auth.actor(), auth.identity().is_admin)


@bp.get("/ui/tasks")
def tasks() -> Any:
    query, found = listed_tasks()
    items = [records.summary_view(d, url_for(".task", task_id=d["id"])) for d in found.items]
    return page("tasks.html", items=items, next_cursor=cursors.encode(found.next_cursor),
                query=query, states=states.ALL, projects=listable_projects())


@bp.route("/ui/tasks/new", methods=["GET", "POST"])
def task_new() -> Any:
    if request.method == "GET":
        return new_task_page({"name": "", "image": "", "steps": "", "files": []},
                             forms.blank(NEW_FORM_ROWS), secrets.token_urlsafe(16))
    try:
        uploaded = files_sent()
    except TaskenvError as error:
        return new_task_page(forms_typed(), forms.blank(NEW_FORM_ROWS),
                             secrets.token_urlsafe(16), status_for(error), error=error)
    data, errors, typed = forms.read_task(request.form, uploaded)
    form_id = request.form.get("form_id", "")
    form_id = form_id if FORM_ID.fullmatch(form_id) else secrets.token_urlsafe(16)
    more = "more" in request.form
    rows = forms.shown(typed["env"]) + forms.blank(BLANK_ROWS * (2 if more else 1))
    typed["env_file"] = request.form.get("env_file", "")
    typed["project"] = request.form.get("project", "")
    typed["replicas"] = request.form.get("replicas", "1")
    if more or data is None:
        return new_task_page(typed, rows, form_id, 200 if more else 422,
                             errors={} if more else errors)
    try:
        data["env_file"] = env_file_sent()
        data["project"] = request.form.get("project") or None  # the project switcher
        # The form's id is the idempotency key: a double-click makes one task, not two.
        doc = actions.create_task(svc(), data, auth.actor(), form_id)
    except TaskenvError as error:
        return new_task_page(typed, rows, secrets.token_urlsafe(16), status_for(error),
                             error=error)
    flash(f"Task {doc['name']} created: its env is being validated, resolved and launched. "
          "This page follows it as it goes.", "ok")
    return redirect(url_for(".task", task_id=doc["id"]))


def files_sent() -> list[dict[str, Any]]:
    """The task's files uploaded with the form, each named after its file: UTF-8 text."""
    found = []
    for upload in request.files.getlist("files_upload"):
        if not upload.filename:
            continue
        try:
            content = upload.read().decode("utf-8")
        except UnicodeDecodeError as error:
            raise EnvInvalid("an uploaded file cannot be read", [Problem(
                rule="file.encoding", field="files",
                message=f"file {upload.filename}: not UTF-8 text ({error.reason}); files "
                        "are text: binary data belongs in the image")]) from error
        found.append({"path": upload.filename, "content": content, "executable": False})
    return found


def forms_typed() -> dict[str, Any]:
    """The new-task form as typed, for a form sent back before it could be read."""
    form = request.form
    return {"name": form.get("name", ""), "image": form.get("image", ""),
            "steps": form.get("steps", ""), "files": forms.rows(form, "file", forms.FILE_TYPED)}


def env_file_sent() -> str | None:
    """The .env text a form sent: an uploaded file, then what was pasted; None if neither.

    Both together are read as one text, so a name in both is reported as set twice.
    """
    texts = [request.form.get("env_file", "").replace("\r\n", "\n")]
    upload = request.files.get("env_file_upload")
    if upload is not None and upload.filename:
        try:
            texts.insert(0, upload.read().decode("utf-8"))
        except UnicodeDecodeError as error:
            raise EnvInvalid("the uploaded .env file cannot be read", [Problem(
                rule="env_file.encoding", field="env_file",
                message=f"{upload.filename} is not UTF-8 text ({error.reason})")]) from error
    text = "\n".join(t for t in texts if t.strip())
    return text or None


NEW_FILE_ROWS = 2  # empty file editors a new-task form offers (more: "More rows")


def new_task_page(typed: dict[str, Any], rows: list[dict[str, Any]], form_id: str,
                  status: int = 200, errors: dict[str, Any] | None = None,
                  error: TaskenvError | None = None) -> Any:
    file_rows = [{**f, "executable": f.get("executable") in (True, "on")}
                 for f in typed.get("files") or []]
    file_rows += forms.blank_files(NEW_FILE_ROWS if not file_rows else 1)
    return page("task_new.html", status, form=typed, rows=rows, form_id=form_id,
                errors=errors or {}, error=error, file_rows=file_rows)


DOCTOR_RULES = ("doctor.", "rule.documented")


@bp.get("/ui/tasks/<task_id>")
def task(task_id: str) -> Any:
    """The task, with its env editor, rerun and cancel for those who may change it; its
    project's maintainers see it read-only."""
    doc, access = actions.task_to_read(svc(), task_id, auth.scope())
    return task_page(doc, read_only=access != CHANGE)


def shown_replica(view: dict[str, Any]) -> int | None:
    """The replica whose lines the log shows (``?replica=k``); None: every replica's."""
    replica = request.args.get("replica", type=int)
    replicas = int(view.get("replicas") or 1)
    return replica if replica is not None and replicas > 1 and 0 <= replica < replicas \
        else None


def task_page(doc: dict[str, Any], status: int = 200,
              env_rows: list[dict[str, Any]] | None = None,
              new_rows: list[dict[str, Any]] | None = None,
              errors: dict[str, Any] | None = None, error: TaskenvError | None = None,
              read_only: bool = False) -> Any:
    """The task; with ``?revision=n``, revision n throughout (its state, outcome, problems,
    env and log), the editor and the revisions list staying with the latest."""
    url = url_for(".task", task_id=doc["id"])
    view = records.public_view(doc, url)
    view["next_env"] = [masked(e) for e in doc.get("next_env") or []]
    if env_rows is None:  # a secret's field starts empty: its value is write-only
        env_rows = [{**blanked(e), "stored_secret": bool(e.get("secret"))} for e in view["env"]]
    asked = request.args.get("revision", type=int) or view["revision"]
    number = asked if 1 <= asked <= view["revision"] else view["revision"]
    record = doc if number == view["revision"] else revision_record(doc, number)
    shown = view if record is doc else records.public_view(record, url)
    log = svc().tasks.logs.since(doc["id"], number, 0, most=TaskStore.LOG_LIMIT)
    replica = shown_replica(view)
    text = log.text if replica is None else replica_logs.only(log.text, replica)
    return page("task.html", status, task=view, shown=shown,
                task_files=record.get("files") or [],  # the shown revision's files
                revisions=svc().tasks.revisions(doc["id"], view["revision"]),
                log=text, log_pieces=replica_logs.pieces(text), log_offset=log.offset,
                log_revision=number, log_replica=replica,
                env_rows=env_rows, new_rows=new_rows or forms.blank(BLANK_ROWS),
                errors=errors or {}, error=error, read_only=read_only,
                running=view["status"] in (states.LAUNCHING, states.RUNNING),
                final=view["status"] in states.FINAL, advice_by_name=advice_by_name(view))


def advice_by_name(view: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The doctor's warnings by the variable they name, shown beside each env row."""
    found: dict[str, list[dict[str, Any]]] = {}
    for p in view.get("warnings") or []:
        if str(p.get("rule", "")).startswith(DOCTOR_RULES) and p.get("variable"):
            found.setdefault(p["variable"], []).append(p)
    return found


def revision_record(doc: dict[str, Any], number: int) -> dict[str, Any]:
    """The task as it was at revision ``number``: the task's own fields (name, steps,
    owner) with only that revision's (state, env, resolved env, outcome, problems)."""
    task_fields = {k: v for k, v in doc.items() if k not in REVISION_FIELDS}
    return {**task_fields, **svc().tasks.revision(doc["id"], number)}


@bp.post("/ui/tasks/<task_id>/env")
def task_env(task_id: str) -> Any:
    doc = actions.task_to_change(svc(), task_id, auth.scope())
    patch, errors, typed_env, typed_new = forms.read_env_edit(request.form, doc["env"])
    more = "more" in request.form
    stored = {e["name"]: bool(e.get("secret")) for e in doc["env"]}
    env_rows = [{**row, "stored_secret": stored.get(row.get("name"), False)}
                for row in forms.shown(typed_env)]
    new_rows = forms.shown(typed_new) + forms.blank(BLANK_ROWS * (2 if more else 1))
    if more or patch is None:
        return task_page(doc, 200 if more else 422, env_rows, new_rows, {} if more else errors)
    try:
        patch["set"] = actions.with_env_file(patch["set"], env_file_sent())
    except EnvInvalid as error:
        return task_page(doc, status_for(error), env_rows, new_rows, error=error)
    if not patch["set"] and not patch["unset"]:
        flash("Nothing changed: edit a value, tick delete or fill in a new row.", "info")
        return redirect(url_for(".task", task_id=task_id))
    apply = request.form.get("apply", actions.RESTART)
    if apply not in (actions.RESTART, actions.NEXT_RUN):
        abort(400, "Choose restart or next run.")
    try:
        new = actions.revise_task(svc(), task_id, auth.actor(), auth.scope(), patch["set"],
                                  patch["unset"], "task.env.patch", apply=apply)
    except (EnvInvalid, StateConflict, SecretsUnavailable) as error:
        return task_page(doc, status_for(error), env_rows, new_rows, error=error)
    flash(applied_message(doc, new, apply), "ok")
    return redirect(url_for(".task", task_id=task_id))


def applied_message(old: dict[str, Any], new: dict[str, Any], apply: str) -> str:
    if apply == actions.NEXT_RUN:
        return ("The changed env is kept for the next run (Rerun); the current run carries "
                "on unchanged.")
    if old["state"] in states.LAUNCHED:
        return (f"Revision {old['revision']} is being stopped; revision {new['revision']}, "
                "with the changed env, is launched in a new container once it is gone.")
    return (f"Revision {new['revision']} created with the changed env; it is validated, "
            "resolved and launched in a new container.")


@bp.post("/ui/tasks/<task_id>/cancel")
def task_cancel(task_id: str) -> Any:
    try:
        doc, changed = actions.cancel_task(svc(), task_id, auth.actor(), auth.scope())
        flash(f"Revision {doc['revision']} cancelled." if changed
              else "The task was cancelled already.", "ok")
    except StateConflict as error:
        flash(error.message, "error")
    return redirect(url_for(".task", task_id=task_id))


@bp.post("/ui/tasks/<task_id>/rerun")
def task_rerun(task_id: str) -> Any:
    """Run the latest revision again, or the earlier one the page showed (``revision``)."""
    earlier = request.form.get("revision", type=int)
    try:
        new = actions.rerun_task(svc(), task_id, auth.actor(), auth.scope(), earlier)
        flash(f"Revision {new['revision']} launched with the env of revision "
              f"{new.get('rerun_of') or new['revision'] - 1}, resolved against the current "
              "policy.", "ok")
    except StateConflict as error:
        flash(error.message, "error")
    return redirect(url_for(".task", task_id=task_id))


@bp.get("/ui/tasks/<task_id>/diff")
def task_diff(task_id: str) -> Any:
    """What changed between two revisions of a task (its project's maintainers read it too);
    secrets only as changed or not."""
    doc = actions.task_to_read(svc(), task_id, auth.scope())[0]
    last = doc["revision"]
    old = request.args.get("from", type=int) or max(1, last - 1)
    new = request.args.get("to", type=int) or last
    of = request.args.get("of", "resolved")
    if not (1 <= old <= last and 1 <= new <= last and of in ("resolved", "env")):
        abort(400, f"Choose two revisions between 1 and {last}, and resolved or env.")
    view = records.public_view(doc, url_for(".task", task_id=task_id))
    try:
        diff, error = actions.env_diff(svc(), doc, old, new, of), None
    except StateConflict as conflict:
        diff, error = None, conflict
    return page("task_diff.html", 409 if error else 200, task=view, diff=diff, error=error,
                old=old, new=new, of=of)
