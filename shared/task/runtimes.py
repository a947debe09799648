"""Runtime directories: the software a task names by its ``image`` on a backend that runs
steps on a host's own filesystem (the local and Slurm launchers).

An admin registers each one in ``TASKENV_RUNTIMES`` as ``NAME=/absolute/path``,
comma-separated.  A runtime directory is a root filesystem tree (what an image unpacks
to, e.g. one mmdebstrap made): the sandbox takes its ``usr``, ``bin``, ``sbin``,
``lib*`` and the loader's and certificates' files of ``etc`` from it, read-only, in
place of the host's.  A task that names no image runs the host's, as before.

The name is a tenant's input; it is only ever a key looked up here, never part of a
path, and it must match :data:`NAME` besides.  The paths are the admin's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from shared.config import DEFAULT_IMAGE
from shared.errors import Problem

# What an image reference may hold (registry/name:tag@digest), and nothing a path or a
# shell would act on: no space, no '=', no ',', no NUL, no '..'.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")
SETTING = "TASKENV_RUNTIMES"


class BadRuntimes(ValueError):
    """TASKENV_RUNTIMES that cannot be read: said at start, naming the entry."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a runtime, or None."""
    if not NAME.fullmatch(name) or ".." in name:
        return ("is not a runtime name (letters, digits and . _ : / @ + -, starting with a "
                "letter or digit, no '..', at most 200 characters)")
    return None


@functools.cache
def parse(setting: str) -> Mapping[str, str]:
    """``NAME=/path,...`` as a mapping of names to absolute, normalised paths."""
    found: dict[str, str] = {}
    for entry in (e.strip() for e in setting.split(",")):
        if not entry:
            continue
        name, sep, path = (part.strip() for part in entry.partition("="))
        problem = name_problem(name) if sep else "has no '=/path'"
        if problem is None and not PurePosixPath(path).is_absolute():
            problem = f"has the path {path!r}, which is not absolute"
        if problem is None and name in found:
            problem = "is registered twice"
        if problem:
            raise BadRuntimes(f"{SETTING}: the entry {entry!r} {problem}")
        found[name] = str(PurePosixPath(path))
    return found


def registered(settings: Any) -> Mapping[str, str]:
    return parse(settings.runtimes)


def named(image: str | None) -> str | None:
    """The runtime a task's ``image`` names; None: the host's own (no image, or the
    launchers' default one)."""
    return None if not image or image == DEFAULT_IMAGE else image


def problems(image: str | None, settings: Any) -> list[Problem]:
    """A runtime that no admin registered (or no name at all): refused at creation."""
    name = named(image)
    if name is None:
        return []
    known = registered(settings)
    problem = name_problem(name)
    if problem is None and name in known:
        return []
    choices = ", ".join(sorted(known)) or f"none: {SETTING} registers none"
    why = problem or "is no runtime this launcher has"
    return [Problem("runtime_unknown", f"image {name!r} {why}; the runtimes: {choices}; "
                    "leave image out to run the host's own", field="image")]
