"""``env get|set|unset|diff|export``: a task's env, changed only as new revisions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from cli import envfile, prompt, render, taskfile
from cli.app import App, pass_app
from cli.errors import ApiError, UsageProblem
from cli.follow import Follower, by_doctor, resolved
from cli.outcome import Exit
from shared.env.identity import INDEX_NAMES

# The doctor's advice on the env as set: printed from the API's answer already.
ADVICE_RULES = ("doctor.near_miss", "doctor.value")
RESOLVE_PATIENCE = 30.0  # seconds env set waits for the new revision to be resolved
RESTART_NOTE = ("a running container's env cannot change: the run was stopped, and the new "
                "revision is validated, resolved and launched anew")


def revision_line(made: dict[str, Any]) -> str:
    """The new revision, and, when it stopped a run to replace it, why."""
    note = f" ({RESTART_NOTE})" if made.get("how") == "restart" else ""
    return f"task {made['id']}: revision {made['revision']} {made['status']}{note}"


@click.group()
def env() -> None:
    """Read and change a task's env; every change makes a new revision."""


def variables_of(doc: dict[str, Any], as_set: bool) -> tuple[list[dict[str, Any]], str]:
    """The resolved env when there is one (and it is asked for), else the env as set.

    The API's resolved env is what replica 0's container holds, identity included
    (TASK_ID, RANK, WORLD_SIZE, MASTER_ADDR, PET_*...), each variable with its source."""
    if not as_set and doc.get("resolved_env") is not None:
        return doc["resolved_env"], "resolved"
    return [{**v, "source": "user"} for v in doc.get("env") or []], "as set"


def replica_note(doc: dict[str, Any], variables: list[dict[str, Any]]) -> str | None:
    """For a task of several replicas, which of replica 0's values the others hold
    differently (each its own index): the table alone would read as every replica's."""
    replicas = doc.get("replicas")
    if not isinstance(replicas, int) or replicas < 2:
        return None
    held = {v.get("name") for v in variables}
    names = [name for name in INDEX_NAMES if name in held]
    if not names:
        return None
    return (f"replica 0 of {replicas} shown: in replica k, {', '.join(names)} "
            f"{'is' if len(names) == 1 else 'are'} k")


def print_env(app: App, doc: dict[str, Any], variables: list[dict[str, Any]],
              title: str) -> None:
    app.out.print(render.env_table(variables, title=title))
    note = replica_note(doc, variables)
    if note:
        app.out.print(render.line(note))


@env.command("get")
@click.argument("task_id")
@click.option("--as-set", is_flag=True, help="The env as the user set it, not as resolved.")
@click.option("--json", "as_json", is_flag=True, help="Print the variables as JSON.")
@pass_app
def get_env(app: App, task_id: str, as_set: bool, as_json: bool) -> int:
    """The task's env with each variable's source; secrets stay masked."""
    doc = app.client().task(task_id)
    variables, which = variables_of(doc, as_set)
    if as_json:
        click.echo(json.dumps(variables, indent=2, ensure_ascii=False))
        return Exit.SUCCEEDED
    title = (f"task {doc['id']} revision {doc['revision']} ({doc['status']}), env {which}, "
             f"policy version {doc.get('policy_version') or '-'}")
    print_env(app, doc, variables, title)
    return Exit.SUCCEEDED


def parse_assignment(text: str) -> tuple[str, str | None]:
    """``NAME=VALUE`` (the value may hold ``=``), or a bare ``NAME`` to be prompted for."""
    name, sep, value = text.partition("=")
    if not name:
        raise UsageProblem(f"{text!r} is not NAME=VALUE")
    return name, value if sep else None


def assignments(pairs: tuple[str, ...], secrets: tuple[str, ...],
                env_file: Path | None = None) -> list[dict[str, Any]]:
    """The ``set`` list: ``pairs``, then ``env_file``'s variables (a name in both is refused,
    naming it); a secret named without a value is asked for, unechoed."""
    entries: dict[str, dict[str, Any]] = {}
    for name, value in map(parse_assignment, pairs):
        if value is None and name not in secrets:
            raise UsageProblem(f"{name!r} has no value: write {name}=VALUE")
        if name in entries:
            raise UsageProblem(f"{name} is given twice")
        entries[name] = {"name": name, "value": value}
    if env_file is not None:
        # Read as submit --env-file reads it; sent as entries, so --secret can mark them.
        merged = taskfile.merge_env(list(entries.values()), envfile.load(env_file),
                                    "the command line's NAME=VALUE", str(env_file))
        entries = {e["name"]: e for e in merged}
    for name in secrets:
        entry = entries.setdefault(name, {"name": name, "value": None})
        if entry["value"] is None:
            entry["value"] = prompt.secret(f"value of secret {name}")
        entry["secret"] = True
    return list(entries.values())


def print_accepted(app: App, accepted: dict[str, Any], changed: list[str]) -> None:
    """The new revision, the doctor's advice on the env, then, once the revision is
    resolved, the doctor's findings on the variables that changed."""
    app.err.print(render.line(revision_line(accepted)))
    render.print_problems(app.err, "advice:", accepted.get("advice") or [], style="yellow")
    print_revision_findings(app, accepted["id"], accepted["revision"], changed)


