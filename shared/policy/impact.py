"""What saving a draft policy would do to existing tasks, before anyone saves it.

``impact`` re-resolves each task snapshot with the draft (through the caller's
``resolve_draft``, the same merge the policy stage runs) and compares with what the
task has now: which tasks would be rejected and why, which variables would change
value and how many tasks and owners each change touches.  Rejections are split: a
task the draft rejects that is not rejected today is the draft's doing ("newly
rejected"); one rejected today already is counted apart, so an admin reads what the
draft changes, not what was already so.  Secret values appear only as "changed".
The order of everything is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from shared.env.envlist import EnvVar
from shared.policy.conditions import TaskFacts
from shared.policy.model import Resolution, Resolved

EXAMPLES = 10  # task ids listed per group; the counts cover every task


@dataclass(frozen=True)
class TaskSnapshot:
    """One task revision as it stands: its own env, its facts and its resolved env
    (None when it has none, e.g. it was rejected or is not resolved yet)."""

    id: str
    owner: str
    env: tuple[EnvVar, ...]
    facts: TaskFacts
    resolved: tuple[Resolved, ...] | None
    rejected: bool = False  # rejected today: a draft that rejects it too changes nothing


@dataclass
class _Group:
    """Tasks sharing one outcome (a problem, or a change of one variable)."""

    fields: dict[str, Any]
    tasks: set[str] = field(default_factory=set)
    owners: set[str] = field(default_factory=set)
    already: set[str] = field(default_factory=set)  # of the tasks, those rejected today

    def add(self, snapshot: TaskSnapshot) -> None:
        self.tasks.add(snapshot.id)
        self.owners.add(snapshot.owner)
        if snapshot.rejected:
            self.already.add(snapshot.id)

    def to_dict(self) -> dict[str, Any]:
        return {**self.fields, "tasks": len(self.tasks), "owners": len(self.owners),
                "examples": sorted(self.tasks)[:EXAMPLES]}

    def split(self) -> dict[str, Any]:
        """``to_dict`` with the tasks split: rejected only by the draft, or already today
        (the examples are the newly rejected ones first: those are the draft's doing)."""
        newly = self.tasks - self.already
        return {**self.to_dict(), "newly_rejected": len(newly),
                "already_rejected": len(self.already),
                "examples": (sorted(newly) + sorted(self.already))[:EXAMPLES]}


def impact(snapshots: Iterable[TaskSnapshot],
           resolve_draft: Callable[[TaskSnapshot], Resolution]) -> dict[str, Any]:
    """The summary an admin reads before saving a draft policy."""
    rejected = _Group({})
    newly_accepted, unchanged = 0, 0
    problems: dict[tuple[str, str], _Group] = {}
    changes: dict[tuple[Any, ...], _Group] = {}
    ordered = sorted(snapshots, key=lambda s: s.id)
    for snapshot in ordered:
        draft = resolve_draft(snapshot)
        if not draft.ok:
            rejected.add(snapshot)
            for error in draft.errors:
                key = (error.variable or "", error.rule)
                problems.setdefault(key, _Group({"variable": error.variable, "rule": error.rule,
                                                 "message": error.message})).add(snapshot)
        elif snapshot.resolved is None:
            newly_accepted += 1
        else:
            found = value_changes(snapshot.resolved, draft.variables)
            unchanged += not found
            for key, fields in found:
                changes.setdefault(key, _Group(fields)).add(snapshot)
    return {
        "tasks": len(ordered),
        "rejected": {**rejected.split(),
                     "problems": [problems[k].split() for k in sorted(problems)]},
        "accepted": newly_accepted,  # tasks without a resolved env now that the draft accepts
        "changes": [changes[k].to_dict() for k in sorted(changes, key=_change_order)],
        "unchanged": unchanged,
    }


def value_changes(before: Iterable[Resolved],
                  after: Iterable[Resolved]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Each variable whose value differs, as (grouping key, fields shown); the platform's
    identity variables (task id, revision, policy version) are not a policy's effect."""
    old = {v.name: v for v in before if v.source != "platform"}
    new = {v.name: v for v in after if v.source != "platform"}
    found = []
    for name in sorted(old.keys() | new.keys()):
        was, now = old.get(name), new.get(name)
        if was is not None and now is not None and _same(was, now):
            continue
        found.append(_change(name, was, now))
    return found


def _same(was: Resolved, now: Resolved) -> bool:
    """Unchanged, as a draft's author may learn it.

    A secret is compared by where it comes from (layer, scope, policy version), never
    by value: a draft that puts a guessed value where a task's or a policy's secret was
    would otherwise learn, from "changed" or not, whether the guess was right.  A secret
    from the draft's own layer (a new version) is therefore always reported as changed.
    """
    if was.secret or now.secret:
        return (was.secret, was.source, was.scope, was.policy_version) == (
            now.secret, now.source, now.scope, now.policy_version)
    return was.value == now.value


def _change(name: str, was: Resolved | None, now: Resolved | None
            ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    kind = "added" if was is None else "removed" if now is None else "changed"
    secret = any(v is not None and v.secret for v in (was, now))
    old = None if secret or was is None else was.value
    new = None if secret or now is None else now.value
    fields = {"variable": name, "kind": kind, "secret": secret, "old": old, "new": new,
              "source": now.source if now is not None else None}
    return (name, kind, secret, old, new, fields["source"]), fields


def _change_order(key: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple("" if part is None else str(part) for part in key)
