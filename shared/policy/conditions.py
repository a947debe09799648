"""Conditions on policy entries: ``when: {gpus, replicas, image, project, node}``, against a task.

A default, protected entry or rule that carries ``when`` applies only to the tasks
it matches; the resolved variable names the condition that matched
(``when: "gpus>=1"``).  ``gpus`` and ``replicas`` are comparisons (``">=1"``, ``"0"``,
``"<2"``; ``replicas: ">1"`` is every distributed task);
``image`` and ``project`` are globs (``fnmatch.fnmatchcase``).

``node`` is a glob on the name of the node a replica runs on, which no task knows before
it runs: an entry with it never applies when the policy stage resolves the env.  Only
the platform's defaults, never a secret, may carry it (``node_problems``); such a default
is carried with the revision (``per_node``) and resolved on the node by platform code,
where the launcher knows the node's name (docs/policy.md, "Per-node defaults").
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from shared.errors import Problem

WHEN_KEYS = ("gpus", "replicas", "image", "project", "node")
COUNT_KEYS = ("gpus", "replicas")
GPUS_EXPRESSION = re.compile(r"\s*(>=|<=|==|!=|>|<|=)?\s*(\d{1,6})\s*")
COMPARE: dict[str, Callable[[int, int], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">": operator.gt, "<": operator.lt,
}
GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class TaskFacts:
    """What a condition can see of a task."""

    gpus: int = 0
    image: str = ""
    project: str | None = None
    replicas: int = 1

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], default_image: str = "") -> TaskFacts:
        """The facts of a task record (``resources.gpus``, ``replicas``, ``image``,
        ``project``)."""
        resources = doc.get("resources") or {}
        return cls(gpus=int(resources.get("gpus") or 0),
                   image=doc.get("image") or default_image, project=doc.get("project"),
                   replicas=int(doc.get("replicas") or 1))


@dataclass(frozen=True)
class GpuCondition:
    """A comparison of one of a task's counts: its GPUs, or (``key``) its replicas."""

    op: str
    count: int
    key: str = "gpus"

    @classmethod
    def parse(cls, expression: str | int, key: str = "gpus") -> GpuCondition | None:
        """``">=1"`` -> (>=, 1); a bare number means equality; None if not an expression."""
        if isinstance(expression, bool):
            return None
        if isinstance(expression, int):
            return cls("==", expression, key) if expression >= 0 else None
        found = GPUS_EXPRESSION.fullmatch(expression) if isinstance(expression, str) else None
        if found is None:
            return None
        op = found.group(1) or "=="
        return cls("==" if op == "=" else op, int(found.group(2)), key)

    def holds(self, gpus: int) -> bool:
        return COMPARE[self.op](gpus, self.count)

    def text(self) -> str:
        return f"{self.key}{self.op}{self.count}"


