"""The doctor's catalog of documented variables: what applies to a task, and its edited layers.

``GET /catalog`` answers with the entries that apply to a task (of ``project``, if
given): the built-in catalog (unless an admin switched it off), the platform's entries,
the project's, and what the policies themselves document.  Admins edit the platform's
layer and the settings; a project's maintainers (and admins) edit the project's.
"""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask.views import MethodView
from flask_smorest import Blueprint
from marshmallow import fields, validate

from api import cursors
from api.auth import actor, identity, require_admin
from api.context import svc
from api.schemas import Strict, StrictBool
from shared.doctor.catalog import TYPES
from shared.doctor.store import PLATFORM
from shared.errors import Forbidden
from shared.policy.model import project_scope

blp = Blueprint("catalog", __name__, url_prefix="/api/v1/catalog",
                description="The documented variables the doctor advises with.")


class CatalogQuery(Strict):
    project = fields.String(load_default=None, validate=validate.Length(min=1, max=63),
                            metadata={"description": "As for a new task of this project."})


class CatalogPageQuery(CatalogQuery):
    limit = fields.Integer(load_default=100, validate=validate.Range(min=1, max=500),
                           metadata={"description": "Entries per page, by name."})
    cursor = fields.String(load_default=None, validate=validate.Length(min=1, max=500))


class EntryIn(Strict):
    description = fields.String(load_default="")
    type = fields.String(load_default="string", metadata={"description": ", ".join(TYPES)})
    values = fields.List(fields.String(), load_default=list, metadata={
        "description": "enum and list: the documented values; options: the option names."})
    case_insensitive = StrictBool(load_default=False)
    min = fields.Float(load_default=None, allow_nan=False)
    max = fields.Float(load_default=None, allow_nan=False)
    source = fields.String(load_default="", metadata={
        "description": "Where the facts come from (a URL)."})
    replaces = StrictBool(load_default=False, metadata={
        "description": "Stand in for the built-in entry of this name; without it, a "
                       "built-in entry keeps its facts and shows this description as a note."})


class EntryOut(ma.Schema):
    name = fields.String()
    description = fields.String()
    type = fields.String()
    values = fields.List(fields.String())
    case_insensitive = fields.Boolean()
    min = fields.Float()
    max = fields.Float()
    source = fields.String()
    layer = fields.String(metadata={"description": "builtin, platform, project or policy."})
    scope = fields.String(metadata={"description": "platform or project:<name>."})
    replaces = fields.Boolean(metadata={"description": "It stands in for the built-in entry."})
    notes = fields.List(fields.String(), metadata={
        "description": "What the policies that apply say of the variable (a default's "
                       "scope, a protected entry's reason, a rule's description), beside "
                       "its documented description, type and values."})


class CatalogOut(ma.Schema):
    builtin = fields.Boolean(metadata={"description": "Whether the built-in catalog applies."})
    project = fields.String(allow_none=True)
    entries = fields.List(fields.Nested(EntryOut))
    next_cursor = fields.String(allow_none=True, metadata={
        "description": "Pass it back as cursor for the next page; opaque."})


class SettingsIn(Strict):
    builtin = StrictBool(required=True)


class SettingsOut(ma.Schema):
    builtin = fields.Boolean()


def _layer(project: str | None) -> str:
    """The layer the caller edits: the platform's (admins) or the project's (maintainers)."""
    if project is None:
        if not identity().is_admin:
            raise Forbidden("only an admin may edit the platform's catalog; a project's "
                            "maintainers edit its catalog with ?project=")
        return PLATFORM
    svc().projects.maintainable(project, actor(), identity().is_admin)
    return project_scope(project)


@blp.route("")
class Catalog(MethodView):
    @blp.arguments(CatalogPageQuery, location="query", unknown=ma.RAISE)
    @blp.response(200, CatalogOut)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """The documented variables that apply to a task (of ``project``), by name, a page
        at a time, each with the layer it comes from and its source; pass
        ``next_cursor`` back as ``cursor`` for the next page."""
        project = query["project"]
        if project is not None:
            svc().projects.visible(project, actor(), identity().is_admin)
        catalog = svc().catalog.applying(svc().policies.chain({"project": project}))
        entries, last = catalog.page(cursors.decode_name(query["cursor"]), query["limit"])
        return {"builtin": svc().catalog.builtin_on(), "project": project,
                "entries": entries, "next_cursor": cursors.encode_name(last)}


@blp.route("/entries/<name>")
class CatalogEntry(MethodView):
    @blp.arguments(CatalogQuery, location="query", unknown=ma.RAISE)
    @blp.arguments(EntryIn)
    @blp.response(200, EntryOut)
    def put(self, query: dict[str, Any], data: dict[str, Any], name: str) -> dict[str, Any]:
        """Document a variable in the platform's catalog (admins) or a project's
        (``?project=``, its maintainers); replaces an entry of the same name."""
        scope = _layer(query["project"])
        body = {k: v for k, v in data.items() if v is not None}
        entry = svc().catalog.put(scope, {**body, "name": name})
        svc().audit.record(actor(), "catalog.put", scope, variable=name)
        return entry.to_dict()

    @blp.arguments(CatalogQuery, location="query", unknown=ma.RAISE)
    @blp.response(204)
    def delete(self, query: dict[str, Any], name: str) -> None:
        """Remove an entry from the platform's catalog or a project's."""
        scope = _layer(query["project"])
        svc().catalog.delete(scope, name)
        svc().audit.record(actor(), "catalog.delete", scope, variable=name)


@blp.route("/settings")
class CatalogSettings(MethodView):
    @blp.response(200, SettingsOut)
    def get(self) -> dict[str, Any]:
        """Whether the built-in catalog applies."""
        return {"builtin": svc().catalog.builtin_on()}

    @blp.arguments(SettingsIn)
    @blp.response(200, SettingsOut)
    def put(self, data: dict[str, Any]) -> dict[str, Any]:
        """Switch the built-in catalog on or off (admins): off, only the platform's and
        the projects' entries and the policies' own notes apply."""
        require_admin("switch the built-in catalog")
        svc().catalog.set_builtin(data["builtin"])
        svc().audit.record(actor(), "catalog.settings", "builtin", builtin=data["builtin"])
        return {"builtin": data["builtin"]}
