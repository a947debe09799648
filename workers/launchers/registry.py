"""The registry of backends: which launchers there are, and the configured one.

Each backend is a folder of its own (``workers/launchers/<name>/``): its ``launcher``
module implements :class:`workers.launchers.base.Launcher`, its ``traits`` module says,
as plain data, what the API and the domain core need to know of it
(:class:`shared.task.backend_traits.BackendTraits`).  What several backends share is
in ``common/``.  ``TASKENV_LAUNCHER`` names one; :data:`BACKENDS` is the one list of
them, and nothing else in the system names a backend.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

from shared.config import Settings
from shared.task.backend_traits import BackendTraits
from workers.launchers.base import ChecksSetup, Launcher


@dataclass(frozen=True)
class Backend:
    package: str  # workers.launchers.<name>: its launcher and traits modules
    launcher_class: str


BACKENDS = {
    "local": Backend("workers.launchers.local", "LocalLauncher"),
    "podman": Backend("workers.launchers.podman", "PodmanLauncher"),
    "kubernetes": Backend("workers.launchers.kubernetes", "KubernetesLauncher"),
    "slurm": Backend("workers.launchers.slurm", "SlurmLauncher"),
    "dryrun": Backend("workers.launchers.dryrun", "DryRunLauncher"),
}


def _backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown launcher {name!r} (TASKENV_LAUNCHER: one of "
                         f"{', '.join(BACKENDS)})") from None


def _launcher_class(name: str) -> type:
    backend = _backend(name)
    return getattr(importlib.import_module(f"{backend.package}.launcher"),  # noqa: B009
                   backend.launcher_class)


def make_launcher(settings: Settings) -> Launcher:
    launcher: Launcher = _launcher_class(settings.launcher)(settings)
    return launcher


@cache
def traits(name: str) -> BackendTraits:
    """What the backend ``name`` declares of itself (loads its traits, not its launcher)."""
    found: BackendTraits = importlib.import_module(f"{_backend(name).package}.traits").TRAITS
    return found


@cache
def reserved_prefixes() -> tuple[str, ...]:
    """The variable prefixes any backend's own commands read.  A project policy may set
    none of them whichever backend runs today: policies outlive the choice of backend,
    and a site moving to Slurm must not find its projects already setting SLURM_*."""
    return tuple(sorted({p for name in BACKENDS for p in traits(name).reserved_prefixes}))


def setup_problems(settings: Settings) -> list[str]:
    """Why the configured backend cannot run any task here, said once at start; [] if
    it can (or if it has nothing to check before its first task)."""
    cls = _launcher_class(settings.launcher)
    if issubclass(cls, ChecksSetup):
        return list(cls.setup_problems(settings))
    return []
