"""``taskenv``: the command group, global options, and exit codes for every failure."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cli import render
from cli.app import App
from cli.commands.admin import policy, tokens
from cli.commands.catalog import catalog
from cli.commands.env import env
from cli.commands.login import login
from cli.commands.projects import projects
from cli.commands.task import cancel, diff, rerun, revisions, show
from cli.commands.tasks import list_tasks, logs, preview, submit
from cli.errors import ApiError, EnvRejected, UsageProblem
from cli.outcome import TABLE, Exit

SETTINGS_HELP = """\
Server and token come from --url/--token, else TASKENV_URL/TASKENV_TOKEN, else
~/.config/taskenv/config.toml (keys: url, token), which `taskenv login` writes with
mode 0600. Prefer the login or the variable for the token: a flag is visible to
other users in the process list."""


@click.group(help="Work with taskenv from a terminal: tasks, their env, the policy, projects, "
                  "tokens."
                  "\n\n" + SETTINGS_HELP,
             epilog="\b\n" + TABLE, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", metavar="URL", help="The server, e.g. http://127.0.0.1:8080.")
@click.option("--token", metavar="TOKEN", help="An API token.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Another config file than ~/.config/taskenv/config.toml.")
@click.pass_context
def taskenv(ctx: click.Context, url: str | None, token: str | None,
            config_path: Path | None) -> None:
    ctx.obj = App(url=url, token=token, config_path=config_path)


for command in (login, submit, show, logs, list_tasks, cancel, rerun, revisions, diff, preview,
                env, policy, tokens, catalog, projects):
    taskenv.add_command(command)


def run(argv: list[str] | None) -> int:
    result = taskenv.main(args=argv, prog_name="taskenv", standalone_mode=False)
    return int(result) if isinstance(result, int) else Exit.SUCCEEDED


def main(argv: list[str] | None = None) -> int:
    """Run one command; every way it can end maps to a documented exit code."""
    err = render.console(stderr=True)
    try:
        return run(argv)
    except click.ClickException as exc:
        exc.show()
        return Exit.USAGE
    except click.Abort:
        err.print("aborted")
        return Exit.USAGE
    except UsageProblem as exc:
        err.print(render.block(render.prose(f"error: {exc}"), style="bold red"))
        return Exit.USAGE
    except EnvRejected as exc:
        err.print(render.block(render.prose(f"the env was rejected: {exc}"), style="bold red"))
        return Exit.REJECTED
    except ApiError as exc:
        render.print_api_error(err, exc.code, exc.message, exc.url, exc.status, exc.problems)
        return Exit.REJECTED if exc.rejects_env else Exit.API


if __name__ == "__main__":
    sys.exit(main())
