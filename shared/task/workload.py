"""What a launcher runs: one task revision with its resolved env.

Built from a task record once the policy stage has resolved it; every launcher
(local, podman, kubernetes, dryrun) takes the same value.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any

from shared.config import DEFAULT_IMAGE
from shared.env.identity import LOOPBACK, Group, replica_env
from shared.policy.model import Resolved
from shared.task.files import TaskFile


@dataclass(frozen=True)
class Resources:
    cpu: str | None = None
    memory: str | None = None
    gpus: int = 0


@dataclass(frozen=True)
class Workload:
    task_id: str
    revision: int
    name: str
    steps: tuple[tuple[str, ...], ...]
    env: tuple[Resolved, ...]
    policy_version: int
    image: str = DEFAULT_IMAGE
    workdir: str | None = None
    resources: Resources = field(default_factory=Resources)
    files: tuple[TaskFile, ...] = ()  # placed in the working directory before the first step
    replicas: int = 1
    procs_per_replica: int = 1
    nodes: int = 1  # the replicas spread over this many nodes, as many on each
    # The platform's defaults that depend on the node: (name, value, node glob), resolved
    # where the replica runs, for a name the resolved env does not hold.
    per_node: tuple[tuple[str, str, str], ...] = ()
    # When the revision was made: what tells it from a revision whose number a failover lost
    # and the next change made again.
    made_at: float = 0.0

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Workload:
        res = doc.get("resources") or {}
        return cls(
            task_id=doc["id"],
            revision=doc["revision"],
            name=doc["name"],
            steps=tuple(tuple(step) for step in doc["steps"]),
            env=tuple(Resolved.from_dict(v) for v in doc["resolved"]),
            policy_version=doc["policy_version"],
            image=doc.get("image") or DEFAULT_IMAGE,
            workdir=doc.get("workdir"),
            resources=Resources(res.get("cpu"), res.get("memory"), int(res.get("gpus", 0))),
            files=tuple(TaskFile.from_dict(f) for f in doc.get("files") or []),
            replicas=int(doc.get("replicas") or 1),
            procs_per_replica=int(doc.get("procs_per_replica") or 1),
            nodes=int(doc.get("nodes") or 1),
            per_node=tuple((e["name"], e["value"], e["node"]) for e in doc.get("per_node") or ()),
            made_at=float(doc.get("made_at") or 0.0),
        )

    def node_env(self, node: str) -> dict[str, str]:
        """The per-node defaults that reach a replica on ``node``: for each name the
        resolved env does not hold (a default never overrides), the first entry whose glob
        matches the node's name."""
        found: dict[str, str] = {}
        held = {v.name for v in self.env} if self.per_node else set()
        for name, value, glob in self.per_node:
            if name not in found and name not in held and fnmatchcase(node, glob):
                found[name] = value
        return found

    def env_dict(self) -> dict[str, str]:
        """The resolved env every replica shares (its identity is added per replica)."""
        return {v.name: v.value for v in self.env}

    def group(self, master_addr: str = LOOPBACK) -> Group:
        """The task's replicas, with replica 0 listening at ``master_addr``."""
        return Group(self.replicas, self.procs_per_replica, master_addr)

    def replica_env(self, index: int, master_addr: str = LOOPBACK) -> dict[str, str]:
        """Replica ``index``'s whole env: the shared one, then its identity."""
        return {**self.env_dict(), **dict(replica_env(self.group(master_addr), index))}

    @property
    def run_name(self) -> str:
        """One name per task revision: a second launch of it meets the first."""
        return f"taskenv-{self.task_id[:20]}-r{self.revision}"


def with_default_image(workload: Workload, image: str) -> Workload:
    """``workload`` in ``image`` when it names no image of its own (a launcher's default)."""
    if workload.image == DEFAULT_IMAGE and image and image != DEFAULT_IMAGE:
        return replace(workload, image=image)
    return workload
