"""What every command shares: settings, the API client and the two consoles."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console

from cli import config, render
from cli.client import Client
from cli.errors import UsageProblem


@dataclass
class App:
    url: str | None = None
    token: str | None = None
    config_path: Path | None = None
    out: Console = field(default_factory=render.console)
    err: Console = field(default_factory=lambda: render.console(stderr=True))
    _client: Client | None = field(default=None, repr=False)

    def settings(self) -> config.Settings:
        return config.load(self.url, self.token, config.environ(), self.config_path)

    def client(self) -> Client:
        """The API client, made on first use: ``--help`` needs neither server nor token."""
        if self._client is None:
            settings = self.settings()
            if not settings.token:
                where = self.config_path or config.default_path(config.environ())
                raise UsageProblem(f"no API token: pass --token, set {config.TOKEN_VARIABLE} "
                                   f"or put token = \"...\" in {where}")
            self._client = Client(settings.url, settings.token)
        return self._client


pass_app = click.make_pass_decorator(App)
