"""What the web pages' forms send, read through marshmallow schemas.

An HTML form sends flat fields (``env-0-name``, ``env-0-value``, ``env-0-secret``…);
:func:`rows` gathers them into a list of dicts.  The page schemas check what a
person typed (a step line that does not split, a value without a name); the
result is then loaded with the JSON API's own schemas (``TaskCreate``,
``EnvPatch``, ``PolicyIn``), so a page can never send what the API would refuse.

Each ``read_*`` function returns the data for the action, the errors keyed like
marshmallow's (``{"env": {2: {"name": [...]}}}``), and the rows to show again,
so a form with a mistake comes back with everything typed except secret values.
"""

from __future__ import annotations

import re
import shlex
from typing import Any
from urllib.parse import unquote_to_bytes

import marshmallow as ma
from marshmallow import fields, validate
from werkzeug.datastructures import MultiDict

from api.schemas import EnvPatch, TaskCreate
from shared.policy.model import Policy
from shared.secrets import blanked
from shared.types import ON_CONFLICT, REJECT

Row = dict[str, Any]
Errors = dict[str, Any]
ROW_FIELD = re.compile(r"(?P<prefix>[a-z]+)-(?P<index>\d{1,4})-(?P<field>[a-z]+)")
# Fields whose text makes a row worth reading; a row with none of them was left empty.
TYPED = ("name", "value", "reason")


def undecodable_fields(body: bytes) -> list[str]:
    """The fields of a URL-encoded form whose value (or name) is not UTF-8.

    A browser sends a form in UTF-8 (and a lone surrogate typed into it as U+FFFD), but
    anyone may send ``name=%ED%A0%80``, a surrogate's bytes, which Werkzeug keeps as
    the six characters ``%ED%A0%80``: read so, the form would store what was not sent.
    A multipart form's parts are read by Werkzeug with U+FFFD for such bytes."""
    found = []
    for pair in body.split(b"&"):
        name, _, value = pair.partition(b"=")
        try:
            field = unquote_to_bytes(name.replace(b"+", b" ")).decode()
        except UnicodeDecodeError:
            found.append(unquote_to_bytes(name).decode(errors="backslashreplace"))
            continue
        try:
            unquote_to_bytes(value.replace(b"+", b" ")).decode()
        except UnicodeDecodeError:
            found.append(field)
    return found


def rows(form: MultiDict[str, str], prefix: str, typed: tuple[str, ...] = TYPED) -> list[Row]:
    """The ``prefix`` rows a form sent, in order, leaving out rows left empty."""
    found: dict[int, Row] = {}
    for key, value in form.items():
        match = ROW_FIELD.fullmatch(key)
        if match and match["prefix"] == prefix:
            found.setdefault(int(match["index"]), {})[match["field"]] = value
    return [found[i] for i in sorted(found) if any(found[i].get(f) for f in typed)]


FILE_TYPED = ("path", "content")  # a file row with neither was left empty
EXECUTABLE, READABLE = 0o755, 0o644


def blank_files(count: int) -> list[Row]:
    return [{"path": "", "content": "", "executable": False} for _ in range(count)]


def blank(count: int, **extra: Any) -> list[Row]:
    return [{"name": "", "value": "", "secret": False, **extra} for _ in range(count)]


def shown(typed: list[Row]) -> list[Row]:
    """Rows as a form may show them again: a secret value is never echoed back."""
    return [{**blanked(row), "retype": bool(row.get("secret") and row.get("value"))}
            for row in typed]


class Form(ma.Schema):
    class Meta:
        unknown = ma.EXCLUDE  # the CSRF token, the submit buttons


class EnvRow(Form):
    name = fields.String(load_default="")
    value = fields.String(load_default="")
    secret = fields.Boolean(load_default=False)  # a checkbox sends "on"

    @ma.validates_schema
    def named(self, data: Row, **_: Any) -> None:
        if not data["name"]:
            raise ma.ValidationError("a variable needs a name", "name")

    @ma.post_load
    def unix_lines(self, data: Row, **_: Any) -> Row:
        # Browsers send a textarea's line breaks as CRLF; what a person typed is LF.
        data["value"] = data["value"].replace("\r\n", "\n")
        return data


