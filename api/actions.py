"""What a caller can do to tasks and the policy, shared by the JSON API and the web pages.

Each function takes the services, the caller (owner and visibility scope) and
plain data; it writes to Redis first and enqueues after, and records an audit
entry naming the variables it touched (never their values).
"""

from __future__ import annotations

import time
from typing import Any

import marshmallow as ma

from shared import records, resolution, states
from shared.errors import EnvInvalid, PolicyConflict, PolicyInvalid, Problem, StateConflict
from shared.policy import Policy, check_policy
from shared.resolution import decide_policy, decide_validation
from shared.secrets import masked
from workers.services import Services

Doc = dict[str, Any]


def create_task(svc: Services, data: dict[str, Any], actor: str,
                idempotency_key: str | None = None) -> Doc:
    doc, created = svc.tasks.create(records.new_task(data, actor), idempotency_key)
    if created:
        svc.audit.record(actor, "task.create", doc["id"],
                         variables=[e.get("name") for e in data["env"]])
        svc.enqueue(doc["id"], doc["revision"])
    elif doc.get("digest") != records.request_digest(data):
        raise StateConflict(f"Idempotency-Key {idempotency_key!r} was used for a different "
                            f"request (task {doc['id']})")
    return doc


def revise_task(svc: Services, task_id: str, actor: str, scope: str | None,
                set_: list[dict[str, Any]], unset: list[str], action: str) -> Doc:
    """A new revision with the env changed: validated, resolved and launched anew."""
    svc.tasks.get(task_id, scope)  # 404 before anything else for tasks not yours

    def change(doc: Doc) -> Doc:
        if doc["state"] in (states.LAUNCHING, states.RUNNING):
            raise StateConflict(
                f"task {task_id} is {doc['state']}: a running container's env cannot "
                "change; change it once the task has finished")
        env, problems = records.patch_env(doc["env"], set_, unset)
        if problems:
            raise EnvInvalid("the change cannot be applied", problems)
        return records.new_revision(doc, env, actor, action.rpartition(".")[2])

    doc = svc.tasks.update(task_id, change)
    assert doc is not None  # ``change`` never declines: it returns a revision or raises
    svc.audit.record(actor, action, task_id, revision=doc["revision"],
                     set=[e.get("name") for e in set_], unset=unset)
    svc.enqueue(doc["id"], doc["revision"])
    return doc


def resolved_now(svc: Services, doc: Doc) -> Doc:
    """The record as the workers would resolve it now, for a revision not yet resolved."""
    state, checked = decide_validation(doc, svc.limits)
    if state == states.REJECTED:
        raise EnvInvalid("the task's env is not valid",
                         [Problem(**e) for e in checked["errors"]])
    state, decided = decide_policy({**doc, **checked}, svc.policies.current())
    if state == states.REJECTED:
        raise PolicyConflict("the policy refuses the task's env",
                             [Problem(**e) for e in decided["errors"]])
    return {**doc, **decided}


def preview(svc: Services, data: Doc) -> Doc:
    """What a task with this env would get, secrets masked; nothing is stored or launched."""
    version = data["policy_version"]
    policy = svc.policies.current() if version is None else svc.policies.get(version)
    shown = resolution.preview(data["env"], data["name"], policy, svc.limits)
    return {**shown, "variables": [masked(v) for v in shown["variables"]]}


def save_policy(svc: Services, data: Doc, actor: str, shape: ma.Schema | None = None) -> Policy:
    """Check the policy's rules, store it as a new version and audit it.

    The rules come first: they name the variable.  ``shape`` then loads the data with
    the API's schema, for a caller whose data has not been through it (the page).
    Tasks already resolved keep the version they were resolved with.
    """
    problems = check_policy(data, svc.limits)
    if problems:
        raise PolicyInvalid("the policy cannot be saved", problems)
    if shape is not None:
        data = shape.load(data)
    policy: Policy = svc.policies.put(Policy.from_dict(
        {**data, "author": actor, "created_at": time.time()}))
    svc.audit.record(actor, "policy.put", f"v{policy.version}",
                     defaults=[d.name for d in policy.defaults],
                     protected=[p.name for p in policy.protected],
                     on_conflict=policy.on_conflict)
    return policy