@dataclass(frozen=True)
class When:
    gpus: GpuCondition | None = None
    image: str | None = None
    project: str | None = None
    replicas: GpuCondition | None = None
    node: str | None = None  # a glob on the node's name: resolved on the node

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> When | None:
        """A checked ``when`` mapping as a condition; None (or empty) means always."""
        if not data:
            return None
        gpus, replicas = data.get("gpus"), data.get("replicas")
        return cls(gpus=GpuCondition.parse(gpus) if gpus is not None else None,
                   image=data.get("image"), project=data.get("project"),
                   replicas=GpuCondition.parse(replicas, "replicas")
                   if replicas is not None else None, node=data.get("node"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.gpus is not None:
            out["gpus"] = f"{self.gpus.op}{self.gpus.count}"
        if self.replicas is not None:
            out["replicas"] = f"{self.replicas.op}{self.replicas.count}"
        if self.image is not None:
            out["image"] = self.image
        if self.project is not None:
            out["project"] = self.project
        if self.node is not None:
            out["node"] = self.node
        return out

    def matches(self, task: TaskFacts) -> bool:
        """Whether the condition holds for the task; one on the node never does here (the
        node is known only where the replica runs: :meth:`matches_task`, then the node)."""
        return self.node is None and self.matches_task(task)

    def matches_task(self, task: TaskFacts) -> bool:
        """The task's part of the condition (all but ``node``)."""
        if self.gpus is not None and not self.gpus.holds(task.gpus):
            return False
        if self.replicas is not None and not self.replicas.holds(task.replicas):
            return False
        if self.image is not None and not fnmatchcase(task.image, self.image):
            return False
        return self.project is None or (
            task.project is not None and fnmatchcase(task.project, self.project))

    def names_another_project(self, project: str | None) -> bool:
        """Whether this condition is about a project other than ``project``: an entry only
        another project's tasks meet, which a caller of ``project`` is never shown."""
        return self.project is not None and not (
            project is not None and fnmatchcase(project, self.project))

    def text(self) -> str:
        """How provenance names the condition: ``gpus>=1 and image=nvcr.io/*``."""
        parts = [c.text() for c in (self.gpus, self.replicas) if c is not None]
        parts += [f"{key}={glob}" for key, glob in (("image", self.image),
                                                   ("project", self.project),
                                                   ("node", self.node)) if glob is not None]
        return " and ".join(parts)


def applies(when: When | None, task: TaskFacts) -> bool:
    return when is None or when.matches(task)


def when_text(when: When | None) -> str | None:
    return when.text() if when is not None else None


def check_when(data: object, where: str) -> list[Problem]:
    """Every reason a ``when`` mapping (at ``where``, e.g. ``defaults[2].when``) is invalid."""
    if data is None:
        return []
    if not isinstance(data, Mapping):
        return [Problem(rule="when.invalid", field=where,
                        message=f"{where}: 'when' must be an object with any of "
                                f"{', '.join(WHEN_KEYS)}")]
    problems = [Problem(rule="when.invalid", field=f"{where}.{key}",
                        message=f"{where}: unknown condition {key!r}; "
                                f"conditions are {', '.join(WHEN_KEYS)}")
                for key in data if key not in WHEN_KEYS]
    for key in COUNT_KEYS:
        count = data.get(key)
        if count is not None and GpuCondition.parse(count, key) is None:
            what = "GPU" if key == "gpus" else "replica"
            problems.append(Problem(
                rule=f"when.{key}_invalid", field=f"{where}.{key}",
                message=f"{where}.{key}: {str(count)[:40]!r} is not a {what} count condition; "
                        "write a number or a comparison such as \">=1\", \"0\", \"<2\", "
                        "\"!=4\""))
    for key in ("image", "project", "node"):
        if key in data and not isinstance(data[key], str):
            problems.append(Problem(rule="when.invalid", field=f"{where}.{key}",
                                    message=f"{where}.{key} must be a glob string"))
    return problems


def may_overlap(a: When | None, b: When | None) -> bool:
    """Whether some task could match both conditions (conservative for globs)."""
    if a is None or b is None:
        return True
    return (_gpus_overlap(a.gpus, b.gpus) and _gpus_overlap(a.replicas, b.replicas)
            and _globs_overlap(a.image, b.image)
            and _globs_overlap(a.project, b.project) and _globs_overlap(a.node, b.node))


def _gpus_overlap(a: GpuCondition | None, b: GpuCondition | None) -> bool:
    if a is None or b is None:
        return True
    # Each condition's truth changes only next to its own count, so these points decide.
    candidates = {n for c in (a.count, b.count) for n in (c - 1, c, c + 1) if n >= 0}
    candidates.add(max(a.count, b.count) + 2)
    return any(a.holds(n) and b.holds(n) for n in candidates)


def _globs_overlap(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return True
    a_literal, b_literal = GLOB_CHARS.isdisjoint(a), GLOB_CHARS.isdisjoint(b)
    if a_literal and b_literal:
        return a == b
    if a_literal or b_literal:
        literal, glob = (a, b) if a_literal else (b, a)
        return fnmatchcase(literal, glob)
    # Two globs: apart only when their literal heads (or tails) differ, e.g. gpu-* and
    # cpu-*; otherwise assume some name matches both.
    heads = [_literal_head(a), _literal_head(b)]
    tails = [_literal_head(a[::-1], "]"), _literal_head(b[::-1], "]")]  # a set ends in ]
    return all(x.startswith(y) or y.startswith(x) for x, y in (heads, tails))


def _literal_head(glob: str, also: str = "") -> str:
    """What every name a glob matches starts with: its characters before the first
    ``*``, ``?`` or ``[`` (or one of ``also``)."""
    cut = min((glob.index(c) for c in GLOB_CHARS | set(also) if c in glob), default=len(glob))
    return glob[:cut]
