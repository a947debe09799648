"""Launchers put a resolved workload into a container (or a process).

Which one runs is chosen by ``TASKENV_LAUNCHER``; each lives in its own module
and implements :class:`workers.launchers.base.Launcher`.
"""

from __future__ import annotations

from shared.config import Settings
from workers.launchers.base import Launcher


def make_launcher(settings: Settings) -> Launcher:
    name = settings.launcher
    if name == "local":
        from workers.launchers.local.launcher import LocalLauncher
        return LocalLauncher(settings)
    if name == "podman":
        from workers.launchers.podman.launcher import PodmanLauncher
        return PodmanLauncher(settings)
    if name == "kubernetes":
        from workers.launchers.kubernetes.launcher import KubernetesLauncher
        return KubernetesLauncher(settings)
    if name == "slurm":
        from workers.launchers.slurm.launcher import SlurmLauncher
        return SlurmLauncher(settings)
    if name == "dryrun":
        from workers.launchers.dryrun.launcher import DryRunLauncher
        return DryRunLauncher()
    raise ValueError(f"unknown launcher {name!r} (TASKENV_LAUNCHER)")
