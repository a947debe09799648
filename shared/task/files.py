"""A task's own files: scripts and small configs placed in its working directory.

A task carries ``files: [{path, content, mode?}]``; every launcher puts them in the
working directory before the first step (local: written into the sandbox's home;
podman and Kubernetes: a ConfigMap volume copied into a writable ``emptyDir`` by an
init container).  They belong to the revision like its env: a new revision keeps
them, a rerun runs the files of the revision it reruns, a diff names what changed.

Pure functions.  :func:`check` reports every problem at once, each naming the file,
the rule and the limit:

* a path is relative, inside the working directory: no absolute path, no ``..`` or
  ``.`` component, no empty component (``a//b``, a trailing ``/``), no NUL, at most
  :data:`MAX_PATH_CHARS` characters, no component over ``NAME_MAX`` (255) bytes of
  UTF-8 (``shared.task.paths``); no two files at one path, and no file where
  another needs a directory (``a`` and ``a/b``);
* content is text without NUL (a ConfigMap's ``data`` holds UTF-8 strings);
* ``mode`` is a permission number 0..0o777 (JSON has no octal: 493 is ``0o755``);
* at most ``max_files`` files and ``max_bytes`` bytes of content in all (the same
  order as the env: a ConfigMap holds at most 1 MiB);
* **no secret in a file.**  Files are stored and shown in clear (the manifest
  endpoint shows the ConfigMap), so a file may not hold the value of any of the
  task's secret variables (``file.holds_secret``: it names the variable, never the
  value) nor a PEM private key (``file.private_key``).  A script reads a secret
  from its environment instead.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from shared.errors import Problem
from shared.file_limits import FileLimits as FileLimits
from shared.file_limits import size as size
from shared.task.paths import NAME_MAX, component_problem

DEFAULT_MODE = 0o644
MAX_PATH_CHARS = 1024
PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")


@dataclass(frozen=True)
class TaskFile:
    path: str
    content: str
    mode: int = DEFAULT_MODE

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> TaskFile:
        mode = entry.get("mode")
        return cls(entry["path"], entry["content"], DEFAULT_MODE if mode is None else mode)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "content": self.content, "mode": self.mode}


def stored(files: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Files as a record keeps them: each with its mode."""
    return [TaskFile.from_dict(f).to_dict() for f in files]


def digest(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot name a file inside the working directory; None if it can."""
    if not path:
        return "must not be empty"
    if len(path) > MAX_PATH_CHARS:
        return f"must be at most {MAX_PATH_CHARS} characters"
    if "\0" in path:
        return "must not contain a NUL character"
    if not path.isprintable():
        return "must be printable (no control characters)"
    if path.startswith("/"):
        return "must be relative to the working directory, not an absolute path"
    parts = path.split("/")
    if ".." in parts:
        return "must not contain a '..' component"
    if "." in parts or "" in parts:
        return "must not contain '.' or empty components ('a//b', a trailing '/')"
    return None


def check(files: Sequence[Mapping[str, Any]], limits: FileLimits,
          secrets: Iterable[tuple[str, str]] = ()) -> list[Problem]:
    """Every rule the files break; ``secrets``: (name, value) of the task's secret
    variables, which no file may contain."""
    problems: list[Problem] = []
    if len(files) > limits.max_files:
        problems.append(Problem(
            rule="files.max_count", field="files", limit=limits.max_files,
            message=f"{len(files)} files; at most {limits.max_files} are allowed"))
    secrets = [(n, v) for n, v in secrets if v]
    seen: dict[str, int] = {}
    total = 0
    for index, entry in enumerate(files):
        where, path = f"files[{index}]", str(entry.get("path", ""))
        problems += _entry_problems(where, path, entry, secrets)
        if path in seen:
            problems.append(_problem("file.duplicate", where, path,
                                     f"is given twice (files[{seen[path]}] and {where})"))
        seen.setdefault(path, index)
        total += size(str(entry.get("content", "")))
    problems += _nesting_problems(seen)
    if total > limits.max_bytes:
        problems.append(Problem(
            rule="files.max_bytes", field="files", limit=limits.max_bytes,
            message=f"the files take {total} bytes; at most {limits.max_bytes} are allowed"))
    return problems


def _entry_problems(where: str, path: str, entry: Mapping[str, Any],
                    secrets: list[tuple[str, str]]) -> list[Problem]:
    problems: list[Problem] = []
    if (why := path_problem(path)) is not None:
        problems.append(_problem("file.path", f"{where}.path", path, f"path {why}"))
    elif (why := component_problem(path)) is not None:
        problems.append(Problem(rule="file.path", field=f"{where}.path", limit=NAME_MAX,
                                message=f"file {_show(path)}: path {why}"))
    content = str(entry.get("content", ""))
    try:
        content.encode()
    except UnicodeEncodeError:
        problems.append(_problem("file.encoding", f"{where}.content", path,
                                 "is not valid Unicode text (it holds a lone surrogate)"))
    if "\0" in content:
        problems.append(_problem("file.content_nul", f"{where}.content", path,
                                 "holds a NUL byte: files are text (binary data belongs "
                                 "in the image)"))
    mode = entry.get("mode")
    if mode is not None and not (type(mode) is int and 0 <= mode <= 0o777):
        problems.append(Problem(
            rule="file.mode", field=f"{where}.mode", limit=0o777,
            message=f"file {_show(path)}: mode must be a permission number from 0 to 511 "
                    "(0o777; 493 is 0o755)"))
    for name, value in secrets:
        if value in content:
            problems.append(Problem(
                rule="file.holds_secret", variable=name, field=f"{where}.content",
                message=f"file {_show(path)} holds the value of the secret variable {name}: "
                        "files are stored and shown in clear; read it from the environment "
                        f"(${name}) instead"))
    if PRIVATE_KEY.search(content):
        problems.append(_problem("file.private_key", f"{where}.content", path,
                                 "holds a PEM private key: files are stored and shown in "
                                 "clear; pass it as a secret variable instead"))
    return problems


def _nesting_problems(paths: Mapping[str, int]) -> list[Problem]:
    """A file where another file needs a directory: ``a`` and ``a/b``."""
    problems = []
    for path, index in paths.items():
        parents = PurePosixPath(path).parents
        for parent in list(parents)[:-1]:  # the last parent is '.'
            if str(parent) in paths:
                problems.append(_problem(
                    "file.path", f"files[{index}].path", path,
                    f"needs {parent} to be a directory, but files[{paths[str(parent)]}] "
                    "is a file there"))
    return problems


def _problem(rule: str, field: str, path: str, why: str) -> Problem:
    return Problem(rule=rule, field=field, message=f"file {_show(path)}: {why}")


def _show(path: str) -> str:
    return repr(path[:200]) if not path.isprintable() or len(path) > 200 else path


def summary(files: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What a task's page and API show of its files: path, mode, size and digest."""
    return [{"path": f["path"], "mode": f.get("mode", DEFAULT_MODE),
             "size": size(f["content"]), "sha256": digest(f["content"])} for f in files]


def diff(old: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]
         ) -> dict[str, list[dict[str, Any]]]:
    """Files added, removed and changed between two revisions, by path: sizes, modes and
    digests, never whole contents (a diff line stays short however large a file is)."""
    before = {s["path"]: s for s in summary(old)}
    after = {s["path"]: s for s in summary(new)}
    return {
        "added": [after[p] for p in after if p not in before],
        "removed": [before[p] for p in before if p not in after],
        "changed": [{"path": p, "old": before[p], "new": after[p]} for p in after
                    if p in before and before[p] != after[p]],
    }
