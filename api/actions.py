"""What a caller can do to tasks and the policy, shared by the JSON API and the web pages.

Each function takes the services, the caller (owner and visibility scope) and
plain data; it writes to Redis first and enqueues after, and records an audit
entry naming the variables it touched (never their values).
"""

from __future__ import annotations

import hmac
import time
import uuid
from typing import Any

import marshmallow as ma

from api import project_actions
from shared.access.projects import CHANGE
from shared.access.quotas import never_admitted, user
from shared.derived_keys import derived_keys
from shared.doctor import advice as doctor_advice
from shared.doctor.checkup import Doctor
from shared.env import envfile, envlist
from shared.env.identity import MASTER_PORT, PET_MASTER_PORT, Group
from shared.errors import (
    BadRequest,
    EnvInvalid,
    Forbidden,
    NotFound,
    PolicyConflict,
    PolicyInvalid,
    PreconditionFailed,
    Problem,
    ResourcesInvalid,
    StateConflict,
)
from shared.policy.model import Policy, check_policy
from shared.policy.scope_checks import ProjectConflict
from shared.secrets import masked
from shared.task import files as task_files
from shared.task import manifest, records, resolution, revisions, runtimes, states
from shared.task.limits import (
    gpu_problems,
    host_capacity,
    one_host_problems,
    platform_maxima,
    resource_problems,
)
from shared.task.resolution import decide_policy, decide_validation
from shared.task.workload import Workload
from shared.types import NEXT_RUN, RESTART
from workers.services import Services

Doc = dict[str, Any]


def create_task(svc: Services, data: dict[str, Any], actor: str,
                idempotency_key: str | None = None) -> Doc:
    data = {**data, "env": with_env_file(data.get("env", []), data.get("env_file"))}
    data.pop("env_file", None)
    refuse_unrunnable(data.get("resources"), svc, int(data.get("replicas") or 1),
                      image=data.get("image"))
    refuse_unadmittable(svc, data, actor)
    project = svc.projects.for_task(actor, data.get("project"))
    refuse_unstorable(svc, in_project(dict(data), project))
    svc.room.check()  # new work stops short of maxmemory: running tasks keep their room
    fresh = records.new_task(data, actor)
    fresh["digest"] = records.request_digest(data, digest_keys(svc)[0])
    fresh.setdefault("id", uuid.uuid4().hex)  # the audit entry, written with it, names it
    audit = svc.audit.entry(actor, "task.create", fresh["id"],
                            variables=[e.get("name") for e in data["env"]])
    doc, created = svc.tasks.create(in_project(fresh, project), idempotency_key, audit,
                                    svc.quotas.budget(actor))
    if created:
        svc.enqueue(doc["id"], doc["revision"])
    elif not same_request(svc, str(doc.get("digest")), data):
        raise StateConflict(f"Idempotency-Key {idempotency_key!r} was used for a different "
                            f"request (task {doc['id']})")
    return doc


def digest_keys(svc: Services) -> list[bytes]:
    """Keys of the requests' fingerprints: the first signs, each verifies, so a replay
    during a key rotation still matches.  With no secret configured no secret value can
    be stored either, and an unkeyed fingerprint hides nothing."""
    return derived_keys(svc.settings, b"taskenv request fingerprint") or [b""]


def same_request(svc: Services, stored: str, data: Doc) -> bool:
    return any(hmac.compare_digest(stored, records.request_digest(data, key))
               for key in digest_keys(svc))


def refuse_unstorable(svc: Services, doc: Doc, message: str = "the task cannot be stored"
                      ) -> None:
    """Sizes, counts and secret lengths are refused before anything is stored; the
    validation stage checks them again, with the other rules.  So are the task's files
    (their rules are all about what may be kept).  A refusal names every problem of the
    list, the other rules' and the policy's included, as the validation stage would:
    fixing the size must not uncover a second round of problems."""
    file_problems = check_files(svc, doc.get("files") or [], doc["env"])
    if file_problems or envlist.check_storable(doc["env"], svc.limits):
        raise EnvInvalid(message, every_problem(svc, doc) + file_problems)  # capped later


