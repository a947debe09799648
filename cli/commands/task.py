"""One task: ``show``, ``cancel``, ``rerun``, ``revisions`` and ``diff``."""

from __future__ import annotations

import json

import click
from rich.text import Text

from cli import render
from cli.app import App, pass_app
from cli.commands.env import print_env, revision_line, variables_of
from cli.commands.tasks import follow_to_end
from cli.outcome import TABLE, Exit


@click.command()
@click.argument("task_id")
@click.option("--revision", type=click.IntRange(min=1), help="Another revision than the latest.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's answer as JSON.")
@pass_app
def show(app: App, task_id: str, revision: int | None, as_json: bool) -> int:
    """A task's status, revision and outcome, its errors and warnings, and its resolved
    env with each variable's source (secrets masked)."""
    client = app.client()
    doc = client.task(task_id)
    if revision is not None and revision != doc["revision"]:
        old = client.revision(task_id, revision)
        doc = {**doc, **old, "status": old.get("state"), "revision": revision}
    if as_json:
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return Exit.SUCCEEDED
    app.out.print(render.task_facts(doc))
    render.print_problems(app.out, "errors:", doc.get("errors") or [])
    render.print_problems(app.out, "warnings:", doc.get("warnings") or [], style="yellow")
    render.print_doctor(app.out, doc.get("doctor"))
    variables, which = variables_of(doc, as_set=False)
    print_env(app, doc, variables, f"env {which}")
    return Exit.SUCCEEDED


@click.command()
@click.argument("task_id")
@pass_app
def cancel(app: App, task_id: str) -> int:
    """Cancel a task: what runs is stopped, a revision not yet launched never starts."""
    done = app.client().cancel(task_id)
    app.err.print(render.line(f"task {done['id']} revision {done['revision']}: "
                              f"{done['status']} (by {done.get('cancelled_by') or '-'})"))
    return Exit.SUCCEEDED


@click.command(epilog="\b\n" + TABLE)
@click.argument("task_id")
@click.option("--revision", type=click.IntRange(min=1),
              help="The revision to run again; the current one by default.")
@click.option("--pin", is_flag=True,
              help="Keep that revision's resolved values where today's policy allows them "
                   "(else its env as set is resolved anew).")
@click.option("--follow", is_flag=True, help="Print the new revision's output as it runs; "
                                             "exit with its outcome.")
@pass_app
def rerun(app: App, task_id: str, revision: int | None, pin: bool, follow: bool) -> int:
    """Run a revision again as a new revision, against today's policy."""
    made = app.client().rerun(task_id, revision, pin)
    app.err.print(render.line(revision_line(made)))
    if follow:
        return follow_to_end(app, made["id"], made["revision"])
    return Exit.SUCCEEDED


@click.command()
@click.argument("task_id")
@pass_app
def revisions(app: App, task_id: str) -> int:
    """Every revision of a task: how it was made, by whom, when, and how it ended."""
    items = app.client().revisions(task_id)
    app.out.print(render.revisions_table(items))
    return Exit.SUCCEEDED


@click.command()
@click.argument("task_id")
@click.argument("old", type=click.IntRange(min=1))
@click.argument("new", type=click.IntRange(min=1))
@click.option("--as-set", is_flag=True, help="Compare the envs as set, not as resolved.")
@pass_app
def diff(app: App, task_id: str, old: int, new: int, as_set: bool) -> int:
    """What changed in the env from revision OLD to revision NEW (a secret only as
    changed or not)."""
    found = app.client().env_diff(task_id, old, new, "env" if as_set else "resolved")
    app.out.print(Text(f"task {task_id}: revision {old} -> {new}"))
    for line in render.diff_lines(found):
        app.out.print(line)
    return Exit.SUCCEEDED
