"""``projects list|show|create|members|delete``: projects and who belongs to them.

Thin over ``/api/v1/projects``: the API decides who may do what (admins create, change
and delete projects; anyone lists the projects they belong to).
"""

from __future__ import annotations

import json
from typing import Any

import click

from cli import render
from cli.app import App, pass_app
from cli.errors import ApiError, UsageProblem
from cli.outcome import Exit

json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print the API's answer as JSON.")


@click.group()
def projects() -> None:
    """Projects: their members (who create tasks in them) and maintainers (who edit their
    policy and catalog and read their tasks)."""


@projects.command("list")
@json_option
@pass_app
def list_projects(app: App, as_json: bool) -> int:
    """Every project for an admin; the projects you belong to for anyone else."""
    items = app.client().projects()
    if as_json:
        click.echo(json.dumps(items, indent=2, ensure_ascii=False))
        return Exit.SUCCEEDED
    app.out.print(render.projects_table(items))
    app.err.print(render.line(f"{len(items)} project(s)"))
    return Exit.SUCCEEDED


def find_project(app: App, name: str) -> dict[str, Any]:
    """The project: as an admin reads it, or, for anyone else (whom ``GET
    /projects/{name}`` refuses), as the list of their own projects shows it."""
    client = app.client()
    try:
        return client.project(name)
    except ApiError as refused:
        if refused.status != 403:
            raise
        for project in client.projects():
            if project.get("name") == name:
                return project
        raise


@projects.command("show")
@click.argument("name")
@json_option
@pass_app
def show_project(app: App, name: str, as_json: bool) -> int:
    """One project: its members, maintainers and policy version."""
    project = find_project(app, name)
    if as_json:
        click.echo(json.dumps(project, indent=2, ensure_ascii=False))
    else:
        app.out.print(render.project_facts(project))
    return Exit.SUCCEEDED


def people(flag: str, dest: str, help_text: str) -> Any:
    """A repeatable option naming users."""
    return click.option(flag, dest, multiple=True, metavar="USER", help=help_text)


@projects.command("create")
@click.argument("name")
@people("--member", "members", "A member (repeatable).")
@people("--maintainer", "maintainers", "A maintainer (repeatable).")
@pass_app
def create_project(app: App, name: str, members: tuple[str, ...],
                   maintainers: tuple[str, ...]) -> int:
    """Create project NAME (admins): lower-case letters, digits and '-'."""
    made = app.client().create_project(name, list(members), list(maintainers))
    app.err.print(render.line(f"project {made['name']} created"))
    app.out.print(render.project_facts(made))
    return Exit.SUCCEEDED


def changed(current: list[str], add: tuple[str, ...], remove: tuple[str, ...],
            what: str, project: str) -> list[str] | None:
    """The list with ``add`` and without ``remove``; None when that is no change.  Removing
    someone not in it is a mistake worth saying (a typo would otherwise pass silently)."""
    missing = [user for user in remove if user not in current]
    if missing:
        raise UsageProblem(f"not among the {what} of {project}: {', '.join(missing)}")
    both = sorted(set(add) & set(remove))
    if both:
        raise UsageProblem(f"both added and removed: {', '.join(both)}")
    after = [u for u in current if u not in remove] + [u for u in dict.fromkeys(add)
                                                        if u not in current]
    return None if after == current else after


@projects.command("members")
@click.argument("name")
@people("--add", "add", "Make USER a member (repeatable).")
@people("--remove", "remove", "USER is a member no more (repeatable).")
@people("--add-maintainer", "add_maintainer", "Make USER a maintainer.")
@people("--remove-maintainer", "remove_maintainer", "USER maintains it no more.")
@pass_app
def members(app: App, name: str, add: tuple[str, ...], remove: tuple[str, ...],
            add_maintainer: tuple[str, ...], remove_maintainer: tuple[str, ...]) -> int:
    """Add or remove members and maintainers of project NAME (admins).

    The API replaces a whole list: the lists are read, changed and sent back, only those
    that change (a change another admin makes in between to the same list is lost)."""
    client = app.client()
    project = client.project(name)
    lists = {key: after for key, after in (
        ("members", changed(project.get("members") or [], add, remove, "members", name)),
        ("maintainers", changed(project.get("maintainers") or [], add_maintainer,
                                remove_maintainer, "maintainers", name)))
        if after is not None}
    if lists:
        project = client.patch_project(name, lists)
        app.err.print(render.line(f"project {name}: {' and '.join(lists)} changed"))
    else:
        app.err.print(render.line(f"project {name}: nothing to change"))
    app.out.print(render.project_facts(project))
    return Exit.SUCCEEDED


@projects.command("delete")
@click.argument("name")
@pass_app
def delete_project(app: App, name: str) -> int:
    """Delete project NAME (admins); its tasks keep their records and policy versions."""
    app.client().delete_project(name)
    app.err.print(render.line(f"project {name} deleted"))
    return Exit.SUCCEEDED
