"""Console pages for layered policies and projects.

One policy editor serves the platform's policy (admins) and each project's (its
maintainers and admins).  Rows carry an optional ``when`` (JSON, e.g.
``{"gpus": ">=1"}``) and the rules are edited as a JSON list, so a save from the
console keeps every part of a policy.  "Preview impact" shows what saving the draft
would do to existing tasks, with a button to confirm the save.  Admins manage
projects and their members on ``/ui/projects``.  The routes join the console's
blueprint (``api.console.blueprint.bp``) and its session and CSRF checks.
"""

from __future__ import annotations

import json
import re
from typing import Any

import marshmallow as ma
from flask import flash, g, redirect, request, url_for
from werkzeug.datastructures import MultiDict

from api import actions, auth, project_actions
from api.console import forms
from api.console.blueprint import bp
from api.console.pages import BLANK_ROWS, page
from api.context import svc
from api.errors import status_for
from api.schemas import PolicyIn
from shared.errors import PolicyInvalid, Problem, SecretsUnavailable, TaskenvError
from shared.policy.endpoints import FIELD as ALLOWANCES
from shared.policy.model import Policy, project_scope
from shared.policy.scope_checks import ProjectConflict
from shared.policy.store import PolicyStore

Row = dict[str, Any]
OWNER_SPLIT = re.compile(r"[\s,]+")


@bp.context_processor
def project_choices() -> dict[str, Any]:
    """The projects the signed-in owner may create tasks in (the task form's switcher)."""
    def mine() -> list[str]:
        who = g.get("identity")
        return svc().projects.of(who.owner) if who is not None else []
    return {"my_projects": mine}


# --- the policy editor ------------------------------------------------------------------

def editor(project: str | None) -> Any:
    """GET shows the policy; POST previews the draft's impact or saves it."""
    store = _store(project)
    current = store.current()
    if request.method == "GET":
        return policy_page(project, current, _rows_of(current),
                           conflicts=_conflicts(project, current))
    data, errors, shown = read_policy(request.form, current)
    more = "more" in request.form
    if more or data is None:
        return policy_page(project, current, shown, 200 if more else 422,
                           {} if more else errors, extra=2 if more else 1)
    try:
        if "impact" in request.form:
            found = project_actions.draft_impact(svc(), PolicyIn().load(data), project)
            return policy_page(project, current, shown, impact=found)
        saved, conflicts = _save(project, data)
    except PolicyInvalid as error:
        return policy_page(project, current, shown, status_for(error), problems=error.problems)
    except ma.ValidationError as error:
        return policy_page(project, current, shown, 422, forms.errors_of(error))
    except SecretsUnavailable as error:  # a secret row, but no TASKENV_SECRET_KEYS
        return policy_page(project, current, shown, status_for(error),
                           {"_schema": [error.message]})
    flash(f"Policy version {saved.version} saved: new tasks and new revisions are resolved "
          "with it; tasks already resolved keep their version.", "ok")
    if conflicts:
        flash(_conflicts_note(conflicts), "warning")
    return redirect(_url(project))


def _conflicts_note(conflicts: list[ProjectConflict], shown: int = 10) -> str:
    named = "; ".join(f"{c.project} ({', '.join(c.variables()) or 'its rules'})"
                      for c in conflicts[:shown])
    more = f" and {len(conflicts) - shown} more" if len(conflicts) > shown else ""
    return (f"{len(conflicts)} project {'policy' if len(conflicts) == 1 else 'policies'} "
            f"now conflict with it: {named}{more}. The policy is saved; each project's "
            "maintainers must change theirs (listed below).")


def _store(project: str | None) -> PolicyStore:
    if project is None:
        auth.require_admin("see and edit the platform policy")
        return svc().policies
    who = auth.identity()
    svc().projects.maintainable(project, who.owner, who.is_admin)
    return svc().policies.scoped(project_scope(project))


def _save(project: str | None, data: Row) -> tuple[Policy, list[ProjectConflict]]:
    # The rules first (they name the variable), then the API's shape (PolicyIn).  A
    # project's policy is refused when in conflict; only the platform's saves with some.
    if project is None:
        return actions.save_policy(svc(), data, auth.actor(), shape=PolicyIn())
    return project_actions.save_project_policy(svc(), project, data, auth.actor(),
                                               shape=PolicyIn()), []


def _conflicts(project: str | None, current: Policy) -> list[ProjectConflict]:
    """The platform page: every project whose policy the platform's refuses; a project's
    page: its own conflicts, if the platform's policy changed since it was saved."""
    if project is None:
        return project_actions.platform_conflicts(svc(), current)
    problems = project_actions.policy_conflicts(svc(), current)
    return [ProjectConflict(project, current.version, tuple(problems))] if problems else []


def _url(project: str | None) -> str:
    return (url_for("pages.policy") if project is None
            else url_for("pages.project_policy", name=project))


