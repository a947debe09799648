"""``submit``, ``logs``, ``tasks`` and ``preview``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from cli import render, taskfile
from cli.app import App, pass_app
from cli.errors import ApiError
from cli.follow import Follower, by_doctor
from cli.outcome import TABLE, Exit, for_status

existing_file = click.Path(exists=True, dir_okay=False, path_type=Path)


def log_writer() -> Callable[[str], None]:
    """Writes a task's output to stdout as it comes, chunk by chunk (``render.LogOutput``:
    the platform's own lines told from the steps')."""
    shown = render.LogOutput(terminal=sys.stdout.isatty())

    def write(text: str) -> None:
        # color=True: the styles are ours alone, only written to a terminal.
        click.echo(shown(text), nl=False, color=True)

    return write


def print_findings(app: App, doc: dict[str, Any]) -> None:
    """The doctor's findings on a resolved revision, on stderr: its report on the scripts,
    and its warnings of the doctor's rules (a read with no value, a variable no script
    reads, an undocumented name)."""
    render.print_doctor(app.err, doc.get("doctor"))
    render.print_problems(app.err, "warnings:", filter(by_doctor, doc.get("warnings") or []),
                          style="yellow")


def report(app: App, doc: dict[str, Any], findings_shown: bool = False) -> Exit:
    """The outcome of a final revision, on stderr; its exit code.  ``findings_shown``: the
    doctor's findings were printed when it was resolved, and are not again."""
    if not findings_shown:
        render.print_doctor(app.err, doc.get("doctor"))
    warnings = [w for w in doc.get("warnings") or [] if not (findings_shown and by_doctor(w))]
    render.print_problems(app.err, "warnings:", warnings, style="yellow")
    status = doc["status"]
    if status == "rejected":
        render.print_problems(app.err, f"task {doc['id']} was rejected:", doc.get("errors") or [])
        return Exit.REJECTED
    detail = [f"exit code {doc['exit_code']}" if doc.get("exit_code") is not None else "",
              str(doc.get("reason") or "")]
    extra = "; ".join(d for d in detail if d)
    style = "green" if status == "succeeded" else "red"
    said = f"task {render.shown(doc['id'])} {render.shown(status)}"
    app.err.print(render.block(render.prose(said + (f": {extra}" if extra else "")),
                               style=f"bold {style}"))
    return for_status(status)


def follow_to_end(app: App, task_id: str, revision: int, replica: int | None = None) -> Exit:
    """Stream the revision's output (one replica's, or all) while it runs (states on
    stderr), and a later revision's that supersedes it, until the task is final; each
    revision's doctor's findings once it is resolved, before its output.  Exit with the
    final revision's outcome."""
    told: set[int] = set()

    def resolved(doc: dict[str, Any]) -> None:
        print_findings(app, doc)
        told.add(doc["revision"])

    doc = Follower(app.client(), app.err).stream(task_id, revision, log_writer(), replica,
                                                 on_resolved=resolved)
    return report(app, doc, findings_shown=doc["revision"] in told)


SUBMIT_HELP = f"""Create a task from TASK_FILE, a YAML file holding the body of POST
/api/v1/tasks: these keys, and no other (a key it does not know is refused, exit code 4).

\b
{taskfile.keys_help()}

Without --follow, prints the new task's id and exits 0 once the API accepted it.
An env that sets a variable the platform sets per replica (RANK, MASTER_ADDR, ...)
is refused here, before anything is submitted (exit code 2).  A malformed task file
exits 4, whether the CLI or the API finds it."""


@click.command(help=SUBMIT_HELP, epilog="\b\n" + TABLE)
@click.argument("task_file", type=existing_file)
@click.option("--env-file", type=existing_file,
              help="A .env file whose variables are added to the task's env (never evaluated).")
@click.option("--secret", "secrets", multiple=True, metavar="NAME",
              help="Store this variable as a secret (repeatable).")
@click.option("--follow", is_flag=True,
              help="Print the task's output as it runs (states on stderr) until it is final; "
                   "exit with its outcome.")
@click.option("--idempotency-key", help="Retries with the same key return the same task.")
@click.option("--replicas", type=click.IntRange(min=1),
              help="Run this many replicas, each with its own RANK (overrides the file's).")
@click.option("--procs-per-replica", type=click.IntRange(min=1),
              help="Processes torchrun starts in each replica (overrides the file's).")
@click.option("--nodes", type=click.IntRange(min=1),
              help="Spread the replicas over this many nodes, as many on each (Slurm; "
                   "overrides the file's).")
@pass_app
def submit(app: App, task_file: Path, env_file: Path | None, secrets: tuple[str, ...],
           follow: bool, idempotency_key: str | None, replicas: int | None,
           procs_per_replica: int | None, nodes: int | None) -> int:
    # (its help is SUBMIT_HELP: the task file's keys come from taskfile.KEYS)
    body = group_options(taskfile.body(task_file, env_file, secrets), replicas,
                         procs_per_replica, nodes)
    problems = taskfile.identity_problems(body["env"])
    if problems:
        render.print_problems(app.err, "the env would be rejected:", problems)
        return Exit.REJECTED
    with taskfile.shape_checked_by_the_api(task_file):
        accepted = app.client().create_task(body, idempotency_key)
    render.print_problems(app.err, "advice:", accepted.get("advice") or [], style="yellow")
    if not follow:
        click.echo(render.shown(accepted["id"]))
        return Exit.SUCCEEDED
    app.err.print(render.line(f"task {accepted['id']} accepted (revision "
                              f"{accepted['revision']})"))
    return follow_to_end(app, accepted["id"], accepted["revision"])


