"""A task file: YAML holding what ``POST /api/v1/tasks`` takes, plus an optional ``.env``.

The file is the request body; :data:`KEYS` is every key it may hold (what ``submit
--help`` lists, and what the CLI checks before sending: a key it does not know is
refused, naming it).  The API checks the rest of its shape; a task file either check
refuses is malformed (:class:`TaskFileMalformed`, exit code 4).  Values from an
``.env`` file are appended to ``env``; a name in both is an error that names it.  Each
of ``files`` gives its ``path`` in the task's working directory and either its
``content`` or a ``source``: a local file, relative to the task file, that the CLI
reads and sends as the content.
"""

from __future__ import annotations

import difflib
import textwrap
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cli import envfile
from cli.errors import ApiError, EnvRejected, TaskFileMalformed, UsageProblem
from shared.env.identity import IDENTITY_NAMES, reserved_message


@dataclass(frozen=True)
class Key:
    """One key of a task file: what it holds, and the keys of its mapping, or of each
    entry of its list (``listed``), where it holds some."""

    name: str
    says: str
    holds: tuple[str, ...] = ()
    listed: bool = False
    required: bool = False


# Every key a task file may hold: the API's task schema's fields, and nothing else
# (tests/cli/test_task_file_keys.py holds the two to the same list).
KEYS = (
    Key("name", "the task's name", required=True),
    Key("steps", "the scripts, run in order in one container, each an argv list "
                 "([python3, train.py]), without a shell", required=True),
    Key("env", "the variables: a list of {name, value, secret?}; a value is text "
               "(quote numbers)", holds=("name", "value", "secret"), listed=True),
    Key("env_file", "dotenv text, read as data (nothing expanded); --env-file adds a "
                    "file's to env instead"),
    Key("files", "the task's own files: a list of {path, content or source, mode?}; "
                 "source is a local file (relative to the task file) the CLI reads",
        holds=("path", "content", "source", "mode"), listed=True),
    Key("image", "the image (or runtime directory) the steps run in"),
    Key("workdir", "a directory in the task's home, relative to it"),
    Key("resources", "what the task asks for: {cpu, memory, gpus}",
        holds=("cpu", "memory", "gpus")),
    Key("project", "the project it runs in (needed when its owner is in several)"),
    Key("strict_env", "true: a variable a script reads with no value and no default "
                      "rejects the task"),
    Key("replicas", "how many replicas run, each with its own RANK (--replicas)"),
    Key("procs_per_replica", "processes torchrun starts in each replica "
                             "(--procs-per-replica)"),
    Key("nodes", "how many nodes the replicas are spread over (--nodes; Slurm)"),
)
KNOWN = {key.name: key for key in KEYS}


def keys_help(columns: int = 76) -> str:
    """The task file's keys, each with what it holds (wrapped under it), as ``submit
    --help`` lists them."""
    width = max(len(key.name) for key in KEYS)
    return "\n".join(
        textwrap.fill(("required: " if key.required else "") + key.says, columns,
                      initial_indent=f"  {key.name:<{width}}  ",
                      subsequent_indent=" " * (width + 4), break_on_hyphens=False)
        for key in KEYS)


def load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageProblem(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise TaskFileMalformed(f"{path} is not valid YAML: {exc}") from exc


def load_mapping(path: Path) -> dict[str, Any]:
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise TaskFileMalformed(f"{path} must hold a mapping (name: ..., steps: ...)")
    check_keys(data, path)
    return data


def unknown(given: dict[Any, Any], known: Collection[str], where: str) -> list[str]:
    """A sentence for each key of ``given`` not among ``known`` (with the nearest one)."""
    said = []
    for name in (str(k) for k in given if str(k) not in known):
        near = difflib.get_close_matches(name, list(known), n=1)
        said.append(f"{where}{name} is not a key it takes"
                    + (f" (did you mean {near[0]}?)" if near else ""))
    return said


def check_keys(data: dict[str, Any], path: Path) -> None:
    """Every key the task file holds is one :data:`KEYS` names, and so is every key of a
    mapping under it (``resources``) and of each entry of a list (``env``, ``files``);
    the unknown ones are refused, each named.  What each holds is the API's to check."""
    problems = unknown(data, KNOWN.keys(), "")
    for key in (KNOWN[name] for name in data if name in KNOWN and KNOWN[name].holds):
        value = data[key.name]
        if not key.listed and isinstance(value, dict):
            problems += unknown(value, key.holds, f"{key.name}.")
        elif key.listed and isinstance(value, list):
            for index, entry in enumerate(value):
                if isinstance(entry, dict):
                    problems += unknown(entry, key.holds, f"{key.name}[{index}].")
    if problems:
        raise TaskFileMalformed(f"{path} is malformed: " + "; ".join(problems)
                                + f"\nA task file's keys: {', '.join(KNOWN)}")


@contextmanager
def shape_checked_by_the_api(path: Path) -> Iterator[None]:
    """What the API says of a body made from the task file at ``path``: a refusal of its
    shape means the file is malformed, as when the CLI finds it (exit code 4)."""
    try:
        yield
    except ApiError as exc:
        if not exc.refuses_shape:
            raise
        said = [str(p.get("message") or p.get("field")) for p in exc.problems]
        raise TaskFileMalformed("\n".join([f"{path} is malformed (the API's check of its "
                                            "shape):", *said])) from exc


def env_names(env: Any, origin: str) -> list[str]:
    if not isinstance(env, list) or not all(isinstance(e, dict) for e in env):
        raise TaskFileMalformed(f"{origin}: env must be a list of {{name, value, secret?}} "
                                "entries")
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
        raise TaskFileMalformed(f"{task_file}: files must be a list of {{path, content or "
                                "source, mode?}} entries")
    out = []
    for index, entry in enumerate(files):
        entry = dict(entry)
        if ("content" in entry) == ("source" in entry):
            raise TaskFileMalformed(f"{task_file}: files[{index}] ({entry.get('path')}) "
                                    "needs either content or source, not both")
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