def check_files(svc: Services, files: list[Doc], env: list[Doc]) -> list[Problem]:
    """The files' problems; none may hold the value of one of ``env``'s secrets."""
    secrets = [(str(e.get("name")), e["value"]) for e in env
               if e.get("secret") and isinstance(e.get("value"), str)]
    return task_files.check(files, task_files.FileLimits.from_settings(svc.settings), secrets)


def every_problem(svc: Services, doc: Doc) -> list[Problem]:
    """Every problem of ``doc``'s env under the current policies (uncapped)."""
    task = {"id": resolution.PLACEHOLDER_ID, "revision": 1, **doc}
    return resolution.every_problem(task, svc.policies.chain(doc), svc.limits)


def refuse_unrunnable(resources: Doc | None, svc: Services, replicas: int = 1, *,
                      image: str | None = None) -> None:
    """Resources that are no quantities, or more than a task may ever have (on a backend
    that runs a task's replicas on one host: more than one host has, its replicas
    together; GPUs on a backend that has no way to give them; on a backend of runtime
    directories, an image no admin registered as one), are refused now, all together,
    not left waiting for ever nor run without."""
    backend = svc.backend
    maxima = platform_maxima(svc.settings, one_host=backend.one_host)
    problems = resource_problems(resources, maxima)
    if backend.one_host and not problems:
        problems = one_host_problems(resources, replicas, maxima,
                                     host_capacity(svc.settings)[1])
    problems += gpu_problems(resources, backend, maxima)
    if backend.runtime_dirs:
        problems += runtimes.problems(image, svc.settings)
    if problems:
        raise ResourcesInvalid("the task asks for resources it can never have", problems)


def task_to_read(svc: Services, task_id: str, scope: str | None) -> tuple[Doc, str]:
    """The task and what the caller (``scope``: its owner; None: an admin) may do with it,
    ``change`` or ``read``.  A task it may not even read does not exist for it: 404."""
    doc = svc.tasks.get(task_id)
    access = svc.projects.task_access(doc, scope)
    if access is None:
        raise NotFound(f"no task {task_id}")
    return doc, access


def task_to_change(svc: Services, task_id: str, scope: str | None) -> Doc:
    """The task, if the caller may change it.  Its project's maintainer, who may read it,
    is told why not (403); anyone else finds no such task (404)."""
    doc, access = task_to_read(svc, task_id, scope)
    if access != CHANGE:
        raise Forbidden(f"maintainers of project {doc.get('project')} may read a member's "
                        f"task but not change it: task {task_id} is not yours")
    return doc




