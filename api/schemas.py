"""Request and response shapes, documented in the OpenAPI document.

The schemas check JSON shape and types only: that is the API's contract, and a
request that breaks it is answered 422 at once.  The env rules (name syntax,
sizes, duplicates, the policy) live in ``shared.env.envlist`` and ``shared.policy.model``
and run in the validation and policy workers and in preview, so exactly one
place decides whether an env list is acceptable.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import marshmallow as ma
from marshmallow import fields, validate

from shared.task import states
from shared.task.paths import workdir_problem
from shared.timestamps import rfc3339
from shared.types import APPLY_MODES, ON_CONFLICT, REJECT, RESTART


class Strict(ma.Schema):
    """Every request's schema: no unknown field, and no text that cannot be encoded.

    JSON's ``"\\ud800"`` decodes to a lone surrogate, which no process, file name or
    page can hold (UTF-8 cannot encode it): every string of a request (values, list items,
    dict keys, in every field, ``Raw`` and ``Dict`` ones included) is checked here once,
    as the whole request is loaded, and each that cannot be encoded is named with the
    field's own errors, all in one answer."""

    class Meta:
        unknown = ma.RAISE

    def load(self, data: Any, *, many: bool | None = None, partial: Any = None,
             unknown: Any = None) -> Any:
        if _CHECKING.get():  # a nested schema of a request already checked whole
            return super().load(data, many=many, partial=partial, unknown=unknown)
        token = _CHECKING.set(True)
        try:
            unencodable = unencodable_text(data)
            try:
                loaded = super().load(data, many=many, partial=partial, unknown=unknown)
            except ma.ValidationError as error:
                raise ma.ValidationError(_merged(error.messages, unencodable),
                                         data=data) from None
            if unencodable:
                raise ma.ValidationError(unencodable, data=data)
            return loaded
        finally:
            _CHECKING.reset(token)


_CHECKING: ContextVar[bool] = ContextVar("taskenv_checking_text", default=False)


