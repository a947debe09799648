"""Request and response shapes, documented in the OpenAPI document.

The schemas check JSON shape and types only: that is the API's contract, and a
request that breaks it is answered 422 at once.  The env rules (name syntax,
sizes, duplicates, the policy) live in ``shared.envlist`` and ``shared.policy``
and run in the validation and policy workers and in preview, so exactly one
place decides whether an env list is acceptable.
"""

from __future__ import annotations

import marshmallow as ma
from marshmallow import fields, validate

from shared import states
from workers.launchers.sandbox import workdir_problem


class Strict(ma.Schema):
    class Meta:
        unknown = ma.RAISE


class StrictBool(fields.Boolean):
    """JSON true or false only: "yes" or 1 for a secret flag is a mistake worth reporting."""

    def _deserialize(self, value, attr, data, **kwargs):  # type: ignore[no-untyped-def]
        if not isinstance(value, bool):
            raise ma.ValidationError("Not a valid boolean (use true or false).")
        return value


def relative_workdir(value: str) -> None:
    """The launchers check again: a task's files stay inside its own home."""
    problem = workdir_problem(value)
    if problem:
        raise ma.ValidationError(f"workdir {problem}.")


class EnvEntry(Strict):
    name = fields.String(required=True, metadata={"example": "LEARNING_RATE"})
    value = fields.String(required=True, metadata={"example": "0.01"})
    secret = StrictBool(load_default=False,
                        metadata={"description": "Stored encrypted, shown masked, injected "
                                                 "through the backend's secret mechanism."})


class ResourcesSchema(Strict):
    cpu = fields.String(load_default=None, validate=validate.Length(max=32))
    memory = fields.String(load_default=None, validate=validate.Length(max=32))
    gpus = fields.Integer(strict=True, load_default=0, validate=validate.Range(min=0, max=64))


class TaskCreate(Strict):
    name = fields.String(required=True, validate=validate.Length(min=1, max=200))
    image = fields.String(load_default=None, validate=validate.Length(max=500))
    workdir = fields.String(
        load_default=None, validate=relative_workdir,
        metadata={"description": "A directory inside the task's home, relative to it "
                                 "(no absolute path, no '..'); created if missing.",
                  "example": "runs/exp1"})
    steps = fields.List(
        fields.List(fields.String(), validate=validate.Length(min=1, max=1000)),
        required=True, validate=validate.Length(min=1, max=100),
        metadata={"description": "Scripts run in order in one container; each an argv list, "
                                 "executed without a shell.",
                  "example": [["sh", "prepare.sh"], ["python3", "train.py"]]})
    env = fields.List(fields.Nested(EnvEntry), load_default=list)
    resources = fields.Nested(ResourcesSchema, load_default=None)


class EnvPatch(Strict):
    set = fields.List(fields.Nested(EnvEntry), load_default=list,
                      metadata={"description": "Variables to add or modify."})
    unset = fields.List(fields.String(), load_default=list,
                        metadata={"description": "Names of variables to delete."})


class Problem(ma.Schema):
    rule = fields.String(required=True)
    message = fields.String(required=True)
    variable = fields.String()
    field = fields.String()
    limit = fields.Integer()


class Error(ma.Schema):
    code = fields.String(required=True)
    message = fields.String(required=True)
    errors = fields.List(fields.Nested(Problem), required=True)


class ResolvedVar(ma.Schema):
    name = fields.String()
    value = fields.String(metadata={"description": "Masked when the variable is secret."})
    source = fields.String(validate=validate.OneOf(["platform", "protected", "user",
                                                    "default"]))
    overrode = fields.List(fields.String())
    secret = fields.Boolean()


class EnvOut(ma.Schema):
    name = fields.String()
    value = fields.String()
    secret = fields.Boolean()


class Event(ma.Schema):
    at = fields.Float()
    revision = fields.Integer()
    state = fields.String()


