"""Thin Celery tasks: load the context, call the stage, hand off to the next queue."""

from __future__ import annotations

from workers import stages
from workers.celery_app import app
from workers.context import current


@app.task(name="taskenv.validate")
def validate(task_id: str, revision: int) -> None:
    ctx = current()
    if stages.validate(ctx.tasks, ctx.limits, task_id, revision):
        apply_policy.delay(task_id, revision)


@app.task(name="taskenv.policy")
def apply_policy(task_id: str, revision: int) -> None:
    ctx = current()
    if stages.apply_policy(ctx.tasks, ctx.policies, task_id, revision):
        launch.delay(task_id, revision)


@app.task(name="taskenv.launch")
def launch(task_id: str, revision: int) -> None:
    ctx = current()
    stages.launch(ctx.tasks, ctx.launcher, task_id, revision)
