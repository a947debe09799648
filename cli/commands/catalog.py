"""``catalog list|set|delete|builtin``: the documented variables the doctor advises with."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.text import Text

from cli import render
from cli.app import App, pass_app
from cli.outcome import Exit

TYPES = ["string", "path", "url", "enum", "list", "options", "int", "float", "hf_bool"]
project_option = click.option(
    "--project", metavar="NAME",
    help="A project's catalog (its maintainers edit it); the platform's otherwise (admins).")


@click.group()
def catalog() -> None:
    """The catalog of documented variables: built-in, the platform's, each project's."""


@catalog.command("list")
@project_option
@click.option("--layer", type=click.Choice(["builtin", "platform", "project", "policy"]),
              help="Only the entries of one layer.")
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
@pass_app
def list_entries(app: App, project: str | None, layer: str | None, as_json: bool) -> int:
    """Every documented variable that applies to a task (of --project)."""
    found = app.client().catalog(project)
    entries = [e for e in found.get("entries") or [] if layer is None or e.get("layer") == layer]
    if as_json:
        click.echo(json.dumps(entries, indent=2, ensure_ascii=False))
        return Exit.SUCCEEDED
    app.out.print(render.catalog_table(entries))
    state = "on" if found.get("builtin") else "off (an admin switched it off)"
    app.err.print(Text(f"{len(entries)} entries; built-in catalog {state}"))
    return Exit.SUCCEEDED


@catalog.command("set")
@click.argument("name")
@project_option
@click.option("--description", default="", help="One line: what the variable does.")
@click.option("--type", "kind", type=click.Choice(TYPES), default="string")
@click.option("--value", "values", multiple=True,
              help="A documented value (enum, list) or option name (options); repeatable.")
@click.option("--case-insensitive", is_flag=True, help="Values match in any case.")
@click.option("--min", "low", type=float, help="int, float: the smallest documented value.")
@click.option("--max", "high", type=float, help="int, float: the largest documented value.")
@click.option("--source", default="", help="Where the facts come from (a URL).")
@pass_app
def set_entry(app: App, name: str, project: str | None, description: str, kind: str,
              values: tuple[str, ...], case_insensitive: bool, low: float | None,
              high: float | None, source: str) -> int:
    """Document NAME in the platform's catalog (or a project's)."""
    body: dict[str, Any] = {"description": description, "type": kind, "values": list(values),
                            "case_insensitive": case_insensitive, "source": source,
                            "min": low, "max": high}
    saved = app.client().put_catalog_entry(name, {k: v for k, v in body.items()
                                                  if v is not None}, project)
    app.err.print(render.line(f"{saved['name']} documented in the {saved.get('scope')} "
                              "catalog"))
    return Exit.SUCCEEDED


@catalog.command("delete")
@click.argument("name")
@project_option
@pass_app
def delete_entry(app: App, name: str, project: str | None) -> int:
    """Remove NAME from the platform's catalog (or a project's)."""
    app.client().delete_catalog_entry(name, project)
    app.err.print(render.line(f"{name} removed from the {project or 'platform'} catalog"))
    return Exit.SUCCEEDED


@catalog.command("builtin")
@click.argument("state", type=click.Choice(["on", "off"]))
@pass_app
def builtin(app: App, state: str) -> int:
    """Switch the built-in catalog on or off for every task (admins)."""
    app.client().put_catalog_settings({"builtin": state == "on"})
    app.err.print(render.line(f"built-in catalog {state}"))
    return Exit.SUCCEEDED
