"""A task file: YAML holding what ``POST /api/v1/tasks`` takes, plus an optional ``.env``.

The file is the request body (``name``, ``image``, ``workdir``, ``steps``,
``env``, ``resources``, ``files``); the API checks its shape.  Values from an ``.env``
file are appended to ``env``; a name in both is an error that names it.  Each of
``files`` gives its ``path`` in the task's working directory and either its
``content`` or a ``source``: a local file, relative to the task file, that the CLI
reads and sends as the content.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cli import envfile
from cli.errors import EnvRejected, UsageProblem
from shared.env.identity import IDENTITY_NAMES, reserved_message


def load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageProblem(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise UsageProblem(f"{path} is not valid YAML: {exc}") from exc


def load_mapping(path: Path) -> dict[str, Any]:
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise UsageProblem(f"{path} must hold a mapping (name: ..., steps: ...)")
    return data


def env_names(env: Any, origin: str) -> list[str]:
    if not isinstance(env, list) or not all(isinstance(e, dict) for e in env):
        raise UsageProblem(f"{origin}: env must be a list of {{name, value, secret?}} entries")
    return [str(e.get("name")) for e in env]


def merge_env(env: list[dict[str, Any]], extra: dict[str, str], origin: str,
              extra_origin: str) -> list[dict[str, Any]]:
    """``env`` followed by ``extra``; a name in both is refused, naming it."""
    both = [name for name in env_names(env, origin) if name in extra]
    if both:
        raise EnvRejected(f"set both in {origin} and in {extra_origin}: {', '.join(both)}")
    return [*env, *({"name": name, "value": value} for name, value in extra.items())]


def mark_secret(env: list[dict[str, Any]], secrets: tuple[str, ...]) -> list[dict[str, Any]]:
    unknown = sorted(set(secrets) - {str(e.get("name")) for e in env})
    if unknown:
        raise UsageProblem(f"--secret names a variable the task does not set: "
                           f"{', '.join(unknown)}")
    return [{**e, "secret": True} if e.get("name") in secrets else e for e in env]


def body(task_file: Path, env_file: Path | None,
         secrets: tuple[str, ...] = ()) -> dict[str, Any]:
    """The request body for ``POST /tasks``."""
    data = load_mapping(task_file)
    env = data.get("env") or []
    env_names(env, str(task_file))
    if env_file is not None:
        env = merge_env(env, envfile.load(env_file), str(task_file), str(env_file))
    out = {**data, "env": mark_secret(env, secrets)}
    if "files" in data:
        out["files"] = read_files(data["files"], task_file)
    return out


def read_files(files: Any, task_file: Path) -> list[dict[str, Any]]:
    """``files`` with each ``source`` read into ``content`` (relative to the task file)."""
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise UsageProblem(f"{task_file}: files must be a list of {{path, content or source, "
                           "mode?}} entries")
    out = []
    for index, entry in enumerate(files):
        entry = dict(entry)
        if ("content" in entry) == ("source" in entry):
            raise UsageProblem(f"{task_file}: files[{index}] ({entry.get('path')}) needs "
                               "either content or source, not both")
        if "source" in entry:
            source = task_file.parent / str(entry.pop("source"))
            try:
                entry["content"] = source.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageProblem(f"{task_file}: files[{index}]: cannot read {source}: "
                                   f"{exc}") from exc
        out.append(entry)
    return out


def identity_problems(env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The env's entries naming a variable the platform sets per replica, as the API would
    word them: the CLI refuses them before submitting anything."""
    return [{"rule": "platform.identity", "variable": e["name"],
             "message": reserved_message(e["name"])}
            for e in env if e.get("name") in IDENTITY_NAMES]