def encodable(text: str) -> bool:
    """Whether UTF-8 can encode ``text`` (it holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def escaped(text: str) -> str:
    """``text`` with what cannot be encoded written as a Python escape (``\\ud800``)."""
    return text.encode("utf-8", "backslashreplace").decode()


def unencodable_message(text: str) -> str:
    at = next(i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff")
    return (f"is not text UTF-8 can encode: character {at} is a lone surrogate "
            f"(U+{ord(text[at]):04X}, half of a UTF-16 pair); send whole characters")


def unencodable_text(data: Any) -> Any:
    """Each string in ``data`` (a decoded JSON document) that cannot be encoded, as
    marshmallow's errors are shaped (``{"env": {0: {"value": [message]}}}``); empty if
    none."""
    if isinstance(data, str):
        return [] if encodable(data) else [unencodable_message(data)]
    found: dict[Any, Any] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and not encodable(key):
                found[escaped(key)] = [f"this field's name {unencodable_message(key)}"]
            elif (sub := unencodable_text(value)):
                found[key] = sub
    elif isinstance(data, list):
        for index, value in enumerate(data):
            if (sub := unencodable_text(value)):
                found[index] = sub
    return found


def _merged(first: Any, second: Any) -> Any:
    """Two sets of marshmallow errors as one."""
    if not second:
        return first
    if isinstance(first, dict) and isinstance(second, dict):
        merged = dict(first)
        for key, value in second.items():
            merged[key] = _merged(merged[key], value) if key in merged else value
        return merged
    if isinstance(first, list) and isinstance(second, list):
        return first + [m for m in second if m not in first]
    if isinstance(first, dict):  # the field's own type error beside text within it
        return _merged(first, {"_schema": second})
    return _merged({"_schema": first}, second)


class Timestamp(fields.DateTime):
    """A moment: stored as epoch seconds, shown as RFC 3339 in UTC with milliseconds
    (``2026-12-01T15:04:05.123Z``).  Every time in every response goes through here."""

    def __init__(self, **kwargs):  # type: ignore[no-untyped-def]
        metadata = kwargs.setdefault("metadata", {})
        metadata.setdefault("example", "2026-12-01T15:04:05.123Z")
        metadata.setdefault("description", "RFC 3339, in UTC, to the millisecond.")
        super().__init__(**kwargs)

    def _serialize(self, value, attr, obj, **kwargs):  # type: ignore[no-untyped-def]
        if value is None or value == "":
            return None
        return rfc3339(value)


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


def no_nul(value: str) -> None:
    """A NUL cannot reach a process: the kernel ends an argument or a name there."""
    if "\0" in value:
        raise ma.ValidationError("must not contain a NUL character.")


# The task's own hash holds the steps: bounded, so a record's size never depends on input.
MAX_STEPS_BYTES = 64 * 1024


def bounded_steps(steps: list[list[str]]) -> None:
    size = sum(len(arg.encode("utf-8", "surrogatepass")) for step in steps for arg in step)
    if size > MAX_STEPS_BYTES:
        raise ma.ValidationError(f"The steps' arguments take {size} bytes; at most "
                                 f"{MAX_STEPS_BYTES} are allowed.")


class EnvEntry(Strict):
    name = fields.String(required=True, metadata={"example": "LEARNING_RATE"})
    value = fields.String(required=True, metadata={"example": "0.01"})
    secret = StrictBool(load_default=False,
                        metadata={"description": "Stored encrypted, shown masked, injected "
                                                 "through the backend's secret mechanism."})


class FileEntry(Strict):
    path = fields.String(required=True, metadata={
        "description": "Relative to the working directory (no absolute path, no '..').",
        "example": "prepare.sh"})
    content = fields.String(required=True, metadata={
        "description": "Text, stored and shown in clear: never a secret value (read secrets "
                       "from the environment).", "example": "echo preparing\n"})
    mode = fields.Integer(strict=True, load_default=None, metadata={
        "description": "Permission bits, 0 to 511 (0o777); default 420 (0o644); 493 is "
                       "0o755.", "example": 493})


class EnvList(fields.List):
    """A list of :class:`EnvEntry`: what a task's env is in every request.

    Most lists are plain (each entry a name, a value and maybe a secret flag, as
    strings and a boolean): those are taken as they are, without a nested schema per
    entry, which made a task's POST pay once per variable.  Any other list goes through
    ``EnvEntry`` entry by entry, so every error is the schema's own (a property test holds
    the two ways to the same result: ``tests/api/test_schemas.py``)."""

    _KEYS = frozenset(("name", "value", "secret"))

    def __init__(self, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(fields.Nested(EnvEntry), **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(value, list) and all(_plain_entry(e, self._KEYS) for e in value):
            return [{"name": e["name"], "value": e["value"], "secret": e.get("secret", False)}
                    for e in value]
        return super()._deserialize(value, attr, data, **kwargs)


def _plain_entry(entry: object, keys: frozenset[str]) -> bool:
    return (type(entry) is dict and keys.issuperset(entry)
            and type(entry.get("name")) is str and type(entry.get("value")) is str
            and type(entry.get("secret", False)) is bool)


def files_field(description: str, **options: object) -> fields.List:
    return fields.List(fields.Nested(FileEntry), metadata={"description": description},
                       **options)  # type: ignore[arg-type]


class FileOut(ma.Schema):
    path = fields.String()
    mode = fields.Integer()
    size = fields.Integer(metadata={"description": "Bytes of content."})
    sha256 = fields.String(metadata={"description": "Hex digest of the content."})


class ResourcesSchema(Strict):
    cpu = fields.String(load_default=None, validate=validate.Length(max=32))
    memory = fields.String(load_default=None, validate=validate.Length(max=32))
    gpus = fields.Integer(strict=True, load_default=0, validate=validate.Range(min=0, max=64))


def env_file_field(shared_with: str) -> fields.String:
    """``env_file``: dotenv text, read as data; a name also in ``shared_with`` is refused."""
    return fields.String(
        load_default=None, validate=validate.Length(max=1024 * 1024),
        metadata={"description": "dotenv text (KEY=value, export, quotes, # comments), read "
                                 "as data: nothing is expanded or run. A name it shares "
                                 f"with {shared_with} is refused.",
                  "example": "LEARNING_RATE=0.01\nDATA_DIR='/data/set 1'\n"})


# A hard ceiling on what a request may even ask for; the platform's own bound is
# TASKENV_MAX_REPLICAS, checked by api.actions with an error naming it.
MAX_REPLICAS_ASKED = 4096
MAX_PROCS_PER_REPLICA = 256
# A task spread over nodes gets a job network of its own, one address per node in a /24.
MAX_NODES = 253


def replicas_field() -> fields.Integer:
    return fields.Integer(
        strict=True, load_default=1, validate=validate.Range(min=1, max=MAX_REPLICAS_ASKED),
        metadata={"description": "How many replicas of the container run, each with its own "
                                 "identity (TASK_REPLICA, RANK, PET_NODE_RANK, ...): at most "
                                 "TASKENV_MAX_REPLICAS; each counts in the owner's quotas."})


def procs_field() -> fields.Integer:
    return fields.Integer(
        strict=True, load_default=1, validate=validate.Range(min=1, max=MAX_PROCS_PER_REPLICA),
        metadata={"description": "Processes torchrun starts in each replica "
                                 "(PET_NPROC_PER_NODE); above 1, RANK and WORLD_SIZE are "
                                 "torchrun's to set in each process."})


def nodes_field() -> fields.Integer:
    return fields.Integer(
        strict=True, load_default=1, validate=validate.Range(min=1, max=MAX_NODES),
        metadata={"description": "How many nodes the replicas are spread over, as many on "
                                 "each (replicas a multiple of it); above 1 only where the "
                                 "launcher places replicas on nodes itself (Slurm)."})


class TaskCreate(Strict):
    name = fields.String(required=True, validate=[validate.Length(min=1, max=200), no_nul])
    image = fields.String(load_default=None, validate=[validate.Length(max=500), no_nul])
    workdir = fields.String(
        load_default=None, validate=relative_workdir,
        metadata={"description": "A directory inside the task's home, relative to it "
                                 "(no absolute path, no '..'); created if missing.",
                  "example": "runs/exp1"})
    steps = fields.List(
        fields.List(fields.String(validate=no_nul), validate=validate.Length(min=1, max=1000)),
        required=True, validate=[validate.Length(min=1, max=100), bounded_steps],
        metadata={"description": "Scripts run in order in one container; each an argv list, "
                                 "executed without a shell; at most "
                                 f"{MAX_STEPS_BYTES} bytes of arguments in all.",
                  "example": [["sh", "prepare.sh"], ["python3", "train.py"]]})
    env = EnvList(load_default=list)
    resources = fields.Nested(ResourcesSchema, load_default=None)
    project = fields.String(
        load_default=None, validate=validate.Length(min=1, max=63),
        metadata={"description": "The project the task runs in: its policy applies. "
                                 "Defaults to the owner's only project; required for an "
                                 "owner in several."})
    env_file = env_file_field(shared_with="env")
    files = files_field("The task's own files (scripts, configs), placed in the working "
                        "directory before the first step, which stays writable.",
                        load_default=list)
    strict_env = StrictBool(load_default=False, metadata={
        "description": "A variable a script reads with no value and no default rejects "
                       "the task (a warning otherwise)."})
    replicas = replicas_field()
    procs_per_replica = procs_field()
    nodes = nodes_field()


class EnvPatch(Strict):
    set = EnvList(load_default=list, metadata={"description": "Variables to add or modify."})
    unset = fields.List(fields.String(), load_default=list,
                        metadata={"description": "Names of variables to delete."})
    env_file = env_file_field(shared_with="set")
    files = files_field("When given: the new revision's files, replacing the current ones "
                        "whole; absent: the files are kept.", load_default=None,
                        allow_none=True)
    apply = fields.String(
        load_default=RESTART, validate=validate.OneOf(APPLY_MODES),
        metadata={"description": "When the change takes effect. restart (the default): a "
                                 "launching or running task is stopped, and the new revision "
                                 "is launched once its container is gone (never two at "
                                 "once); a task not running gets the new revision at once. "
                                 "next-run: nothing is launched and the run carries on; the "
                                 "changed env is kept as the task's next_env, which the next "
                                 "rerun uses and later changes build on."})


class Problem(ma.Schema):
    rule = fields.String(required=True)
    message = fields.String(required=True)
    variable = fields.String()
    field = fields.String()
    limit = fields.Integer()
    replica = fields.Integer(allow_none=True, metadata={
        "description": "The replica it concerns (env.received); null: every replica."})
    names = fields.List(fields.String(), metadata={
        "description": "The variables it names (env.received): names, never values."})


class Error(ma.Schema):
    code = fields.String(required=True)
    message = fields.String(required=True)
    errors = fields.List(fields.Nested(Problem), required=True)
    revision = fields.Integer(metadata={"description": "With 412 (a stale If-Match): the "
                                                       "task's current revision."})


class ShadowedOut(ma.Schema):
    source = fields.String()
    scope = fields.String(allow_none=True)
    value = fields.String(metadata={"description": "Masked when the variable is secret."})


class ResolvedVar(ma.Schema):
    name = fields.String()
    value = fields.String(metadata={"description": "Masked when the variable is secret."})
    source = fields.String(validate=validate.OneOf(["platform", "protected", "user",
                                                    "default"]))
    overrode = fields.List(fields.String())
    secret = fields.Boolean()
    scope = fields.String(metadata={"description": "The policy layer that set it: platform "
                                                   "or project:<name>."})
    policy_version = fields.Integer(metadata={"description": "That layer's version."})
    when = fields.String(metadata={"description": "The condition that matched, e.g. gpus>=1."})
    shadowed = fields.List(fields.Nested(ShadowedOut), metadata={
        "description": "Every layer it took precedence over; secret values masked."})


class EnvOut(ma.Schema):
    name = fields.String()
    value = fields.String()
    secret = fields.Boolean()


class Event(ma.Schema):
    at = Timestamp()
    revision = fields.Integer()
    state = fields.String()


class DriftEntry(ma.Schema):
    name = fields.String()
    old = fields.String(allow_none=True, metadata={"description": "Masked for a secret."})
    new = fields.String(allow_none=True, metadata={"description": "Masked for a secret."})
    secret = fields.Boolean()
    why = fields.String()


HOW = ("What made the current revision: create, patch, rerun or restart (a change to a "
       "launching or running task, which stopped its run).")


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
    how = fields.String(metadata={"description": HOW})
    env = fields.List(fields.Nested(EnvOut), metadata={"description": "As the user set it."})
    resolved_env = fields.List(fields.Nested(ResolvedVar), allow_none=True)
    policy_version = fields.Integer(allow_none=True)
    policy_versions = fields.Dict(keys=fields.String(), values=fields.Integer(),
                                  allow_none=True, metadata={
                                      "description": "Each policy layer's version, by scope."})
    project = fields.String(allow_none=True)
    errors = fields.List(fields.Nested(Problem))
    warnings = fields.List(fields.Nested(Problem))
    exit_code = fields.Integer(allow_none=True)
    reason = fields.String(allow_none=True)
    created_at = Timestamp()
    updated_at = Timestamp()
    events = fields.List(fields.Nested(Event))
    drift = fields.List(fields.Nested(DriftEntry), allow_none=True)
    pinned_from = fields.Integer(allow_none=True)
    doctor = fields.Dict(allow_none=True, metadata={
        "description": "The pre-flight report on the task's scripts, when it has some."})
    rerun_of = fields.Integer(allow_none=True)
    note = fields.String(metadata={"description": "How env changes take effect."})
    files = fields.List(fields.Nested(FileOut), metadata={
        "description": "The revision's own files: path, mode, size and digest."})
    next_env = fields.List(
        fields.Nested(EnvOut), allow_none=True,
        metadata={"description": "A change made with apply: next-run, kept for the next "
                                 "rerun; null when there is none."})
    cancelled_by = fields.String(allow_none=True)
    cancelled_at = Timestamp(allow_none=True)
    replicas = fields.Integer()
    procs_per_replica = fields.Integer()
    nodes = fields.Integer()
    per_node = fields.List(fields.Dict(), allow_none=True, metadata={
        "description": "The platform's defaults that depend on the node (when.node) and may "
                       "reach this task: name, value, node glob, policy version; resolved "
                       "on each node (what each got: received.per_node). Null: none."})
    received = fields.Dict(allow_none=True, metadata={
        "description": "What each replica's process received of its env, looked at where "
                       "the step cannot alter it, once the revision ended: same (every "
                       "replica got the same resolved values), added (names the runtime "
                       "gave every replica beyond the task's env), the replicas that differ "
                       "(names only, keyed digests, never a value); its warnings join "
                       "the task's. Null where the launcher does not look."})
    replica_exit_codes = fields.List(
        fields.Integer(allow_none=True), allow_none=True,
        metadata={"description": "Each replica's exit code, by index, once the revision "
                                 "ended (null: that replica never ended on its own)."})


class ManifestOut(ma.Schema):
    revision = fields.Integer()
    resolved = fields.Boolean(metadata={"description": "False: resolved just now against the "
                                                       "current policy, not yet by the workers"})
    policy_version = fields.Integer()
    job = fields.Dict(metadata={"description": "A batch/v1 Job, as the API server gets it."})
    secret = fields.Dict(allow_none=True,
                         metadata={"description": "A v1 Secret; its values are redacted."})
    config_map = fields.Dict(allow_none=True, metadata={
        "description": "A v1 ConfigMap of the task's own files (one key each), which an "
                       "init container copies into the writable working directory; null "
                       "for a task without files."})
    service = fields.Dict(metadata={"description": "A task of several replicas: the headless "
                                                   "Service naming each replica's pod."})
    network_policy = fields.Dict(metadata={"description": "A task of several replicas: its "
                                                          "pods reach each other and DNS only."})


class TaskAccepted(ma.Schema):
    id = fields.String()
    url = fields.String()
    revision = fields.Integer()
    status = fields.String()
    how = fields.String(metadata={"description": HOW})
    advice = fields.List(fields.Nested(Problem), metadata={
        "description": "The doctor's advice on the env as set: likely typos of documented "
                       "names and values outside their documented ones. Never blocking; "
                       "the revision's warnings keep it."})


class TaskCancelled(TaskAccepted):
    cancelled_by = fields.String(allow_none=True)
    cancelled_at = Timestamp(allow_none=True)


class TaskSummary(ma.Schema):
    id = fields.String()
    url = fields.String()
    name = fields.String()
    owner = fields.String()
    project = fields.String(allow_none=True)
    status = fields.String(validate=validate.OneOf(states.ALL))
    revision = fields.Integer()
    created_at = Timestamp()
    updated_at = Timestamp()


class TaskPage(ma.Schema):
    items = fields.List(fields.Nested(TaskSummary),
                        metadata={"description": "Summaries; GET /tasks/{id} for a whole task."})
    next_cursor = fields.String(allow_none=True, metadata={
        "description": "Pass it back as cursor for the next page; opaque."})


class TaskQuery(Strict):
    status = fields.String(load_default=None, validate=validate.OneOf(states.ALL))
    limit = fields.Integer(load_default=50, validate=validate.Range(min=1, max=500))
    cursor = fields.String(load_default=None, validate=validate.Length(min=1, max=500))


class WhenIn(Strict):
    """Which tasks an entry applies to; checked by ``shared.policy.conditions.check_when``."""

    gpus = fields.Raw(metadata={"description": "A GPU count or comparison: 0, \">=1\", \"<2\"."})
    image = fields.String(metadata={"description": "A glob the task's image must match."})
    project = fields.String(metadata={"description": "A glob the task's project must match."})
    replicas = fields.Raw(metadata={"description": "A replica count or comparison: \">1\" "
                                                   "is every distributed task."})
    node = fields.Raw(metadata={"description": "A glob on the name of the node a replica "
                                               "runs on: resolved there, by the launcher; "
                                               "only on the platform's non-secret defaults."})


def when_field() -> fields.Nested:
    return fields.Nested(WhenIn, allow_none=True,
                         metadata={"description": "Only for the tasks it matches."})


class DefaultIn(EnvEntry):
    when = when_field()


class ProtectedIn(Strict):
    name = fields.String(required=True, validate=validate.Length(min=1))
    value = fields.String(load_default=None, allow_none=True,
                          metadata={"description": "Injected into every task; without one "
                                                   "the name is only reserved."})
    reason = fields.String(required=True, validate=validate.Length(min=1, max=1000),
                           metadata={"description": "Shown to users."})
    secret = StrictBool(load_default=False)
    when = when_field()


class RuleIn(Strict):
    """A value rule; its values are checked by ``shared.policy.rules`` (all problems at once)."""

    name = fields.String(required=True, metadata={"description": "A name or glob: NCCL_*."})
    required = StrictBool()
    allowed = fields.List(fields.String())
    pattern = fields.String(metadata={"description": "A full-match RE2 regular expression."})
    min = fields.Raw()
    max = fields.Raw()
    max_length = fields.Raw()
    description = fields.String(validate=validate.Length(max=1000))
    when = when_field()
    severity = fields.String(validate=validate.OneOf(["error", "warning"]), metadata={
        "description": "error (the default) rejects the task; warning only tells its owner."})
    documented = StrictBool(metadata={
        "description": "Every variable the rule covers must be documented in the catalog "
                       "(GET /api/v1/catalog); a name that is not, close to one that is, "
                       "names the likely one."})


class EndpointAllowanceIn(Strict):
    project = fields.String(required=True, validate=validate.Length(min=1, max=63))
    name = fields.String(required=True, validate=validate.Length(min=1, max=200), metadata={
        "description": "One endpoint variable's exact name (no family)."})
    reason = fields.String(load_default="", validate=validate.Length(max=1000))


# A policy body that names neither list: refused, so that a PUT of ``{}`` (or of rules
# alone) cannot wipe every default and protected entry by mistake.
NEITHER_LIST = ("give defaults, protected or both (an omitted one is empty): a policy with "
                "neither would wipe every default and protected entry; send "
                "\"defaults\": [] to save one without any")


class PolicyIn(Strict):
    class Meta(Strict.Meta):
        description = ("A whole policy, the new version: an omitted list is empty, but a "
                       "body must give defaults, protected or both (answered 422 otherwise: "
                       "a PUT of {} never wipes the policy).")

    defaults = fields.List(fields.Nested(DefaultIn), load_default=list, metadata={
        "description": "Omitted: none (if protected is given)."})
    protected = fields.List(fields.Nested(ProtectedIn), load_default=list, metadata={
        "description": "Omitted: none (if defaults is given)."})
    on_conflict = fields.String(load_default=REJECT, validate=validate.OneOf(ON_CONFLICT))
    rules = fields.List(fields.Nested(RuleIn), load_default=list)
    strict_env = StrictBool(load_default=False, metadata={
        "description": "A variable a task's script reads with no value and no default "
                       "rejects the task (a warning otherwise)."})
    endpoint_allowances = fields.List(fields.Nested(EndpointAllowanceIn), load_default=list,
                                      metadata={
        "description": "The platform's policy only: the endpoint variables (HF_ENDPOINT, "
                       "HTTPS_PROXY, ...) it lets one project's policy give a value "
                       "(docs/policy.md)."})

    @ma.validates_schema(pass_original=True, skip_on_field_errors=False)
    def one_list_at_least(self, data: dict[str, Any], original: Any, **kwargs: Any) -> None:
        if isinstance(original, dict) and not {"defaults", "protected"} & original.keys():
            raise ma.ValidationError(NEITHER_LIST, field_name="defaults")


class DefaultOut(EnvOut):
    when = fields.Dict()


class PolicyOut(ma.Schema):
    version = fields.Integer()
    scope = fields.String(metadata={"description": "platform or project:<name>."})
    defaults = fields.List(fields.Nested(DefaultOut))
    protected = fields.List(fields.Dict())
    rules = fields.List(fields.Dict())
    strict_env = fields.Boolean()
    endpoint_allowances = fields.List(fields.Dict())
    on_conflict = fields.String()
    author = fields.String(allow_none=True)
    created_at = Timestamp(allow_none=True)


class ProjectConflictOut(ma.Schema):
    project = fields.String()
    policy_version = fields.Integer(metadata={"description": "The project policy's current "
                                                             "version, the one in conflict."})
    problems = fields.List(fields.Nested(Problem), metadata={
        "description": "What the platform policy now refuses in it, as a PUT of it would be "
                       "refused: each names the variable and the rule; a secret value is "
                       "never shown."})


class PolicySaved(PolicyOut):
    project_conflicts = fields.List(fields.Nested(ProjectConflictOut), metadata={
        "description": "Projects whose current policy this platform policy would refuse: "
                       "the save stands; their maintainers must change them.  Empty when "
                       "none."})


class ProjectPolicyOut(PolicyOut):
    conflicts = fields.List(fields.Nested(Problem), metadata={
        "description": "What the platform's current policy refuses in this version (saved "
                       "before the platform's last change); empty when none."})


class PolicyVersions(ma.Schema):
    current = fields.Integer()
    versions = fields.List(fields.Integer())


class PreviewIn(Strict):
    name = fields.String(load_default="preview", validate=validate.Length(min=1, max=200))
    env = EnvList(required=True)
    policy_version = fields.Integer(strict=True, load_default=None, validate=validate.Range(min=0))
    project = fields.String(load_default=None, validate=validate.Length(min=1, max=63),
                            metadata={"description": "As for a new task: its policy applies."})
    resources = fields.Nested(ResourcesSchema, load_default=None,
                              metadata={"description": "resources.gpus is what when.gpus "
                                                       "matches."})
    image = fields.String(load_default=None, validate=validate.Length(max=500),
                          metadata={"description": "What when.image matches."})
    files = files_field("The task's own files: checked as a new task's would be (paths, "
                        "sizes, no secret value in them); their problems join the env's.",
                        load_default=list)
    strict_env = StrictBool(load_default=False, metadata={
        "description": "A script read with no value and no default is an error."})
    replicas = replicas_field()
    procs_per_replica = procs_field()
    nodes = nodes_field()


class DiffersOut(ma.Schema):
    name = fields.String()
    values = fields.String(metadata={"description": "What each replica holds: "
                                                    "\"the replica's index, 0..n-1\"."})


class NotApplied(ma.Schema):
    name = fields.String()
    kind = fields.String(validate=validate.OneOf(["default", "protected", "rule"]))
    scope = fields.String()
    when = fields.String(metadata={"description": "The condition the task does not match."})


class PreviewOut(ma.Schema):
    ok = fields.Boolean()
    per_node = fields.List(fields.Dict(), metadata={
        "description": "The platform's per-node defaults that may reach the task, resolved "
                       "on each node: name, value, node glob, policy version."})
    policy_version = fields.Integer()
    policy_versions = fields.Dict(keys=fields.String(), values=fields.Integer(),
                                  metadata={"description": "Each layer's version, by scope."})
    variables = fields.List(fields.Nested(ResolvedVar))
    not_applied = fields.List(fields.Nested(NotApplied), metadata={
        "description": "Conditional entries that do not reach this task, and why."})
    warnings = fields.List(fields.Nested(Problem))
    errors = fields.List(fields.Nested(Problem))
    doctor = fields.Dict(metadata={
        "description": "With files: the pre-flight report (scripts read, reads with no "
                       "value, variables no script reads, reads a default satisfies)."})
    replicas = fields.Integer(metadata={"description": "How many replicas would run; "
                                                       "variables are replica 0's."})
    differs = fields.List(fields.Nested(DiffersOut), metadata={
        "description": "The identity variables whose value differs in the other replicas."})


class RerunIn(Strict):
    revision = fields.Integer(
        strict=True, load_default=None, validate=validate.Range(min=1),
        metadata={"description": "The revision to run again; the current one by default."})
    pin = StrictBool(
        load_default=False,
        metadata={"description": "true: that revision's resolved values where today's "
                                 "policy still allows them (protected values are always "
                                 "today's); false: its env as set, resolved anew."})


class EnvQuery(Strict):
    format = fields.String(load_default="json", validate=validate.OneOf(["json", "dotenv"]))
    resolved = fields.Boolean(load_default=False,
                              metadata={"description": "Export the resolved env, not the "
                                                       "env as set (format=dotenv)."})


class TaskEnvOut(ma.Schema):
    revision = fields.Integer()
    env = fields.List(fields.Nested(EnvOut))
    resolved_env = fields.List(fields.Nested(ResolvedVar), allow_none=True)


class RevisionSummary(ma.Schema):
    revision = fields.Integer()
    state = fields.String(allow_none=True)
    policy_version = fields.Integer(allow_none=True)
    policy_versions = fields.Raw(allow_none=True)
    made_by = fields.String(allow_none=True)
    how = fields.String(allow_none=True, metadata={
        "description": "What made it: create, patch, rerun or restart."})
    made_at = Timestamp(allow_none=True)
    started_at = Timestamp(allow_none=True)
    ended_at = Timestamp(allow_none=True)
    exit_code = fields.Integer(allow_none=True)
    reason = fields.String(allow_none=True)
    pinned_from = fields.Integer(allow_none=True)
    rerun_of = fields.Integer(allow_none=True)
    replica_exit_codes = fields.List(fields.Integer(allow_none=True), allow_none=True)


class RevisionList(ma.Schema):
    items = fields.List(fields.Nested(RevisionSummary), metadata={"description": "Oldest first."})


class RevisionOut(RevisionSummary):
    env = fields.List(fields.Nested(EnvOut), metadata={"description": "As the user set it."})
    resolved_env = fields.List(fields.Nested(ResolvedVar), allow_none=True)
    errors = fields.List(fields.Nested(Problem))
    warnings = fields.List(fields.Nested(Problem))
    drift = fields.List(fields.Nested(DriftEntry), allow_none=True, metadata={
        "description": "For a rerun: each variable whose value differs from the revision "
                       "it was made from, and why."})
    doctor = fields.Dict(allow_none=True, metadata={
        "description": "The doctor's pre-flight report on the revision's scripts."})
    events = fields.List(fields.Nested(Event))
    files = fields.List(fields.Nested(FileOut), metadata={
        "description": "The revision's own files: path, mode, size and digest."})


class DiffQuery(Strict):
    of = fields.String(load_default="resolved", validate=validate.OneOf(["resolved", "env"]),
                       metadata={"description": "Compare the resolved envs (default) or the "
                                                "envs as set."})


class DiffVar(ma.Schema):
    name = fields.String()
    value = fields.String(metadata={"description": "Masked for a secret."})
    source = fields.String(allow_none=True)
    secret = fields.Boolean()


class DiffChange(ma.Schema):
    name = fields.String()
    old = fields.String(metadata={"description": "Masked for a secret."})
    new = fields.String(metadata={"description": "Masked for a secret."})
    source = fields.String(allow_none=True, metadata={"description": "The new source."})
    old_source = fields.String(allow_none=True)
    new_source = fields.String(allow_none=True)
    secret = fields.Boolean()
    value_changed = fields.Boolean(metadata={
        "description": "False when only the source changed; a secret shows only this."})


class FileChange(ma.Schema):
    path = fields.String()
    old = fields.Nested(FileOut)
    new = fields.Nested(FileOut)


class FilesDiff(ma.Schema):
    added = fields.List(fields.Nested(FileOut))
    removed = fields.List(fields.Nested(FileOut))
    changed = fields.List(fields.Nested(FileChange))


class DiffOut(ma.Schema):
    from_ = fields.Integer(data_key="from", attribute="from")
    to = fields.Integer()
    of = fields.String()
    added = fields.List(fields.Nested(DiffVar))
    removed = fields.List(fields.Nested(DiffVar))
    changed = fields.List(fields.Nested(DiffChange))
    unchanged = fields.List(fields.String(), metadata={
        "description": "Names whose value is the same (secrets compared, never shown)."})
    files = fields.Nested(FilesDiff, metadata={
        "description": "The task's own files: added, removed and changed, by path, each "
                       "with its size, mode and digest (never the whole content)."})


# --- projects and a draft policy's impact ----------------------------------------------------

OWNER = validate.Regexp(r"^[A-Za-z0-9_.@-]{1,100}$", error="not an owner name")
OWNERS = validate.Length(max=1000)


class ProjectIn(Strict):
    name = fields.String(required=True, metadata={
        "description": "Lower-case letters, digits and '-', at most 63 characters.",
        "example": "vision"})
    members = fields.List(fields.String(validate=OWNER), load_default=list, validate=OWNERS)
    maintainers = fields.List(fields.String(validate=OWNER), load_default=list, validate=OWNERS)


class ProjectPatch(Strict):
    members = fields.List(fields.String(validate=OWNER), load_default=None,
                          metadata={"description": "Replaces the list."}, validate=OWNERS)
    maintainers = fields.List(fields.String(validate=OWNER), load_default=None,
                              metadata={"description": "Replaces the list."}, validate=OWNERS)


class ProjectOut(ma.Schema):
    name = fields.String()
    members = fields.List(fields.String())
    maintainers = fields.List(fields.String())
    created_by = fields.String(allow_none=True)
    created_at = Timestamp()
    policy_version = fields.Integer(metadata={"description": "The project policy's current "
                                                             "version."})


class ProjectList(ma.Schema):
    items = fields.List(fields.Nested(ProjectOut))


class Rejection(ma.Schema):
    variable = fields.String(allow_none=True)
    rule = fields.String()
    message = fields.String()
    tasks = fields.Integer(metadata={"description": "Every task this problem rejects."})
    newly_rejected = fields.Integer(metadata={"description": "Of those, tasks not rejected "
                                                             "today: the draft's doing."})
    already_rejected = fields.Integer(metadata={"description": "Of those, tasks rejected "
                                                               "today already."})
    owners = fields.Integer()
    examples = fields.List(fields.String(), metadata={
        "description": "Some task ids, the newly rejected first."})


class ValueChange(ma.Schema):
    name = fields.String()
    kind = fields.String(validate=validate.OneOf(["added", "removed", "changed"]))
    old = fields.String(allow_none=True, metadata={"description": "null for a secret."})
    new = fields.String(allow_none=True, metadata={"description": "null for a secret."})
    secret = fields.Boolean()
    source = fields.String(allow_none=True)
    tasks = fields.Integer()
    owners = fields.Integer()
    examples = fields.List(fields.String())


class ImpactOut(ma.Schema):
    considered = fields.Integer(metadata={"description": "Every task not final and the most "
                                                         "recent 1,000 final ones, in scope."})
    rejected = fields.Integer(metadata={"description": "Tasks the draft would reject: "
                                                       "newly_rejected + already_rejected."})
    newly_rejected = fields.Integer(metadata={"description": "Of those, tasks not rejected "
                                                             "today: what saving the draft "
                                                             "would newly reject."})
    already_rejected = fields.Integer(metadata={"description": "Of those, tasks rejected "
                                                               "today already."})
    accepted = fields.Integer(metadata={"description": "Tasks without a resolved env now "
                                                       "(rejected or not yet resolved) that "
                                                       "the draft would resolve."})
    changed = fields.Integer(metadata={"description": "Tasks some value would change for."})
    unchanged = fields.Integer()
    rejections = fields.List(fields.Nested(Rejection))
    changes = fields.List(fields.Nested(ValueChange))
