"""``login``: check a token against the server and keep both in the config file."""

from __future__ import annotations

import click

from cli import config, prompt, render
from cli.app import App, pass_app
from cli.client import Client
from cli.outcome import Exit


@click.command()
@click.option("--url", "login_url", metavar="URL",
              help="The server (default: --url, TASKENV_URL, the config file's, or "
                   f"{config.DEFAULT_URL}).")
@pass_app
def login(app: App, login_url: str | None) -> int:
    """Ask for a token (unechoed; or one line on standard input), check it against the
    server and write both to the config file with mode 0600.

    Nothing is written when the server refuses the token or cannot be reached.
    """
    environ = config.environ()
    path = app.config_path or config.default_path(environ)
    url = (login_url or app.url or environ.get(config.URL_VARIABLE)
           or config.read_file(path).get("url") or config.DEFAULT_URL)
    token = app.token or prompt.secret(f"API token for {url}")
    Client(url, token).check_token()
    config.save(path, url, token)
    app.err.print(render.line(f"logged in to {url}; url and token written to {path} "
                              "(mode 0600)"))
    return Exit.SUCCEEDED
