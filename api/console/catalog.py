"""The catalog page: the documented variables the doctor advises with, and their editors.

Everyone reads what applies to their tasks (``?project=`` for a project's).  Admins
edit the platform's entries and switch the built-in catalog; a project's maintainers
edit its entries.  The same store and checks as ``/api/v1/catalog``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from flask import flash, redirect, request, url_for

from api import auth
from api.console.blueprint import bp
from api.console.pages import page
from api.context import svc
from shared.doctor.catalog import TYPES, WEB_ADDRESS
from shared.doctor.store import PLATFORM
from shared.errors import Forbidden, TaskenvError
from shared.policy.model import project_scope

PAGE = 100  # entries a page shows, by name


def _editable(project: str | None) -> bool:
    who = auth.identity()
    if who.is_admin:
        return True
    return project is not None and project in svc().projects.maintained_by(who.owner)


@bp.get("/ui/catalog")
def catalog() -> Any:
    who = auth.identity()
    project = request.args.get("project") or None
    if project is not None:
        svc().projects.visible(project, who.owner, who.is_admin)
    choices = svc().projects.names() if who.is_admin else svc().projects.of(who.owner)
    found = svc().catalog.applying(svc().policies.chain({"project": project}))
    # A page at a time, as the API gives it: the console loads what it shows.
    after = request.args.get("after") or None
    entries, last = found.page(after, PAGE)
    return page("catalog.html", entries=[shown(e) for e in entries], project=project,
                choices=choices, next_after=last, first_page=after is None,
                builtin=svc().catalog.builtin_on(), editable=_editable(project),
                is_admin=who.is_admin, types=TYPES)


@bp.post("/ui/catalog")
def catalog_edit() -> Any:
    project = request.form.get("project") or None
    if not _editable(project):
        raise Forbidden("Only an admin edits the platform's catalog; a project's maintainers "
                        "edit its catalog.")
    scope = PLATFORM if project is None else project_scope(project)
    name = request.form.get("name", "").strip()
    if "builtin" in request.form and not auth.identity().is_admin:
        raise Forbidden("Only an admin may switch the built-in catalog.")
    try:
        if "builtin" in request.form:
            on = request.form["builtin"] == "on"
            svc().catalog.set_builtin(on)
            svc().audit.record(auth.actor(), "catalog.settings", "builtin", builtin=on)
            flash(f"The built-in catalog is {'on' if on else 'off'}.", "ok")
        elif "delete" in request.form:
            svc().catalog.delete(scope, name)
            svc().audit.record(auth.actor(), "catalog.delete", scope, variable=name)
            flash(f"{name} removed from the {scope} catalog.", "ok")
        else:
            svc().catalog.put(scope, _entry(name))
            svc().audit.record(auth.actor(), "catalog.put", scope, variable=name)
            flash(f"{name} documented in the {scope} catalog.", "ok")
    except TaskenvError as error:
        details = "; ".join(p.message for p in error.problems)
        flash(f"{error.message}: {details}" if details else error.message, "error")
    return redirect(url_for("pages.catalog", project=project))


def shown(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as the page lists it: its range in words and its source as a link (``href``,
    with the site's name for text) only when the source is an http or https address.

    An edit is refused any other source, but an entry stored before that rule (or written
    to Redis by other means) may hold a wiki page's name or a ``javascript:`` URL: shown as
    text, never put in an href."""
    source = entry.get("source") or ""
    href = source if WEB_ADDRESS.fullmatch(source) else None
    return {**entry, "href": href, "site": urlsplit(href).hostname if href else None,
            "range": value_range(entry.get("min"), entry.get("max"))}


def value_range(low: Any, high: Any) -> str:
    def number(value: Any) -> str:
        return f"{value:g}" if isinstance(value, float) else str(value)
    if low is not None and high is not None:
        return f"{number(low)} to {number(high)}"
    if low is not None:
        return f"at least {number(low)}"
    return f"at most {number(high)}" if high is not None else ""


def _entry(name: str) -> dict[str, Any]:
    form = request.form
    values = [v.strip() for v in form.get("values", "").split(",") if v.strip()]
    entry: dict[str, Any] = {"name": name, "description": form.get("description", "").strip(),
                             "type": form.get("type") or "string", "values": values,
                             "source": form.get("source", "").strip()}
    for key in ("min", "max"):
        raw = form.get(key, "").strip()
        if raw:
            try:
                entry[key] = float(raw)
            except ValueError:
                entry[key] = raw  # check_entry names it: "must be a number"
    return entry