def revise_task(svc: Services, task_id: str, actor: str, scope: str | None,
                set_: list[dict[str, Any]], unset: list[str], action: str,
                extra: Doc | None = None, *, apply: str = RESTART,
                if_match: int | None = None, files: list[Doc] | None = None) -> Doc:
    """A new revision with the env changed: validated, resolved and launched anew.

    ``extra``: per-revision fields the new revision starts with (a rerun's origin).
    On a launching or running task, ``apply`` says how: ``restart`` stops the run and
    launches the new revision once it is gone; ``next-run`` (on any task) only keeps
    the changed env as the revision's ``next_env``, for the next rerun.
    ``files``: the new revision's files, replacing the current ones (None: kept).
    """
    doc = task_to_change(svc, task_id, scope)  # before anything else
    check_match(doc, if_match)
    svc.room.check()
    if files is not None and apply == NEXT_RUN:
        raise BadRequest("files take effect with a new revision: send them with "
                         "apply: restart, not next-run")
    # The files the new revision will have (given, or kept) against every secret it may
    # then hold: a secret set now must not already sit in clear in a kept file.
    problems = check_files(svc, doc.get("files") or [] if files is None else files,
                           [*doc["env"], *set_])
    if problems:
        raise EnvInvalid("the files cannot be stored", problems)
    if files is not None:
        extra = {**(extra or {}), "files": task_files.stored(files)}
    if apply == NEXT_RUN:
        return _keep_for_next_run(svc, task_id, actor, set_, unset, action, if_match)
    svc.quotas.check_revision(doc)
    if doc["state"] in states.LAUNCHED:
        return _restart(svc, doc, actor, set_, unset, action, if_match, extra)

    def change(doc: Doc) -> Doc:
        check_match(doc, if_match)
        if doc["state"] in states.LAUNCHED:  # started meanwhile: restart it instead
            raise _StartedMeanwhile
        env = _patched(svc, doc, set_, unset, action)
        # Judged again inside the compare-and-set: changes of one task racing each other
        # are each counted on the revision they would follow.  (A restart is judged once,
        # before it stops anything: a refusal after the stop would end the run for nothing.)
        svc.quotas.check_revision(doc)
        waits_for = records.restart_waits_for(doc)
        if waits_for is not None:  # restarting: this one starts once that one has stopped
            return _next_revision(doc, env, actor, action, extra, apply=RESTART,
                                  replaces=waits_for)
        return _next_revision(doc, env, actor, action, extra)

    try:
        new = svc.tasks.update(task_id, change, budget=svc.quotas.quotas)
    except _StartedMeanwhile:
        return revise_task(svc, task_id, actor, scope, set_, unset, action, extra,
                           apply=apply, if_match=if_match, files=files)
    assert new is not None  # ``change`` never declines: it returns a revision or raises
    _audit_revision(svc, actor, action, new, set_, unset)
    waits_for = records.restart_waits_for(new)
    if waits_for is None:
        svc.enqueue(new["id"], new["revision"])
    else:  # the stop's handler starts the newest revision once the old workload is gone
        svc.send("cancel", task_id, waits_for)
    return new


class _StartedMeanwhile(Exception):
    """The task was launched between reading it and changing it: restart it instead."""


def check_match(doc: Doc, if_match: int | None) -> None:
    """``If-Match: <revision>``: refuse a change made against a revision since replaced."""
    if if_match is not None and doc["revision"] != if_match:
        raise PreconditionFailed(f"task {doc['id']} is at revision {doc['revision']}, not "
                                 f"{if_match}: read it again before changing it",
                                 doc["revision"])


def _patched(svc: Services, doc: Doc, set_: list[Doc], unset: list[str],
             action: str) -> list[Doc]:
    """The env with the change applied: on top of ``next_env`` if one is kept (a rerun
    names its whole env against the revision's own)."""
    base = doc["env"] if action == "task.rerun" else doc.get("next_env") or doc["env"]
    env, problems = records.patch_env(base, set_, unset)
    if envlist.check_storable(env, svc.limits):  # before anything is written
        problems += every_problem(svc, {**doc, "env": env})
    if problems:
        raise EnvInvalid("the change cannot be applied", problems)
    return env


def _next_revision(doc: Doc, env: list[Doc], actor: str, action: str,
                   extra: Doc | None, **fields: Any) -> Doc:
    doc.pop("next_env", None)  # a new revision uses it up
    return records.new_revision(doc, env, actor, action.rpartition(".")[2]) | (extra or {}) \
        | fields


def _audit_revision(svc: Services, actor: str, action: str, doc: Doc, set_: list[Doc],
                    unset: list[str], **more: Any) -> None:
    svc.audit.record(actor, action, doc["id"], revision=doc["revision"],
                     set=[e.get("name") for e in set_], unset=unset, **more)


def _keep_for_next_run(svc: Services, task_id: str, actor: str, set_: list[Doc],
                       unset: list[str], action: str, if_match: int | None) -> Doc:
    """Keep the changed env for the next rerun; whatever runs carries on untouched."""
    def change(doc: Doc) -> Doc:
        check_match(doc, if_match)
        return {**doc, "next_env": _patched(svc, doc, set_, unset, action)}

    doc = svc.tasks.update(task_id, change, budget=svc.quotas.quotas)
    assert doc is not None
    _audit_revision(svc, actor, action, doc, set_, unset, apply=NEXT_RUN)
    return doc