def print_revision_findings(app: App, task_id: str, revision: int, names: list[str]) -> None:
    """What the doctor found about ``names`` in the revision, once the policy stage has
    resolved it (waited for at most ``RESOLVE_PATIENCE`` seconds): a script's read of one
    with no value left, one that no script reads, a read a default now satisfies, an
    undocumented name; or that it found nothing about them.  A revision rejected meanwhile
    is said to be, with each error."""
    try:
        doc = Follower(app.client(), app.err).until_resolved(task_id, revision,
                                                             RESOLVE_PATIENCE)
    except ApiError as exc:  # the revision is made: what it was asked is done
        app.err.print(render.block(render.prose(
            f"the doctor's findings on revision {revision} could not be read: {exc}"),
            style="yellow"))
        return
    which = ", ".join(names)
    if doc["revision"] != revision:
        app.err.print(render.line(f"task {task_id}: revision {revision} was superseded by "
                                  f"revision {doc['revision']} before it was resolved"))
        return
    if not resolved(doc):
        app.err.print(render.line(
            f"task {task_id}: revision {revision} is still {doc['status']} after "
            f"{RESOLVE_PATIENCE:g} s: `taskenv show {task_id}` lists the doctor's findings "
            "once it is resolved"))
        return
    wanted = set(names)
    problems = [p for p in [*(doc.get("errors") or []), *(doc.get("warnings") or [])]
                if by_doctor(p) and p.get("rule") not in ADVICE_RULES
                and p.get("variable") in wanted]
    report = doc.get("doctor") or {}
    defaults = [d for d in report.get("from_defaults") or [] if d.get("name") in wanted]
    if problems or defaults:
        app.err.print(render.line(f"doctor, revision {revision} ({which}):",
                                  style="bold yellow"))
        for problem in problems:
            app.err.print(render.block(render.indented(render.problem_line(problem), "  "),
                                       style="yellow"))
        for item in defaults:
            app.err.print(render.block(render.indented(render.prose(item.get("message")),
                                                       "  ")))
    elif report:
        read = ", ".join(str(s.get("path", "")) for s in report.get("scripts") or [])
        app.err.print(render.line(f"doctor, revision {revision}: read {read or 'no script'}; "
                                  f"nothing to say of {which}"))
    if doc["status"] == "rejected":
        render.print_problems(app.err, f"task {task_id} revision {revision} was rejected:",
                              doc.get("errors") or [])


@env.command("set")
@click.argument("task_id")
@click.argument("pairs", nargs=-1, metavar="NAME=VALUE...")
@click.option("--secret", "secrets", multiple=True, metavar="NAME",
              help="Store NAME as a secret; without NAME=VALUE (or the .env file) its value "
                   "is prompted for.")
@click.option("--env-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A .env file whose variables are set too, read as submit --env-file "
                   "reads it (never evaluated); a name also given as NAME=VALUE is refused.")
@pass_app
def set_env(app: App, task_id: str, pairs: tuple[str, ...], secrets: tuple[str, ...],
            env_file: Path | None) -> int:
    """Add or change variables (a new revision)."""
    entries = assignments(pairs, secrets, env_file)
    if not entries:
        raise UsageProblem("nothing to set: give NAME=VALUE, --env-file FILE or --secret NAME")
    print_accepted(app, app.client().patch_env(task_id, entries, []),
                   [e["name"] for e in entries])
    return Exit.SUCCEEDED


@env.command("unset")
@click.argument("task_id")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@pass_app
def unset_env(app: App, task_id: str, names: tuple[str, ...]) -> int:
    """Delete variables (a new revision)."""
    print_accepted(app, app.client().patch_env(task_id, [], list(names)), list(names))
    return Exit.SUCCEEDED


@env.command("diff")
@click.argument("task_id")
@click.argument("old", type=click.IntRange(min=1))
@click.argument("new", type=click.IntRange(min=1))
@pass_app
def diff_env(app: App, task_id: str, old: int, new: int) -> int:
    """What changed in the resolved env from revision OLD to revision NEW."""
    app.out.print(Text(f"task {task_id}: revision {old} -> {new}"))
    for line in render.diff_lines(app.client().env_diff(task_id, old, new)):
        app.out.print(line)
    return Exit.SUCCEEDED


@env.command("export")
@click.argument("task_id")
@click.option("--resolved", is_flag=True,
              help="The resolved env (defaults, protected and platform variables too): "
                   "to read, not to submit again.")
@click.option("--as-set", is_flag=True, hidden=True, help="The default; kept for scripts.")
@pass_app
def export_env(app: App, task_id: str, resolved: bool, as_set: bool) -> int:
    """Print the env as the task set it, as a .env file that `submit --env-file` takes
    back; secrets are left out, each named in a comment."""
    doc = app.client().task(task_id)
    variables, which = variables_of(doc, as_set=not resolved or as_set)
    click.echo(envfile.export(variables, f"task {doc['id']} revision {doc['revision']}, "
                                         f"env {which}"), nl=False)
    return Exit.SUCCEEDED
