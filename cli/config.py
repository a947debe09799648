"""Where the API is and which token to use: flags, then the environment, then a file.

The config file is TOML (``~/.config/taskenv/config.toml``, or under
``$XDG_CONFIG_HOME``) with two optional keys, ``url`` and ``token``.  ``taskenv
login`` writes it with mode 0600 in a 0700 directory.  As ssh does with a private
key, a token is not taken from a file that other users can read or change: the
command stops and says how to fix the mode.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
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


def check_private(path: Path) -> None:
    """Refuse a token file that others may read or change (ssh's rule for private keys)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return
    if mode & 0o077:
        raise UsageProblem(f"the config file {path} holds a token and its mode is "
                           f"{mode:04o}: other users can read or change it.  Run "
                           f"`chmod 600 {path}` (or `taskenv login` again) to use it")


def load(url: str | None, token: str | None, environ: Mapping[str, str],
         path: Path | None = None) -> Settings:
    """Each setting from the first place that has it: flag, environment, file, default."""
    path = path or default_path(environ)
    from_file = read_file(path)
    token = token or environ.get(TOKEN_VARIABLE) or None
    if token is None and from_file.get("token"):
        check_private(path)
        token = from_file["token"]
    url = url or environ.get(URL_VARIABLE)
    if url is None and from_file.get("url"):
        check_unchangeable(path)  # the token, from wherever, goes where the file says
        url = from_file["url"]
    return Settings(url=url or DEFAULT_URL, token=token)


def check_unchangeable(path: Path) -> None:
    """Refuse a server address from a file others may change, or that another user owns
    (ssh's rule for its config): whoever can edit it can send the token to their server."""
    try:
        st = path.stat()
    except OSError:
        return
    mode = stat.S_IMODE(st.st_mode)
    foreign = os.name == "posix" and st.st_uid not in (os.getuid(), 0)
    if mode & 0o022 or foreign:
        why = "belongs to another user" if foreign else f"has mode {mode:04o}: others can change it"
        raise UsageProblem(f"the config file {path} names the server your token is sent to "
                           f"and {why}.  Run `chmod 600 {path}` (as its owner) to use it")


def save(path: Path, url: str, token: str) -> None:
    """Write ``url`` and ``token`` to ``path``: mode 0600 from the first byte (never
    readable by others, even for a moment), its directory 0700, replaced atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # TOML basic strings take JSON's escapes: a token or URL can hold no surprise.
    text = f"url = {json.dumps(url)}\ntoken = {json.dumps(token)}\n"
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".config-")
    try:
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def environ() -> Mapping[str, str]:
    return os.environ