def _restart(svc: Services, doc: Doc, actor: str, set_: list[Doc], unset: list[str],
             action: str, if_match: int | None, extra: Doc | None = None) -> Doc:
    """Cancel the running revision n, store n+1 as ``pending`` (``apply: restart``) and
    have the launch workers stop n: they enqueue n+1 once its workload is gone, so two
    containers of the task never run at once."""
    task_id = doc["id"]
    # Refuse a bad change before stopping anything.
    env = _patched(svc, doc, set_, unset, action)
    old = _cancel_revision(svc, doc, actor, states.LAUNCHED,
                           f"restarted as revision {doc['revision'] + 1}")
    if old is None:  # it ended or changed meanwhile: decide again from where it is now
        return revise_task(svc, task_id, actor, None, set_, unset, action, extra,
                           if_match=if_match)

    def change(current: Doc) -> Doc:
        if current["revision"] != old["revision"] or current["state"] != states.CANCELLED:
            raise _StartedMeanwhile  # another change came first: go on from it
        return _next_revision(current, env, actor, "task.restart", extra, apply=RESTART)

    try:
        new = svc.tasks.update(task_id, change, budget=svc.quotas.quotas)
    except _StartedMeanwhile:
        svc.send("cancel", task_id, old["revision"])  # the run this call stopped
        return revise_task(svc, task_id, actor, None, set_, unset, action, extra,
                           if_match=if_match)
    assert new is not None
    _audit_revision(svc, actor, action, new, set_, unset, apply=RESTART)
    svc.send("cancel", task_id, old["revision"])
    return new


def _cancel_revision(svc: Services, doc: Doc, actor: str, expected: frozenset[str],
                     reason: str) -> Doc | None:
    """Compare-and-set the current revision to ``cancelled``; None if it moved first."""
    return svc.tasks.transition(doc["id"], doc["revision"], set(expected), states.CANCELLED,
                                cancelled_by=actor, cancelled_at=time.time(), reason=reason)


def cancel_task(svc: Services, task_id: str, actor: str, scope: str | None,
                if_match: int | None = None) -> tuple[Doc, bool]:
    """Cancel the current revision wherever it is; True if this call cancelled it.

    A revision not yet launched never will be: each stage advances by compare-and-set
    and finds it ``cancelled``.  A launched one is stopped by the launch workers.
    """
    while True:
        doc = task_to_change(svc, task_id, scope)
        check_match(doc, if_match)
        if doc["state"] == states.CANCELLED:
            return doc, False
        if doc["state"] in states.FINAL:
            raise StateConflict(f"task {task_id} has already ended: it is {doc['state']}")
        done = _cancel_revision(svc, doc, actor, states.ACTIVE, f"cancelled by {actor}")
        if done is not None:
            break
    svc.audit.record(actor, "task.cancel", task_id, revision=done["revision"],
                     was=doc["state"])
    if doc["state"] in states.LAUNCHED:
        svc.send("cancel", task_id, done["revision"])
    return done, True


def with_env_file(env: list[Doc], text: str | None) -> list[Doc]:
    """``env`` and the variables of a pasted or uploaded .env text, checked together."""
    if text is None:
        return env
    from_file, problems = envfile.parse(text)
    problems += envfile.combine(env, from_file)
    if problems:
        raise EnvInvalid("the .env text cannot be used", problems)
    return [*env, *from_file]


def rerun_task(svc: Services, task_id: str, actor: str, scope: str | None,
               revision: int | None = None, pin: bool = False,
               if_match: int | None = None) -> Doc:
    """Run a revision (the current one by default) again, as a new revision.

    Without ``pin`` its env as set is resolved against today's policy; with ``pin`` its
    resolved values are kept where today's policy allows them.  Either way the policy
    stage reports what drifted from that revision.
    """
    current = task_to_change(svc, task_id, scope)
    svc.room.check()
    base = revision or current["revision"]
    earlier = svc.tasks.revision(task_id, base)
    env, defaults = _pinned(svc, earlier, current.get("project")) if pin else (
        earlier["env"], [])
    if revision is None and not pin and current.get("next_env") is not None:
        env = current["next_env"]  # a change kept for the next run (apply: next-run)
    set_, unset = _replacing(current["env"], env)
    origin: Doc = {"rerun_of": base, **({"pinned_from": base, "pinned_defaults": defaults}
                                        if pin else {})}
    # Rerun as it was: the files of the revision rerun, whatever came since.
    return revise_task(svc, task_id, actor, scope, set_, unset, "task.rerun", origin,
                       if_match=if_match, files=earlier.get("files") or [])