def _rows_of(policy: Policy) -> Row:
    defaults, protected = forms.policy_rows(policy)
    data = policy.to_dict()
    for rows, entries in ((defaults, data["defaults"]), (protected, data["protected"])):
        for row, entry in zip(rows, entries, strict=True):
            row["when"] = json.dumps(entry["when"]) if entry.get("when") else ""
    return {"defaults": defaults, "protected": protected, "on_conflict": policy.on_conflict,
            "rules": json.dumps(data["rules"], indent=1) if data["rules"] else "",
            "strict_env": policy.strict_env,
            "endpoint_allowances": json.dumps(data[ALLOWANCES], indent=1)
            if data.get(ALLOWANCES) else ""}


def read_policy(form: MultiDict[str, str], current: Policy) -> tuple[Row | None, Row, Row]:
    """The form as policy data: the rows (``api.console.forms``), each row's ``when`` and
    the rules and the platform's endpoint allowances, read as JSON; the form as typed comes
    back to be shown again."""
    data, errors, typed = forms.read_policy(form, current)
    strict = form.get("strict_env") == "on"  # a checkbox: absent when not ticked
    shown = {**typed, "defaults": forms.shown(typed["defaults"]),
             "protected": forms.shown(typed["protected"]), "rules": form.get("rules", ""),
             "strict_env": strict, ALLOWANCES: form.get(ALLOWANCES, "")}
    for where in ("defaults", "protected"):
        for index, row in enumerate(typed[where]):
            shown[where][index]["when"] = row.get("when", "")
            when, problem = _json(row.get("when", ""), "an object such as {\"gpus\": \">=1\"}")
            if problem:
                errors.setdefault(where, {}).setdefault(index, {})["when"] = [problem]
            elif data is not None and when is not None:
                data[where][index]["when"] = when
    rules, problem = _json(form.get("rules", ""), "a list of rules")
    if problem:
        errors["rules"] = [problem]
    allowances, problem = _json(form.get(ALLOWANCES, ""), "a list of {project, name, reason}")
    if problem:
        errors[ALLOWANCES] = [problem]
    if data is not None:
        data["rules"] = rules or []
        data["strict_env"] = strict
        data[ALLOWANCES] = allowances or []
    return (None if errors else data), errors, shown


def _json(text: str, what: str) -> tuple[Any, str | None]:
    if not text.strip():
        return None, None
    try:
        return json.loads(text), None
    except ValueError as error:
        return None, f"write {what} in JSON ({error})"


def policy_page(project: str | None, current: Policy, form: Row, status: int = 200,
                errors: dict[str, Any] | None = None, problems: list[Problem] | None = None,
                extra: int = 1, impact: Row | None = None,
                conflicts: list[ProjectConflict] | None = None) -> Any:
    # Typed rows first, so that error indexes (defaults[2]) point at the row shown third.
    blank = BLANK_ROWS * extra
    return page("policy.html", status, policy=current, project=project, action=_url(project),
                on_conflict=form["on_conflict"], rules=form.get("rules", ""),
                strict_env=bool(form.get("strict_env")),
                endpoint_allowances=form.get(ALLOWANCES, ""),
                defaults=form["defaults"] + forms.blank(blank, when=""),
                protected=form["protected"] + forms.blank(blank, reason="", when=""),
                errors=errors or {}, problems=problems or [], impact=impact,
                conflicts=conflicts or [],
                bad={p.variable for p in problems or [] if p.variable})


@bp.route("/ui/policy", methods=["GET", "POST"])
def policy() -> Any:
    """The platform policy's editor; projects' policies share it."""
    return editor(None)


@bp.route("/ui/projects/<name>/policy", methods=["GET", "POST"])
def project_policy(name: str) -> Any:
    return editor(name)


# --- projects ---------------------------------------------------------------------------

def _admin() -> None:
    auth.require_admin("manage projects")


def _owners(text: str) -> list[str]:
    return [o for o in OWNER_SPLIT.split(text) if o]


@bp.get("/ui/projects")
def projects() -> Any:
    """Admins: every project, a form to make one; maintainers: links to their policies."""
    who = auth.identity()
    names = svc().projects.visible_to(who.owner, who.is_admin)
    found = [project_actions.project_view(svc(), p) for p in svc().projects.many(names)]
    return page("projects.html", projects=found, is_admin=who.is_admin, owner=who.owner)


@bp.post("/ui/projects")
def project_create() -> Any:
    _admin()
    name = request.form.get("name", "").strip()
    try:
        svc().projects.create(name, _owners(request.form.get("members", "")),
                              _owners(request.form.get("maintainers", "")), auth.actor())
        svc().audit.record(auth.actor(), "project.create", name)
        flash(f"Project {name} created.", "ok")
    except TaskenvError as error:
        flash(error.message, "error")
    return redirect(url_for("pages.projects"))


@bp.post("/ui/projects/<name>")
def project_update(name: str) -> Any:
    _admin()
    if "delete" in request.form:
        project_actions.delete_project(svc(), name, auth.actor())
        flash(f"Project {name} deleted.", "ok")
    else:
        svc().projects.update(name, _owners(request.form.get("members", "")),
                              _owners(request.form.get("maintainers", "")))
        svc().audit.record(auth.actor(), "project.update", name)
        flash(f"Project {name} updated.", "ok")
    return redirect(url_for("pages.projects"))