class TaskOut(ma.Schema):
    id = fields.String()
    url = fields.String()
    name = fields.String()
    owner = fields.String()
    image = fields.String(allow_none=True)
    workdir = fields.String(allow_none=True)
    steps = fields.List(fields.List(fields.String()))
    resources = fields.Dict(allow_none=True)
    status = fields.String(validate=validate.OneOf(states.ALL))
    revision = fields.Integer()
    env = fields.List(fields.Nested(EnvOut), metadata={"description": "As the user set it."})
    resolved_env = fields.List(fields.Nested(ResolvedVar), allow_none=True)
    policy_version = fields.Integer(allow_none=True)
    errors = fields.List(fields.Nested(Problem))
    warnings = fields.List(fields.Nested(Problem))
    exit_code = fields.Integer(allow_none=True)
    reason = fields.String(allow_none=True)
    created_at = fields.Float()
    updated_at = fields.Float()
    events = fields.List(fields.Nested(Event))
    note = fields.String(metadata={"description": "How env changes take effect."})


class ManifestOut(ma.Schema):
    revision = fields.Integer()
    resolved = fields.Boolean(metadata={"description": "False: resolved just now against the "
                                                       "current policy, not yet by the workers"})
    policy_version = fields.Integer()
    job = fields.Dict(metadata={"description": "A batch/v1 Job, as the API server gets it."})
    secret = fields.Dict(allow_none=True,
                         metadata={"description": "A v1 Secret; its values are redacted."})


class TaskAccepted(ma.Schema):
    id = fields.String()
    url = fields.String()
    revision = fields.Integer()
    status = fields.String()


class TaskSummary(ma.Schema):
    id = fields.String()
    url = fields.String()
    name = fields.String()
    owner = fields.String()
    project = fields.String(allow_none=True)
    status = fields.String(validate=validate.OneOf(states.ALL))
    revision = fields.Integer()
    created_at = fields.Float()
    updated_at = fields.Float()


class TaskPage(ma.Schema):
    items = fields.List(fields.Nested(TaskSummary),
                        metadata={"description": "Summaries; GET /tasks/{id} for a whole task."})
    next_cursor = fields.Integer(allow_none=True)


class TaskQuery(Strict):
    status = fields.String(load_default=None, validate=validate.OneOf(states.ALL))
    limit = fields.Integer(load_default=50, validate=validate.Range(min=1, max=500))
    cursor = fields.Integer(load_default=None, validate=validate.Range(min=0))


class ProtectedIn(Strict):
    name = fields.String(required=True, validate=validate.Length(min=1))
    value = fields.String(load_default=None, allow_none=True,
                          metadata={"description": "Injected into every task; without one "
                                                   "the name is only reserved."})
    reason = fields.String(required=True, validate=validate.Length(min=1, max=1000),
                           metadata={"description": "Shown to users."})
    secret = StrictBool(load_default=False)


class PolicyIn(Strict):
    # Both lists are required: a PUT with an empty body must not wipe the policy.
    defaults = fields.List(fields.Nested(EnvEntry), required=True)
    protected = fields.List(fields.Nested(ProtectedIn), required=True)
    on_conflict = fields.String(load_default="reject",
                                validate=validate.OneOf(["reject", "drop"]))


class PolicyOut(ma.Schema):
    version = fields.Integer()
    defaults = fields.List(fields.Nested(EnvOut))
    protected = fields.List(fields.Dict())
    on_conflict = fields.String()
    author = fields.String(allow_none=True)
    created_at = fields.Float(allow_none=True)


class PolicyVersions(ma.Schema):
    current = fields.Integer()
    versions = fields.List(fields.Integer())


class PreviewIn(Strict):
    name = fields.String(load_default="preview", validate=validate.Length(min=1, max=200))
    env = fields.List(fields.Nested(EnvEntry), required=True)
    policy_version = fields.Integer(strict=True, load_default=None, validate=validate.Range(min=0))


class PreviewOut(ma.Schema):
    ok = fields.Boolean()
    policy_version = fields.Integer()
    variables = fields.List(fields.Nested(ResolvedVar))
    warnings = fields.List(fields.Nested(Problem))
    errors = fields.List(fields.Nested(Problem))