def _pinned(svc: Services, earlier: Doc, project: str | None) -> tuple[list[Doc], list[Doc]]:
    if earlier.get("resolved") is None:
        raise StateConflict(f"revision {earlier['revision']} was never resolved "
                            f"({earlier.get('state')}): it has no values to pin; rerun it "
                            "without pin")
    # What any scope protects today is always today's value, as for a new task.
    protected_now = svc.policies.chain({"project": project}).protected_names()
    return (revisions.pinned_env(earlier["resolved"], protected_now),
            revisions.pinned_defaults(earlier["resolved"], protected_now))


def _replacing(current: list[Doc], target: list[Doc]) -> tuple[list[Doc], list[str]]:
    """The ``set`` and ``unset`` that turn env ``current`` into ``target``."""
    def shape(e: Doc) -> tuple[Any, Any, bool]:
        return e.get("name"), e.get("value"), bool(e.get("secret"))

    before = {e.get("name"): shape(e) for e in current}
    wanted = {e.get("name") for e in target}
    set_ = [dict(e) for e in target if before.get(e.get("name")) != shape(e)]
    return set_, [str(n) for n in before if n not in wanted]


def resolved_now(svc: Services, doc: Doc) -> Doc:
    """The record as the workers would resolve it now, for a revision not yet resolved."""
    chain = svc.policies.chain(doc)
    state, checked = decide_validation(doc, svc.limits, chain)
    if state == states.REJECTED:
        raise EnvInvalid("the task's env is not valid",
                         [Problem(**e) for e in checked["errors"]])
    state, decided = decide_policy({**doc, **checked}, chain, hooks=svc.hooks)
    if state == states.REJECTED:
        raise PolicyConflict("the policy refuses the task's env",
                             [Problem(**e) for e in decided["errors"]])
    return {**doc, **decided}


def group_problems(svc: Services, data: Doc, owner: str | None) -> list[Problem]:
    """Why a task of this many replicas could never run whole, every reason at once: over
    ``TASKENV_MAX_REPLICAS``, over the local host's run slots (its replicas start
    together), or over a quota that counts its replicas even alone."""
    replicas = int(data.get("replicas") or 1)
    limit = svc.settings.max_replicas
    problems = []
    if replicas > limit:
        problems.append(Problem(
            rule="replicas.max", field="replicas", limit=limit,
            message=f"replicas: {replicas} asked for; at most {limit} are allowed per task "
                    "(TASKENV_MAX_REPLICAS)"))
    cap = svc.settings.local_max_running
    if svc.backend.one_host and 0 < cap < replicas:
        problems.append(Problem(
            rule="replicas.host_slots", field="replicas", limit=cap,
            message=f"replicas: {replicas} asked for; the local launcher starts a task's "
                    f"replicas together, and a host runs at most {cap} at once "
                    "(TASKENV_LOCAL_MAX_RUNNING)"))
    problems += node_problems(svc, replicas, int(data.get("nodes") or 1))
    if owner is not None:
        problems += never_admitted(svc.quotas.quotas, user(owner), replicas)
    return problems


def node_problems(svc: Services, replicas: int, nodes: int) -> list[Problem]:
    """Why the replicas cannot be spread over ``nodes`` nodes, every reason at once."""
    if nodes == 1:
        return []
    problems = []
    if svc.backend.nodes_master is None:
        problems.append(Problem(
            rule="nodes.backend", field="nodes", limit=1,
            message=f"nodes: {nodes} asked for; the {svc.backend.name} launcher does not "
                    "place a task's replicas on nodes of its choosing: at most 1"))
    if nodes > replicas:
        problems.append(Problem(
            rule="nodes.replicas", field="nodes", limit=replicas,
            message=f"nodes: {nodes} asked for; a task of {replicas} replica(s) runs on at "
                    f"most {replicas} node(s), one replica or more on each"))
    elif replicas % nodes:
        problems.append(Problem(
            rule="nodes.divides", field="nodes", limit=replicas,
            message=f"nodes: {nodes} asked for; replicas ({replicas}) must be a multiple of "
                    "nodes, so that each node runs as many replicas"))
    return problems


