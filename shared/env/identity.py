"""Who each replica of a task is: the variables the platform sets per replica.

Pure, and the only place these names and meanings are defined: every launcher
(local, podman, kubernetes, dryrun, and a launcher that computes them on a node
from its scheduler's own rank, such as Slurm's ``SLURM_PROCID``) calls
:func:`replica_env` with the task's :class:`Group` and the replica's index, so a
replica sees the same variables whatever runs it.  ``docs/distributed.md`` has the
table and how each maps to torchrun, Kubeflow Trainer, PyTorchJob and SkyPilot.

The names are the platform's: a user's env, a ``.env`` file or a policy that names
one is refused (``shared.policy.model``), because a value typed by hand breaks the
rendezvous of every replica.

With ``procs_per_replica`` above 1 the container holds no ``RANK`` nor
``WORLD_SIZE``: torchrun (started with no flags, reading the ``PET_*`` five)
starts that many processes per replica and sets ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE`` in each.  A program started without
torchrun then finds no ``RANK`` and stops, instead of joining with a wrong one.
"""

from __future__ import annotations

from dataclasses import dataclass

# torchrun's and Kubeflow Trainer's default rendezvous port.
DEFAULT_MASTER_PORT = 29500
LOOPBACK = "127.0.0.1"

TASK_REPLICA = "TASK_REPLICA"
TASK_REPLICAS = "TASK_REPLICAS"
RANK = "RANK"
WORLD_SIZE = "WORLD_SIZE"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
PET_NNODES = "PET_NNODES"
PET_NODE_RANK = "PET_NODE_RANK"
PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
PET_MASTER_ADDR = "PET_MASTER_ADDR"
PET_MASTER_PORT = "PET_MASTER_PORT"

IDENTITY_NAMES = (TASK_REPLICA, TASK_REPLICAS, RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
                  PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR,
                  PET_MASTER_PORT)
# Set on each node where a task of several replicas runs, to the interface that routes to
# MASTER_ADDR there (gloo's and NCCL's own choice otherwise follows the hostname, which may
# resolve to an address the peers cannot reach, and the rendezvous hangs).  Unlike the
# identity, a task or a policy may set them: a site that knows its network better wins.
GLOO_SOCKET_IFNAME = "GLOO_SOCKET_IFNAME"
NCCL_SOCKET_IFNAME = "NCCL_SOCKET_IFNAME"
SOCKET_IFNAME_NAMES = (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME)
# The ones whose value is the replica's index (a Kubernetes pod reads it from the downward
# API); every other identity variable is the same in every replica.
INDEX_NAMES = (TASK_REPLICA, RANK, PET_NODE_RANK)


@dataclass(frozen=True)
class Group:
    """The replicas of one task and where replica 0 listens for the others."""

    replicas: int = 1
    procs_per_replica: int = 1
    master_addr: str = LOOPBACK
    master_port: int = DEFAULT_MASTER_PORT

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.procs_per_replica < 1:
            raise ValueError(f"a group needs at least one replica and one process, not "
                             f"{self.replicas}x{self.procs_per_replica}")

    @property
    def world_size(self) -> int:
        """How many processes join the rendezvous."""
        return self.replicas * self.procs_per_replica


def replica_env(group: Group, index: int) -> list[tuple[str, str]]:
    """Replica ``index``'s identity variables, in the order a reader expects them."""
    if not 0 <= index < group.replicas:
        raise ValueError(f"replica {index} is not in 0..{group.replicas - 1}")
    env = [(TASK_REPLICA, str(index)), (TASK_REPLICAS, str(group.replicas))]
    if group.procs_per_replica == 1:  # otherwise torchrun sets both in each process
        env += [(RANK, str(index)), (WORLD_SIZE, str(group.world_size))]
    env += [(MASTER_ADDR, group.master_addr), (MASTER_PORT, str(group.master_port)),
            (PET_NNODES, str(group.replicas)), (PET_NODE_RANK, str(index)),
            (PET_NPROC_PER_NODE, str(group.procs_per_replica)),
            (PET_MASTER_ADDR, group.master_addr), (PET_MASTER_PORT, str(group.master_port))]
    return env


def replica_names(group: Group) -> tuple[str, ...]:
    """The identity names a replica of this group holds."""
    return tuple(name for name, _ in replica_env(group, 0))


def differing(group: Group) -> list[str]:
    """The names whose value differs from replica to replica (each is the index)."""
    if group.replicas == 1:
        return []
    held = set(replica_names(group))
    return [name for name in INDEX_NAMES if name in held]


def reserved_message(name: str) -> str:
    """Why a user or a policy may not set ``name``."""
    return (f"{name} is set by the platform per replica (each replica's identity in its "
            "task's group) and cannot be set by a task or a policy")
