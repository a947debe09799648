"""Projects: teams sharing the platform, each with members, maintainers and its own policy.

A member creates tasks in the project; a maintainer edits the project's policy and may
read (not change) its tasks.  Maintainers are members too.  A project's record is a
small hash; an owner -> projects set answers "which projects is this owner in" in one
read.  The project's policy versions live in a :class:`shared.policy.store.PolicyStore` of
scope ``project:<name>``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from shared.errors import BadRequest, Forbidden, NotFound, StateConflict
from shared.keys import Keys
from shared.redis_conn import as_text

NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
CHANGE, READ = "change", "read"  # what a caller may do with a task (see task_access)


def check_name(name: str) -> None:
    if not NAME.fullmatch(name):
        raise BadRequest(f"{name[:70]!r} is not a project name: lower-case letters, digits "
                         "and '-', starting with a letter or digit, at most 63 characters")


@dataclass(frozen=True)
class Project:
    name: str
    members: tuple[str, ...] = ()
    maintainers: tuple[str, ...] = ()
    created_by: str | None = None
    created_at: float = field(default_factory=time.time)

    @property
    def everyone(self) -> set[str]:
        return set(self.members) | set(self.maintainers)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "members": list(self.members),
                "maintainers": list(self.maintainers), "created_by": self.created_by,
                "created_at": self.created_at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Project:
        return cls(data["name"], tuple(data.get("members") or ()),
                   tuple(data.get("maintainers") or ()), data.get("created_by"),
                   float(data.get("created_at") or 0))


def _unique(owners: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(owners))


class ProjectStore:
    def __init__(self, client: redis.Redis, prefix: str = "taskenv") -> None:
        self.r = client
        self.keys = Keys(prefix)

    def create(self, name: str, members: Iterable[str], maintainers: Iterable[str],
               actor: str) -> Project:
        check_name(name)
        project = Project(name, _unique(members), _unique(maintainers), actor)
        if not self.r.sadd(self.keys.projects(), name):
            raise StateConflict(f"project {name} exists already")
        self._write(project, set())
        return project

    def get(self, name: str) -> Project:
        if not NAME.fullmatch(name):  # no project has it; nor may it reach a key ("a:policy")
            raise NotFound(f"no project {name[:70]!r}")
        raw = self.r.get(self.keys.project(name))
        if raw is None:
            raise NotFound(f"no project {name}")
        return Project.from_dict(json.loads(raw))

    def update(self, name: str, members: Iterable[str] | None,
               maintainers: Iterable[str] | None) -> Project:
        """Replace the members or maintainers lists (those given)."""
        old = self.get(name)
        new = Project(name, old.members if members is None else _unique(members),
                      old.maintainers if maintainers is None else _unique(maintainers),
                      old.created_by, old.created_at)
        self._write(new, old.everyone)
        return new

    def delete(self, name: str) -> Project:
        old = self.get(name)
        pipe = self.r.pipeline()
        pipe.delete(self.keys.project(name))
        pipe.srem(self.keys.projects(), name)
        for owner in old.everyone:
            pipe.srem(self.keys.owner_projects(owner), name)
        pipe.execute()
        return old

    def _write(self, project: Project, before: set[str]) -> None:
        """The record and the owner index in one transaction."""
        pipe = self.r.pipeline()
        pipe.set(self.keys.project(project.name), json.dumps(project.to_dict()))
        for owner in before - project.everyone:
            pipe.srem(self.keys.owner_projects(owner), project.name)
        for owner in project.everyone:
            pipe.sadd(self.keys.owner_projects(owner), project.name)
        pipe.execute()

    def names(self) -> list[str]:
        return sorted(as_text(n) for n in self.r.smembers(self.keys.projects()))  # type: ignore[union-attr]

    def of(self, owner: str) -> list[str]:
        """The projects ``owner`` is a member or maintainer of, by name."""
        found: Any = self.r.smembers(self.keys.owner_projects(owner))
        return sorted(as_text(n) for n in found)

    def many(self, names: Iterable[str]) -> list[Project]:
        keys = [self.keys.project(n) for n in names]
        raws: Any = self.r.mget(keys) if keys else []
        return [Project.from_dict(json.loads(raw)) for raw in raws if raw is not None]

    def maintained_by(self, owner: str) -> list[str]:
        """The projects whose tasks ``owner`` may read and whose policy it may edit."""
        return [p.name for p in self.many(self.of(owner)) if owner in p.maintainers]

    # --- who may do what -------------------------------------------------------------------

    def visible_to(self, owner: str, is_admin: bool) -> list[str]:
        """The projects ``owner`` may see: every one for an admin, else those it is in."""
        return self.names() if is_admin else self.of(owner)

    def overseen_by(self, owner: str, is_admin: bool) -> list[str]:
        """The projects whose tasks ``owner`` may read: every one for an admin, else those
        it maintains."""
        return self.names() if is_admin else self.maintained_by(owner)

    def for_task(self, owner: str, asked: str | None, is_admin: bool = False) -> str | None:
        """The project a new task of ``owner`` goes in: the one asked for, if ``owner`` may
        use it; else the owner's only project; None for an owner in no project."""
        if asked is not None:
            self.visible(asked, owner, is_admin)
            return asked
        mine = self.of(owner)
        if len(mine) > 1:
            raise BadRequest(f"{owner} is a member of several projects: give 'project', one "
                             f"of {', '.join(mine)}")
        return mine[0] if mine else None

    def visible(self, name: str, owner: str, is_admin: bool) -> Project:
        """The project, if ``owner`` belongs to it (or is an admin).  To anyone else it
        does not exist: the same 404 as a name no project has, so that no tenant learns
        which other projects there are by asking."""
        project = self.get(name)
        if not is_admin and owner not in project.everyone:
            raise NotFound(f"no project {name}")
        return project

    def maintainable(self, name: str, owner: str, is_admin: bool) -> Project:
        """The project, if ``owner`` may edit its policy: a maintainer or an admin.  A
        member is told why not (403); anyone else finds no such project (404)."""
        project = self.visible(name, owner, is_admin)
        if not is_admin and owner not in project.maintainers:
            raise Forbidden(f"only a maintainer of project {name} or an admin may do this")
        return project

    def task_access(self, task: Mapping[str, Any], owner: str | None) -> str | None:
        """What ``owner`` (None: an admin) may do with ``task``: ``change`` it (its own; an
        admin, any), ``read`` it (a task of a project ``owner`` maintains), or nothing.

        The project is read only for someone else's task, so an owner's own costs nothing.
        """
        if owner is None or task.get("owner") == owner:
            return CHANGE
        project = task.get("project")
        if isinstance(project, str) and owner in self._maintainers(project):
            return READ
        return None

    def _maintainers(self, name: str) -> tuple[str, ...]:
        try:
            return self.get(name).maintainers
        except NotFound:  # deleted since: its tasks are their owners' alone
            return ()