class FileRow(Form):
    """One of the task's own files, typed into the editor beside the steps."""

    path = fields.String(load_default="")
    content = fields.String(load_default="")
    executable = fields.Boolean(load_default=False)  # a checkbox sends "on"

    @ma.validates_schema
    def named(self, data: Row, **_: Any) -> None:
        if not data["path"]:
            raise ma.ValidationError("a file needs a path", "path")

    @ma.post_load
    def as_api_file(self, data: Row, **_: Any) -> Row:
        return {"path": data["path"], "content": data["content"].replace("\r\n", "\n"),
                "mode": EXECUTABLE if data["executable"] else READABLE}


class EditRow(EnvRow):
    delete = fields.Boolean(load_default=False)


class Steps(fields.String):
    """One step per line, split into an argv with shlex — the argv is never given to a shell."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        text = super()._deserialize(value, attr, data, **kwargs)
        steps, problems = [], []
        for number, line in enumerate(text.splitlines(), 1):
            try:
                argv = shlex.split(line)
            except ValueError as error:  # an unclosed quote, a trailing backslash
                problems.append(f"line {number}: {error}")
                continue
            if argv:
                steps.append(argv)
        if problems:
            raise ma.ValidationError(problems)
        if not steps:
            raise ma.ValidationError("give at least one step")
        return steps


class TaskForm(Form):
    name = fields.String(required=True, validate=validate.Length(
        min=1, max=200, error="a name of 1 to 200 characters is required"))
    image = fields.String(load_default=None)
    steps = Steps(required=True)
    env = fields.List(fields.Nested(EnvRow), load_default=list)
    files = fields.List(fields.Nested(FileRow), load_default=list)
    replicas = fields.Integer(load_default=1, validate=validate.Range(
        min=1, error="replicas: a whole number of at least 1"),
        error_messages={"invalid": "replicas: a whole number of at least 1"})

    @ma.post_load
    def no_empty_image(self, data: Row, **_: Any) -> Row:
        if not data["image"]:
            del data["image"]  # the API's default: the launcher's image
        return data


class EnvEditForm(Form):
    env = fields.List(fields.Nested(EditRow), load_default=list)
    new = fields.List(fields.Nested(EnvRow), load_default=list)


class ProtectedRow(EnvRow):
    reason = fields.String(load_default="")

    @ma.post_load
    def one_line_reason(self, data: Row, **_: Any) -> Row:
        # The reason's box wraps long text; a line break typed into it is a space.
        data["reason"] = " ".join(data["reason"].split())
        return data


class PolicyForm(Form):
    defaults = fields.List(fields.Nested(EnvRow), load_default=list)
    protected = fields.List(fields.Nested(ProtectedRow), load_default=list)
    on_conflict = fields.String(load_default=REJECT, validate=validate.OneOf(ON_CONFLICT))


def load(schema: ma.Schema, data: Row) -> tuple[Row | None, Errors]:
    try:
        return schema.load(data), {}
    except ma.ValidationError as error:
        return None, errors_of(error)


def errors_of(error: ma.ValidationError) -> Errors:
    messages = error.messages
    return messages if isinstance(messages, dict) else {"_form": messages}


def read_task(form: MultiDict[str, str],
              uploaded: list[Row] | None = None) -> tuple[Row | None, Errors, Row]:
    """The new-task form as ``TaskCreate`` data; the typed form comes back to show again.

    ``uploaded``: files sent with the upload field, added after the editor's rows (and
    shown in the editor again if the form comes back)."""
    typed = {"name": form.get("name", ""), "image": form.get("image", ""),
             "steps": form.get("steps", ""), "env": rows(form, "env"),
             "files": rows(form, "file", FILE_TYPED) + (uploaded or []),
             "replicas": form.get("replicas") or "1"}
    data, errors = load(TaskForm(), typed)
    if data is not None:
        data, errors = load(TaskCreate(), data)
    return data, errors, typed


def read_env_edit(form: MultiDict[str, str],
                  current: list[Row]) -> tuple[Row | None, Errors, list[Row], list[Row]]:
    """The task page's env form as ``EnvPatch`` data: only rows that changed are sent."""
    typed_env, typed_new = rows(form, "env"), rows(form, "new")
    data, errors = load(EnvEditForm(), {"env": typed_env, "new": typed_new})
    if data is None:
        return None, errors, typed_env, typed_new
    by_name = {e["name"]: e for e in current}
    set_: list[Row] = []
    unset: list[str] = []
    for index, row in enumerate(data["env"]):
        old = by_name.get(row["name"])
        if row["delete"]:
            unset.append(row["name"])
        elif old is not None and old.get("secret") and not row["value"]:
            # Write-only: an empty field keeps the secret, so it cannot also turn it plain.
            if not row["secret"]:
                errors.setdefault("env", {})[index] = {"value": [
                    f"type a new value to make {row['name']} a plain variable"]}
        elif old is None or _changed(old, row):
            set_.append({"name": row["name"], "value": row["value"], "secret": row["secret"]})
    set_ += [{"name": r["name"], "value": r["value"], "secret": r["secret"]} for r in data["new"]]
    if errors:
        return None, errors, typed_env, typed_new
    patch, errors = load(EnvPatch(), {"set": set_, "unset": unset})
    return patch, errors, typed_env, typed_new


