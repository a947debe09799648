"""The three stages, as plain functions over the stores.

Each takes a task id and the revision its message was sent for, acts only if
the task is in the state the stage expects, and returns whether the next stage
should be enqueued.  A redelivered or stale message finds the task elsewhere
and does nothing, so no revision is processed twice.  The Celery tasks in
``workers.tasks`` only call these and enqueue.
"""

from __future__ import annotations

import logging

from shared import envlist, states
from shared.envlist import Limits
from shared.errors import TransientError
from shared.policy import platform_env, resolve
from shared.secrets import redact
from shared.store import PolicyStore, TaskStore
from shared.workload import Workload
from workers.launchers.base import Hooks, Launcher

log = logging.getLogger(__name__)


def validate(tasks: TaskStore, limits: Limits, task_id: str, revision: int) -> bool:
    doc = tasks.find(task_id)
    if doc is None or doc["revision"] != revision or doc["state"] != states.PENDING:
        _skip("validate", task_id, revision, doc)
        return False
    problems = envlist.validate(doc["env"], limits)
    if problems:
        tasks.transition(task_id, revision, states.PENDING, states.REJECTED,
                         errors=[p.to_dict() for p in problems])
        log.info("task %s r%s rejected: %d validation problems", task_id, revision,
                 len(problems))
        return False
    advice = [p.to_dict() for p in envlist.advise(doc["env"])]
    return _moved(tasks.transition(task_id, revision, states.PENDING, states.VALIDATED,
                                   warnings=advice),
                  "validate", task_id, revision)


def apply_policy(tasks: TaskStore, policies: PolicyStore, task_id: str, revision: int) -> bool:
    doc = tasks.find(task_id)
    if doc is None or doc["revision"] != revision or doc["state"] != states.VALIDATED:
        _skip("policy", task_id, revision, doc)
        return False
    policy = policies.current()
    result = resolve(envlist.parse(doc["env"]), policy,
                     platform_env(task_id, doc["name"], revision, policy.version))
    common = {"policy_version": policy.version,
              "warnings": doc["warnings"] + [w.to_dict() for w in result.warnings]}
    if not result.ok:
        tasks.transition(task_id, revision, states.VALIDATED, states.REJECTED,
                         errors=[e.to_dict() for e in result.errors], **common)
        log.info("task %s r%s rejected by policy v%s", task_id, revision, policy.version)
        return False
    moved = tasks.transition(task_id, revision, states.VALIDATED, states.RESOLVED,
                             resolved=[v.to_dict() for v in result.variables], **common)
    return _moved(moved, "policy", task_id, revision)


def launch(tasks: TaskStore, launcher: Launcher, task_id: str, revision: int) -> None:
    doc = tasks.transition(task_id, revision, states.RESOLVED, states.LAUNCHING)
    if doc is None:
        _skip("launch", task_id, revision, tasks.find(task_id))
        return
    workload = Workload.from_doc(doc)
    secrets = [v.value for v in workload.env if v.secret]
    hooks = Hooks(
        started=lambda: _started(tasks, task_id, revision),
        log=lambda text: tasks.append_log(task_id, revision, redact(text, secrets)),
    )
    try:
        outcome = launcher.launch(workload, hooks)
    except TransientError:
        raise  # the Celery task retries; the revision stays ``launching`` meanwhile
    except Exception as exc:
        log.exception("task %s r%s: launcher %s failed", task_id, revision, launcher.name)
        outcome_state, reason = states.FAILED, f"launcher {launcher.name}: {exc}"
        tasks.transition(task_id, revision, {states.LAUNCHING, states.RUNNING},
                         outcome_state, reason=reason)
        return
    record_outcome(tasks, task_id, revision, outcome.state, outcome.exit_code, outcome.reason)


def record_outcome(tasks: TaskStore, task_id: str, revision: int, state: str,
                   exit_code: int | None, reason: str | None) -> None:
    if state == states.RUNNING:
        _started(tasks, task_id, revision)
        return
    tasks.transition(task_id, revision, {states.LAUNCHING, states.RUNNING}, state,
                     exit_code=exit_code, reason=reason)
    log.info("task %s r%s %s (exit code %s)", task_id, revision, state, exit_code)


def _started(tasks: TaskStore, task_id: str, revision: int) -> None:
    tasks.transition(task_id, revision, states.LAUNCHING, states.RUNNING)


def _moved(doc: object, stage: str, task_id: str, revision: int) -> bool:
    if doc is None:
        log.info("%s: task %s r%s changed under us; leaving it", stage, task_id, revision)
        return False
    return True


def _skip(stage: str, task_id: str, revision: int, doc: dict | None) -> None:
    where = "gone" if doc is None else f"r{doc['revision']} {doc['state']}"
    log.info("%s: task %s r%s is %s; duplicate or stale message ignored",
             stage, task_id, revision, where)
