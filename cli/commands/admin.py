"""``policy get|set|history|impact`` (the platform's, admins; ``--project NAME``: that
project's, its maintainers and admins) and ``tokens create|list|revoke`` (admins)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from cli import render, taskfile
from cli.app import App, pass_app
from cli.errors import UsageProblem
from cli.outcome import Exit

# What the API adds to a policy and ``PUT /policy`` does not take: read-only, written by
# the server, dropped from a file so that `policy get --json > p.json` can be set back.
WRITTEN_BY_SERVER = ("version", "author", "created_at", "scope", "project_conflicts",
                     "conflicts")
MASK = "********"  # how the API shows a secret value
existing_file = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.group()
def policy() -> None:
    """The platform policy: defaults for every task, protected variables, rules (admins).

    With --project NAME, that project's policy instead, layered under the platform's
    (its maintainers and admins): it may add defaults, protected variables and rules,
    never weaken the platform's."""


def project_option(function: Any) -> Any:
    return click.option(
        "--project", metavar="NAME",
        help="Project NAME's policy (its maintainers and admins) instead of the "
             "platform's.")(function)


def print_policy(app: App, data: dict[str, Any]) -> None:
    for part in render.policy_tables(data):
        app.out.print(part)


def print_conflicts(app: App, data: dict[str, Any]) -> None:
    """A project policy's ``conflicts``: what the platform's current policy refuses in it
    (saved before the platform's last change), for its maintainers to fix."""
    render.print_problems(app.err, f"the platform's current policy refuses in "
                                   f"{render.scope_label(data.get('scope'))}'s version "
                                   f"{data.get('version')} (fix it and set it again):",
                          data.get("conflicts") or [], style="yellow")


@policy.command("get")
@click.option("--version", type=click.IntRange(min=0), help="A past version, as written.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON; edit it and pass it to `policy impact` and `policy set` "
                   "(the fields the server writes are ignored there).")
@project_option
@pass_app
def get_policy(app: App, version: int | None, as_json: bool, project: str | None) -> int:
    """Show the current policy (or one version): defaults, protected variables, rules;
    for a project, also what in it the platform's current policy refuses."""
    client = app.client()
    data = (client.policy(project) if version is None
            else client.policy_version(version, project))
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        print_policy(app, data)
        print_conflicts(app, data)
    return Exit.SUCCEEDED


def draft(path: Path) -> dict[str, Any]:
    """A policy file (YAML or JSON) as the API takes it; masked secrets are refused.
    Its keys are the API's to judge (a policy's, not a task file's)."""
    found = taskfile.load_yaml(path)
    if not isinstance(found, dict):
        raise UsageProblem(f"{path} must hold a mapping (defaults: ..., protected: ..., "
                           "rules: ...)")
    data = {k: v for k, v in found.items() if k not in WRITTEN_BY_SERVER}
    entries = [*(data.get("defaults") or []), *(data.get("protected") or [])]
    masked = [str(e.get("name")) for e in entries
              if isinstance(e, dict) and e.get("secret") and e.get("value") == MASK]
    if masked:
        raise UsageProblem(f"{path}: the value of secret {', '.join(masked)} is the mask "
                           f"{MASK!r}, not the secret; write the real value")
    return data


@policy.command("set")
@click.argument("policy_file", type=existing_file)
@project_option
@pass_app
def set_policy(app: App, policy_file: Path, project: str | None) -> int:
    """Replace the policy with POLICY_FILE (YAML or JSON): a new, immutable version.
    A list the file leaves out (defaults, protected) is empty; it must give one of them."""
    saved = app.client().put_policy(draft(policy_file), project)
    app.err.print(render.line(f"{render.scope_label(saved.get('scope'))} policy version "
                              f"{saved['version']} saved; tasks already resolved keep the "
                              "version they were resolved with"))
    warn_conflicts(app, saved.get("project_conflicts") or [])
    print_policy(app, {k: v for k, v in saved.items() if k != "project_conflicts"})
    return Exit.SUCCEEDED


def warn_conflicts(app: App, conflicts: list[dict[str, Any]]) -> None:
    """The project policies the saved platform policy now refuses, each problem on a line:
    saved all the same, they are for the projects' maintainers to fix."""
    for conflict in conflicts:
        app.err.print(render.line(
            f"project {conflict.get('project')} (policy version "
            f"{conflict.get('policy_version')}) now conflicts with this policy:",
            "yellow"))
        for problem in conflict.get("problems") or []:
            app.err.print(render.block(render.indented(render.problem_line(problem), "  "),
                                       "yellow"))


@policy.command("history")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many of the latest versions to show.")
@project_option
@pass_app
def policy_history(app: App, limit: int, project: str | None) -> int:
    """The latest policy versions, newest first."""
    client = app.client()
    listing = client.policy_versions(project)
    numbers = sorted(listing.get("versions") or [], reverse=True)[:limit]
    versions = [client.policy_version(n, project) for n in numbers]
    app.out.print(render.history_table(versions, listing.get("current")))
    return Exit.SUCCEEDED


@policy.command("impact")
@click.argument("policy_file", type=existing_file)
@click.option("--json", "as_json", is_flag=True, help="Print the API's answer as JSON.")
@project_option
@pass_app
def policy_impact(app: App, policy_file: Path, as_json: bool, project: str | None) -> int:
    """What saving POLICY_FILE would do to existing tasks (with --project, that project's);
    nothing is saved."""
    impact = app.client().policy_impact(draft(policy_file), project)
    if as_json:
        click.echo(json.dumps(impact, indent=2, ensure_ascii=False))
        return Exit.SUCCEEDED
    for part in render.impact_parts(impact):
        app.out.print(part)
    return Exit.SUCCEEDED


@click.group()
def tokens() -> None:
    """API tokens (admins). A token is shown once, when it is created."""


@tokens.command("create")
@click.argument("owner")
@click.option("--role", type=click.Choice(["user", "admin"]), default="user",
              show_default=True)
@pass_app
def create_token(app: App, owner: str, role: str) -> int:
    """Create a token for OWNER and print it: the only time it is shown."""
    made = app.client().create_token(owner, role)
    app.err.print(render.line(f"token {made['id']} for {made['owner']} ({made['role']}); "
                              "store it now, it is not shown again:"))
    click.echo(render.shown(made["token"]))
    return Exit.SUCCEEDED


@tokens.command("list")
@pass_app
def list_tokens(app: App) -> int:
    """Every token's id, owner and role (never the token itself)."""
    app.out.print(render.tokens_table(app.client().tokens()))
    return Exit.SUCCEEDED


@tokens.command("revoke")
@click.argument("token_id")
@pass_app
def revoke_token(app: App, token_id: str) -> int:
    """Revoke a token by its id: it stops working at once."""
    app.client().revoke_token(token_id)
    app.err.print(Text(f"token {token_id} revoked"))
    return Exit.SUCCEEDED
