"""What the API and the domain core know of a backend, as plain data.

A backend (``workers/launchers/<name>/``) declares its traits in its own ``traits.py``,
which imports nothing but this module; the registry (``workers.launchers.registry``)
finds them by name and :func:`workers.services.build_services` hands the configured
backend's to every process as ``Services.backend``.  So the API and ``shared/`` ask the
traits — never the configured launcher's name — and a new backend changes none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.env.identity import LOOPBACK


@dataclass(frozen=True)
class BackendTraits:
    name: str
    # Variables the backend's own commands read as their options (Slurm's SLURM_*,
    # SRUN_*): whoever sets them changes how every step is started.
    reserved_prefixes: tuple[str, ...] = ()
    # A task's replicas all start together on one host (the worker's own): a task larger
    # than one host, or than the host's run slots, is refused when it is created.
    one_host: bool = False
    # Where replica 0 of a task of several listens, as its replicas are told
    # (``{job}``: the task's job name).  A task of one is a world of one on loopback.
    replica_zero: str = LOOPBACK
    # The rendezvous port shown for a task of several when the node picks it at start
    # (Slurm's reserved port); None: the port the identity gives.
    master_port_shown: str | None = None
    # Whether ``resources.gpus`` reaches a mechanism of the backend's (Slurm's --gres,
    # Kubernetes' limits); a task asking for GPUs on one that has none is refused.
    gpus: bool = False
    # The backend runs a task's ``image`` as a runtime directory an admin registered
    # (TASKENV_RUNTIMES) on its hosts' own filesystem, not as a container image: a task
    # naming one that is not registered is refused when it is created.
    runtime_dirs: bool = False
    # The backend places a task's replicas on several nodes when it asks for them
    # (``nodes``), each job with a network of its own where replica 0 listens at this
    # address, the same on every node; None: a task's ``nodes`` above 1 is refused.
    nodes_master: str | None = None
    # Variables the backend sets on the node in each replica of a task of several, unless
    # the task's env sets them (Slurm: the interface to MASTER_ADDR for gloo and NCCL).
    node_chosen: tuple[str, ...] = ()

    def replica_zero_for(self, replicas: int, job: str, nodes: int = 1) -> str:
        if nodes > 1 and self.nodes_master is not None:
            return self.nodes_master
        return self.replica_zero.format(job=job) if replicas > 1 else LOOPBACK
