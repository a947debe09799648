"""Where the API is and which token to use: flags, then the environment, then a file.

The config file is TOML (``~/.config/taskenv/config.toml``, or under
``$XDG_CONFIG_HOME``) with two optional keys, ``url`` and ``token``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cli.errors import UsageProblem

DEFAULT_URL = "http://127.0.0.1:8080"
URL_VARIABLE = "TASKENV_URL"
TOKEN_VARIABLE = "TASKENV_TOKEN"  # noqa: S105 - the name of a variable, not a token


@dataclass(frozen=True)
class Settings:
    url: str
    token: str | None

    def __repr__(self) -> str:  # a traceback or a debug print must not show the token
        return f"Settings(url={self.url!r}, token={'set' if self.token else 'unset'})"


def default_path(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "taskenv" / "config.toml"


def read_file(path: Path) -> dict[str, str]:
    """The file's ``url`` and ``token``; a missing file is an empty config."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageProblem(f"cannot read the config file {path}: {exc}") from exc
    unknown = sorted(set(data) - {"url", "token"})
    if unknown:
        raise UsageProblem(f"config file {path}: unknown keys {', '.join(unknown)} "
                           "(known: url, token)")
    for key, value in data.items():
        if not isinstance(value, str):
            raise UsageProblem(f"config file {path}: {key} must be a string")
    return dict(data)


def load(url: str | None, token: str | None, environ: Mapping[str, str],
         path: Path | None = None) -> Settings:
    """Each setting from the first place that has it: flag, environment, file, default."""
    from_file = read_file(path or default_path(environ))
    return Settings(
        url=url or environ.get(URL_VARIABLE) or from_file.get("url") or DEFAULT_URL,
        token=token or environ.get(TOKEN_VARIABLE) or from_file.get("token") or None,
    )


def environ() -> Mapping[str, str]:
    return os.environ
