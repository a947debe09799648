"""Admin-only resources: API tokens and the audit log."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask.views import MethodView
from flask_smorest import Blueprint
from marshmallow import fields, validate

from api.auth import actor
from api.context import svc
from api.schemas import Strict, Timestamp
from shared.access.tokens import ROLES

blp = Blueprint("admin", __name__, url_prefix="/api/v1",
                description="Tokens and the audit log (admins only).")


class TokenIn(Strict):
    owner = fields.String(required=True, validate=validate.Regexp(r"^[A-Za-z0-9_.@-]{1,100}$"))
    role = fields.String(load_default="user", validate=validate.OneOf(ROLES))


class TokenOut(ma.Schema):
    id = fields.String()
    owner = fields.String()
    role = fields.String()
    created_at = Timestamp()
    created_by = fields.String(allow_none=True)


class TokenCreated(TokenOut):
    token = fields.String(metadata={"description": "Shown only in this response."})


class TokenList(ma.Schema):
    items = fields.List(fields.Nested(TokenOut))


class AuditEntry(ma.Schema):
    id = fields.String()
    at = Timestamp()
    actor = fields.String()
    action = fields.String()
    target = fields.String()
    detail = fields.Dict()


def stream_id(value: str) -> None:
    """A Redis stream id: two unsigned 64-bit numbers joined by a dash."""
    ms, _, seq = value.partition("-")
    if not (ms.isdigit() and seq.isdigit() and int(ms) < 2**64 and int(seq) < 2**64):
        raise ma.ValidationError("must be an audit entry id such as 1700000000000-0")


class AuditQuery(Strict):
    limit = fields.Integer(load_default=100,
                           validate=validate.Range(min=1, max=1000))
    before = fields.String(load_default=None, validate=stream_id)


class AuditPage(ma.Schema):
    items = fields.List(fields.Nested(AuditEntry))


@blp.route("/tokens")
class Tokens(MethodView):
    @blp.response(200, TokenList)
    def get(self) -> dict[str, Any]:
        """Every token's owner and role; the tokens themselves are never shown again."""
        return {"items": [vars(i) for i in svc().tokens.list()]}

    @blp.arguments(TokenIn)
    @blp.response(201, TokenCreated)
    def post(self, data: dict[str, Any]) -> dict[str, Any]:
        """Create a token for a user or an admin."""
        token, ident = svc().tokens.create(data["owner"], data["role"], actor())
        svc().audit.record(actor(), "token.create", ident.id, owner=ident.owner,
                           role=ident.role)
        return {**vars(ident), "token": token}


@blp.route("/tokens/<token_id>")
class Token(MethodView):
    @blp.response(204)
    def delete(self, token_id: str) -> None:
        """Revoke a token: it stops working at once."""
        svc().tokens.revoke(token_id)
        svc().audit.record(actor(), "token.revoke", token_id)


@blp.route("/audit")
class Audit(MethodView):
    @blp.arguments(AuditQuery, location="query", unknown=ma.RAISE)
    @blp.response(200, AuditPage)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """Who changed what, newest first; pass the last id as ``before`` for more."""
        return {"items": svc().audit.list(query["limit"], query["before"])}