# Kubernetes names replica 0 after the task's Job, which a preview's task does not have yet.
PREVIEW_JOB = "<the task's job>"


def replica_zero(svc: Services, replicas: int, job: str, nodes: int = 1) -> str:
    """Where replica 0 listens, as the backend gives it (``job``: the task's Job name).

    A task of one replica is a world of one on loopback on every backend; so are the
    replicas podman runs in one pod and the local launcher in one network."""
    return svc.backend.replica_zero_for(replicas, job, nodes)


def preview_group(svc: Services, data: Doc) -> Group:
    """The group a new task would run as, with replica 0's address as its launcher gives it."""
    replicas = int(data.get("replicas") or 1)
    return Group(replicas, int(data.get("procs_per_replica") or 1),
                 replica_zero(svc, replicas, PREVIEW_JOB, int(data.get("nodes") or 1)))


def container_env(svc: Services, task: Doc, rev: Doc) -> list[Doc] | None:
    """Revision ``rev``'s resolved env as replica 0's container holds it, secrets masked:
    with its identity (RANK, MASTER_ADDR, PET_*...), which launchers add at launch and the
    record does not keep, so a reader sees every variable the container gets, as the
    preview shows them.  None while the revision is not resolved."""
    resolved = rev.get("resolved")
    if resolved is None:
        return None
    replicas = int(task.get("replicas") or 1)
    job = manifest.job_name(Workload.from_doc({**task, **rev})) if replicas > 1 else ""
    group = Group(replicas, int(task.get("procs_per_replica") or 1),
                  replica_zero(svc, replicas, job, int(task.get("nodes") or 1)))
    shown = with_node_chosen(svc, resolution.with_identity(list(resolved), group, 0), group)
    port = svc.backend.master_port_shown
    if replicas > 1 and port is not None:
        shown = [{**v, "value": port} if v["name"] in (MASTER_PORT, PET_MASTER_PORT)
                 else v for v in shown]
    return [masked(v) for v in shown]


# What a variable the backend chooses on the node shows before any node has chosen it.
NODE_CHOSEN = "(chosen on each node: the interface that routes to MASTER_ADDR)"


def with_node_chosen(svc: Services, shown: list[Doc], group: Group) -> list[Doc]:
    """The env as shown, with the variables the backend sets on the node (source
    ``node``) for a task of several replicas, where the env does not set them."""
    if group.replicas == 1:
        return shown
    names = {v["name"] for v in shown}
    return shown + [{"name": name, "value": NODE_CHOSEN, "source": "node"}
                    for name in svc.backend.node_chosen if name not in names]


def refuse_unadmittable(svc: Services, data: Doc, owner: str) -> None:
    problems = group_problems(svc, data, owner)
    if problems:
        raise BadRequest("the task's replicas can never be admitted whole", problems)


def in_project(doc: Doc, project: str | None) -> Doc:
    """A new record in ``project``; a task in no project has no such field at all."""
    return doc if project is None else {**doc, "project": project}