def group_options(body: dict[str, Any], replicas: int | None,
                  procs_per_replica: int | None, nodes: int | None = None) -> dict[str, Any]:
    """The body with the command line's replicas, which win over the file's."""
    given = {"replicas": replicas, "procs_per_replica": procs_per_replica, "nodes": nodes}
    return {**body, **{k: v for k, v in given.items() if v is not None}}


@click.command()
@click.argument("task_id")
@click.option("--revision", type=click.IntRange(min=1), help="Another revision than the latest.")
@click.option("--replica", type=click.IntRange(min=0),
              help="Only this replica's output (a task of several prefixes each line with "
                   "[replica k]).")
@click.option("--follow", is_flag=True,
              help="Keep printing new output until the task is final (a revision an env "
                   "change or a rerun supersedes is followed into the new one).")
@pass_app
def logs(app: App, task_id: str, revision: int | None, replica: int | None,
         follow: bool) -> int:
    """Print the output of a task's steps (secret values appear as [secret])."""
    if not follow:
        log_writer()(app.client().logs(task_id, revision, replica))
        return Exit.SUCCEEDED
    revision = revision or Follower(app.client(), app.err).task(task_id)["revision"]
    return follow_to_end(app, task_id, revision, replica)


def all_tasks(app: App, status: str | None) -> list[dict[str, Any]]:
    """Every page, following ``next_cursor`` until there is none."""
    items: list[dict[str, Any]] = []
    cursor: int | None = None
    while True:
        page = app.client().tasks_page(status, cursor)
        items += page.get("items") or []
        cursor = page.get("next_cursor")
        if cursor is None:
            return items


def refuses_field(exc: ApiError, name: str) -> bool:
    """The API refused the request's shape (422) for the query field ``name``."""
    return exc.status == 422 and any(p.get("field") == name for p in exc.problems)


@click.command("tasks")
# No list of states here: the API's is the one list (the CLI may not import it), so a state
# it adds works at once, and a name it does not know is refused naming every one it knows.
@click.option("--status", metavar="STATE",
              help="Only tasks in this state (running, queued, failed, ...: the server's "
                   "states; it names them all when it refuses one).")
@pass_app
def list_tasks(app: App, status: str | None) -> int:
    """List your tasks (an admin sees everyone's), newest first."""
    try:
        items = all_tasks(app, status)
    except ApiError as exc:
        if not refuses_field(exc, "status"):
            raise
        # The API judged the flag (exit 4 as for any bad flag, whichever check caught it).
        render.print_api_error(app.err, exc.code, exc.message, exc.url, exc.status,
                               exc.problems)
        return Exit.USAGE
    app.out.print(render.tasks_table(items))
    app.err.print(Text(f"{len(items)} task(s)"))
    return Exit.SUCCEEDED


def with_scripts(files: list[dict[str, Any]], scripts: tuple[Path, ...]) -> list[dict[str, Any]]:
    """The task's files with each --script added; a script the task file already carries
    under the same path takes that file's place (what is on disk is what is asked about),
    so no path is sent twice."""
    by_path = {str(f.get("path")): f for f in files}
    for script in scripts:
        by_path[script.name] = {**by_path.get(script.name, {}), "path": script.name,
                                "content": script.read_text(errors="replace")}
    return list(by_path.values())


@click.command()
@click.argument("task_file", type=existing_file)
@click.option("--env-file", type=existing_file, help="A .env file added to the task's env.")
@click.option("--policy-version", type=click.IntRange(min=0),
              help="Preview against this policy version instead of the current one.")
@click.option("--script", "scripts", multiple=True, type=existing_file,
              help="A script the task runs (Python or shell), read by the doctor, never "
                   "run; repeatable.")
@click.option("--strict-env", is_flag=True,
              help="A variable a script reads with no value and no default is an error.")
@click.option("--replicas", type=click.IntRange(min=1), help="As submit --replicas.")
@click.option("--nodes", type=click.IntRange(min=1), help="As submit --nodes.")
@pass_app
def preview(app: App, task_file: Path, env_file: Path | None,
            policy_version: int | None, scripts: tuple[Path, ...], strict_env: bool,
            replicas: int | None, nodes: int | None) -> int:
    """Show the env a task from TASK_FILE would get (replica 0's, with what the other
    replicas hold differently); nothing is created.

    With --script, the doctor reads each script against that env: each variable a script
    reads that the task does not set, each it sets that no script reads.  Exits 2 when
    validation or the policy would reject the env.
    """
    body = group_options(taskfile.body(task_file, env_file), replicas, None, nodes)
    asked: dict[str, Any] = {"name": body.get("name") or "preview", "env": body["env"],
                             "policy_version": policy_version}
    # What the policies' conditions and layers look at: the task's project (its policy
    # applies), GPUs and image, as the task file gives them.
    asked.update({k: body[k] for k in ("replicas", "procs_per_replica", "nodes", "project",
                                       "resources", "image") if k in body})
    # The task file's own files, and the scripts named with --script (read, never run);
    # sent only when there are some: a server without them still answers.
    files = with_scripts(list(body.get("files") or []), scripts)
    if files:
        asked["files"] = files
    if strict_env:
        asked["strict_env"] = True
    with taskfile.shape_checked_by_the_api(task_file):
        result = app.client().preview(asked)
    app.out.print(render.env_table(result.get("variables") or [],
                                   title=f"policy: {render.policy_versions(result)}"))
    render.print_doctor(app.err, result.get("doctor"))
    for differ in result.get("differs") or []:
        app.err.print(render.line(f"{differ.get('name')} differs per replica: "
                                  f"{differ.get('values')}"))
    render.print_problems(app.err, "warnings:", result.get("warnings") or [], style="yellow")
    render.print_problems(app.err, "the env would be rejected:", result.get("errors") or [])
    return Exit.SUCCEEDED if result.get("ok") else Exit.REJECTED
