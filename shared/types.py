"""The shapes of a task as stored and passed around, and every string constant with
a fixed set of values, each in one place.

A record is JSON in Redis (``shared.store.tasks``): a ``TaskRecord`` is the task's own
fields plus those of its current revision (a ``RevisionFields``); older revisions are
read as ``RevisionFields`` alone.  ``total=False`` because a record written by an older
release may lack a field added since: readers use ``.get`` for those.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypedDict, get_args

State = Literal["pending", "validated", "resolved", "launching", "queued", "running", "succeeded",
                "failed", "rejected", "cancelled"]
# How a change to a running task's env reaches it: stop it and run the new revision,
# or keep the change for the next rerun.
Apply = Literal["restart", "next-run"]
RESTART: Final = "restart"
NEXT_RUN: Final = "next-run"
APPLY_MODES: tuple[Apply, ...] = get_args(Apply)
# What a policy does with a user's value for a protected variable.
OnConflict = Literal["reject", "drop"]
REJECT: Final = "reject"
DROP: Final = "drop"
ON_CONFLICT: tuple[OnConflict, ...] = get_args(OnConflict)
# How a revision was made.
How = Literal["create", "patch", "rerun"]
# The layers a resolved variable can come from, lowest precedence first.
Source = Literal["default", "user", "protected", "platform"]


class EnvEntry(TypedDict, total=False):
    """A variable as a user set it."""

    name: str
    value: str
    secret: bool


class Shadowed(TypedDict, total=False):
    source: Source
    scope: str | None
    value: str


class ResolvedVar(TypedDict, total=False):
    """A variable of the processed env, with its provenance."""

    name: str
    value: str
    source: Source
    overrode: list[str]
    secret: bool
    scope: str | None
    policy_version: int | None
    when: str | None
    shadowed: list[Shadowed]


class FileEntry(TypedDict):
    """One of a task's own files (``shared.task.files``), placed in its working directory."""

    path: str
    content: str
    mode: int


class Event(TypedDict):
    at: float
    revision: int
    state: State


class RevisionFields(TypedDict, total=False):
    """What one revision holds (``shared.store.tasks.REVISION_FIELDS`` and its state)."""

    revision: int
    state: State
    env: list[EnvEntry]
    resolved: list[ResolvedVar] | None
    errors: list[dict[str, Any]]
    warnings: list[dict[str, Any]]
    policy_version: int | None
    policy_versions: dict[str, int]
    exit_code: int | None
    reason: str | None
    events: list[Event]
    made_by: str
    how: How
    made_at: float
    started_at: float
    ended_at: float
    drift: dict[str, Any]
    pinned_from: int
    rerun_of: int
    cancelled_by: str
    cancelled_at: float
    apply: Apply
    next_env: list[EnvEntry]
    files: list[FileEntry]
    updated_at: float


class TaskRecord(RevisionFields, total=False):
    """A task: its own fields and those of its current revision."""

    id: str
    name: str
    owner: str
    project: str | None
    image: str | None
    workdir: str | None
    steps: list[list[str]]
    resources: dict[str, Any] | None
    created_at: float