def preview(svc: Services, data: Doc, owner: str | None = None, is_admin: bool = False) -> Doc:
    """What a task with this env would get, secrets masked; nothing is stored or launched.

    The project is chosen as for a new task of ``owner``; with the task's ``resources``
    and ``image``, conditional entries apply as they would to it.
    """
    version = data["policy_version"]
    project = (svc.projects.for_task(owner, data.get("project"), is_admin)
               if owner is not None else data.get("project"))
    task = {"project": project, "resources": data.get("resources"), "image": data.get("image"),
            "files": data.get("files") or [], "strict_env": data.get("strict_env", False),
            "replicas": data.get("replicas"), "procs_per_replica": data.get("procs_per_replica"),
            "nodes": data.get("nodes")}
    chain = svc.policies.chain(task, None if version is None else svc.policies.get(version))
    doctor = Doctor(svc.catalog.applying(chain))
    shown = resolution.preview(data["env"], data["name"], chain, svc.limits, task,
                               svc.hooks, doctor=doctor, group=preview_group(svc, data))
    file_problems = check_files(svc, data.get("files") or [], data["env"])
    # Every problem at once: the replicas' first (the request's shape), then the env's, then
    # the files'.
    group = group_problems(svc, data, owner)
    if group or file_problems:
        errors = [Problem(**e) for e in shown["errors"] if e["rule"] != "errors.truncated"]
        shown.update(ok=False, errors=[p.to_dict() for p in
                                       envlist.capped(group + errors + file_problems)])
    variables = shown["variables"]
    if variables:
        variables = with_node_chosen(svc, variables, preview_group(svc, data))
    return {**shown, "variables": [masked(v) for v in variables]}


def advice(svc: Services, doc: Doc) -> list[dict[str, Any]]:
    """The doctor's advice on a task's own variables, for the answer to a creation or a
    change (the policy stage records it with the revision's warnings); secrets' values
    are never looked at."""
    env = [e for e in doc.get("env") or []
           if isinstance(e.get("name"), str) and isinstance(e.get("value"), str)]
    _, catalog = svc.catalog.applying_to(doc, svc.policies)
    return [p.to_dict() for p in envlist.capped(
        doctor_advice.advise(envlist.parse(env), catalog))]


def save_policy(svc: Services, data: Doc, actor: str,
                shape: ma.Schema | None = None) -> tuple[Policy, list[ProjectConflict]]:
    """Check the policy's rules, store it as a new version and audit it; with it, the
    projects whose current policy it now refuses.

    The rules come first: they name the variable.  ``shape`` then loads the data with
    the API's schema, for a caller whose data has not been through it (the page).
    Tasks already resolved keep the version they were resolved with.  A project policy
    in conflict does not stop the save (an admin must be able to tighten the platform);
    the audit entry names those projects and variables, never a value.
    """
    problems = check_policy(data, svc.limits)
    if problems:
        raise PolicyInvalid("the policy cannot be saved", problems)
    if shape is not None:
        data = shape.load(data)
    policy: Policy = svc.policies.put(Policy.from_dict(
        {**data, "author": actor, "created_at": time.time()}))
    conflicts = project_actions.platform_conflicts(svc, policy)
    svc.audit.record(actor, "policy.put", f"v{policy.version}",
                     defaults=[d.name for d in policy.defaults],
                     protected=[p.name for p in policy.protected],
                     on_conflict=policy.on_conflict,
                     project_conflicts=[{"project": c.project, "variables": c.variables()}
                                        for c in conflicts])
    return policy, conflicts


# --- revisions ---------------------------------------------------------------------------

def revision_of(services: Services, doc: Doc, number: int) -> Doc:
    """Revision ``number`` of the task ``doc``, a task the caller may read."""
    if not 1 <= number <= doc["revision"]:
        raise NotFound(f"task {doc['id']} has no revision {number}")
    return services.tasks.revision(doc["id"], number)


def compared(rev: Doc, of: str) -> list[Doc]:
    """The variables a diff compares: the resolved env, or the env as the user set it."""
    if of == "env":
        return [{**e, "source": "user"} for e in rev.get("env") or []]
    if rev.get("resolved") is None:
        raise StateConflict(f"revision {rev['revision']} has no resolved env "
                            f"({rev.get('state')}): compare the envs as set with ?of=env")
    return list(rev["resolved"])


def env_diff(services: Services, doc: Doc, old: int, new: int, of: str) -> Doc:
    """What changed from revision ``old`` to ``new`` of ``doc``, a task the caller may read."""
    a, b = revision_of(services, doc, old), revision_of(services, doc, new)
    found = revisions.diff(compared(a, of), compared(b, of))
    found["changed"] = [{**c, "source": c["new_source"]} for c in found["changed"]]
    return {"from": old, "to": new, "of": of, **found,
            "files": task_files.diff(a.get("files") or [], b.get("files") or [])}