def _changed(old: Row, row: Row) -> bool:
    if old.get("secret"):
        return True  # a value typed into a secret's empty field is a new value
    # Compared as the browser sent it back: a textarea turns a stored CRLF into LF.
    return row["secret"] or row["value"] != str(old.get("value", "")).replace("\r\n", "\n")


def read_policy(form: MultiDict[str, str],
                current: Policy) -> tuple[Row | None, Errors, Row]:
    """The policy form as data for ``shared.policy.model.check_policy``, then ``PolicyIn``.

    A secret row left empty keeps the current policy's value of that name; a protected
    row without a value only reserves the name.
    """
    typed = {"defaults": kept(rows(form, "defaults")), "protected": kept(rows(form, "protected")),
             "on_conflict": form.get("on_conflict", REJECT)}
    data, errors = load(PolicyForm(), typed)
    if data is None:
        return None, errors, typed
    kept_defaults = {d.name: d.value for d in current.defaults if d.secret}
    kept_protected = {p.name: p.value for p in current.protected if p.secret}
    for index, row in enumerate(data["defaults"]):
        if row["secret"] and not row["value"]:
            if row["name"] in kept_defaults:
                row["value"] = kept_defaults[row["name"]]
            else:
                errors.setdefault("defaults", {})[index] = {"value": ["a secret needs a value"]}
    for row in data["protected"]:
        if row["secret"] and not row["value"]:
            row["value"] = kept_protected.get(row["name"])
        row["value"] = row["value"] or None
    return (None if errors else data), errors, typed


def kept(typed: list[Row]) -> list[Row]:
    """The rows not ticked for deletion: a deleted row is left out of the policy saved (and
    of the form shown again)."""
    return [row for row in typed if not row.get("delete")]


def policy_rows(policy: Policy) -> tuple[list[Row], list[Row]]:
    """The current policy as form rows; secret values stay out of the page."""
    rows = policy.to_dict()
    return ([blanked(d) for d in rows["defaults"]], [blanked(p) for p in rows["protected"]])


# --- errors as the templates show them --------------------------------------------------

def row_errors(errors: dict[str, Any], key: str, index: int) -> dict[str, Any]:
    """marshmallow's errors for one row of a list field (``{"env": {2: {...}}}``)."""
    found = errors.get(key)
    row = found.get(index) if isinstance(found, dict) else None
    return row if isinstance(row, dict) else {}


def messages(found: Any, path: str = "") -> list[str]:
    """marshmallow's nested messages as plain lines, each prefixed with where it belongs."""
    if isinstance(found, dict):
        out = []
        for key, sub in found.items():
            where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}".lstrip(".")
            out += messages(sub, where)
        return out
    if isinstance(found, list):
        return [m for sub in found for m in messages(sub, path)]
    return [f"{path}: {found}" if path and not path.endswith("_schema") else str(found)]
