"""What a task may use: its ``resources`` with the platform's defaults and maxima.

Pure: quantities in Kubernetes' notation (cpu ``2``, ``0.5``, ``500m``; memory
``512Mi``, ``4Gi``, ``1G``, ``1048576``) become numbers, a missing request takes the
platform's default, and a request above the platform's maximum (or above what one
host of the local launcher has) is a :class:`~shared.errors.Problem` naming the field
and the limit, so a task that can never run is refused when it is created, not left
waiting.  Every launcher builds its limits from :func:`limits_for`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from shared.errors import Problem, ResourcesInvalid
from shared.task.backend_traits import BackendTraits

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?|\.[0-9]+)([A-Za-z]{0,2})")
MIN_MEMORY = 16 * 2**20  # less cannot start a shell in a sandbox


class BadQuantity(ValueError):
    """Not a quantity in Kubernetes' notation."""


def parse_bytes(text: str) -> int:
    """``512Mi`` → 536870912; plain numbers are bytes."""
    number, suffix = _split(text)
    scale = BINARY.get(suffix) or DECIMAL.get(suffix) or (1 if suffix == "" else None)
    if scale is None:
        raise BadQuantity(f"{text!r} is not a size: use a number of bytes or a suffix "
                          "Ki, Mi, Gi, Ti (powers of 1024) or k, M, G, T")
    return int(number * scale)


def parse_millicpu(text: str) -> int:
    """``2`` → 2000, ``0.5`` → 500, ``500m`` → 500."""
    number, suffix = _split(text)
    if suffix not in ("", "m"):
        raise BadQuantity(f"{text!r} is not a number of cores: use 2, 0.5 or 500m")
    return int(number if suffix == "m" else number * 1000)


def _split(text: str) -> tuple[Decimal, str]:
    found = _QUANTITY.fullmatch(text.strip())
    if not found:
        raise BadQuantity(f"{text!r} is not a quantity")
    try:
        return Decimal(found.group(1)), found.group(2)
    except InvalidOperation:
        raise BadQuantity(f"{text!r} is not a quantity") from None


def show_bytes(count: int) -> str:
    for suffix, scale in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale}{suffix}"
    return f"{count} bytes"


def show_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


@dataclass(frozen=True)
class Limits:
    """Everything one task (all its steps together) may use at once."""

    millicpu: int
    memory_bytes: int
    gpus: int
    pids: int
    open_files: int
    file_bytes: int  # the largest file a step may write (RLIMIT_FSIZE)
    tmp_bytes: int  # its /tmp, RAM-backed: counts against memory too
    home_bytes: int  # its home (local launcher), RAM-backed too

    def describe(self) -> str:
        return (f"cpu {show_cpu(self.millicpu)}, memory {show_bytes(self.memory_bytes)}, "
                f"{self.pids} processes, {self.open_files} open files")


@dataclass(frozen=True)
class Maxima:
    """The platform's defaults and maxima, from the settings."""

    default_cpu: int
    default_memory: int
    max_cpu: int
    max_memory: int
    max_gpus: int
    pids: int
    open_files: int
    file_bytes: int
    tmp_bytes: int
    home_bytes: int
    cpu_from: str = "the platform's maximum (TASKENV_TASK_MAX_CPU)"
    memory_from: str = "the platform's maximum (TASKENV_TASK_MAX_MEMORY)"

    @classmethod
    def from_settings(cls, settings: Any) -> Maxima:
        return cls(
            default_cpu=parse_millicpu(settings.task_default_cpu),
            default_memory=parse_bytes(settings.task_default_memory),
            max_cpu=parse_millicpu(settings.task_max_cpu),
            max_memory=parse_bytes(settings.task_max_memory),
            max_gpus=int(settings.task_max_gpus), pids=int(settings.task_max_processes),
            open_files=int(settings.task_max_open_files),
            file_bytes=parse_bytes(settings.task_max_file_size),
            tmp_bytes=parse_bytes(settings.task_tmp_size),
            home_bytes=parse_bytes(settings.task_home_size))

    def within(self, cpu: int | None = None, memory: int | None = None) -> Maxima:
        """These maxima, lowered to what one host has (the local launcher's case)."""
        host = "what one host of the local launcher has"
        changes: dict[str, Any] = {}
        if cpu and cpu < self.max_cpu:
            changes.update(max_cpu=cpu, cpu_from=host)
        if memory and memory < self.max_memory:
            changes.update(max_memory=memory, memory_from=host)
        return replace(self, **changes)


def resource_problems(resources: Mapping[str, Any] | None, maxima: Maxima) -> list[Problem]:
    """Every reason the requested resources cannot be had, all at once."""
    res = resources or {}
    problems: list[Problem] = []
    cpu = _parsed(res.get("cpu"), parse_millicpu, "resources.cpu", problems)
    memory = _parsed(res.get("memory"), parse_bytes, "resources.memory", problems)
    if cpu is not None and not 0 < cpu <= maxima.max_cpu:
        problems.append(Problem("resource_limit", f"resources.cpu asks for {show_cpu(cpu)} "
                                f"cores; a task may have from 1m to {show_cpu(maxima.max_cpu)}, "
                                f"{maxima.cpu_from}",
                                field="resources.cpu", limit=maxima.max_cpu))
    if memory is not None and not MIN_MEMORY <= memory <= maxima.max_memory:
        problems.append(Problem(
            "resource_limit", f"resources.memory asks for {show_bytes(memory)}; a task may "
            f"have from {show_bytes(MIN_MEMORY)} to {show_bytes(maxima.max_memory)}, "
            f"{maxima.memory_from}",
            field="resources.memory", limit=maxima.max_memory))
    gpus = int(res.get("gpus") or 0)
    if gpus > maxima.max_gpus:
        problems.append(Problem("resource_limit", f"resources.gpus asks for {gpus}; a task "
                                f"may have at most {maxima.max_gpus}",
                                field="resources.gpus", limit=maxima.max_gpus))
    return problems


def gpu_problems(resources: Mapping[str, Any] | None, backend: BackendTraits,
                 maxima: Maxima) -> list[Problem]:
    """GPUs asked of a backend that has no way to give them: refused now, rather than a
    task that runs without the GPUs it asked for.  (More than the platform allows is
    :func:`resource_problems`' to say, once.)"""
    gpus = int((resources or {}).get("gpus") or 0)
    if gpus <= 0 or backend.gpus or gpus > maxima.max_gpus:
        return []
    return [Problem("resource_limit", f"resources.gpus asks for {gpus}; the {backend.name} "
                    "launcher gives a task no GPU (TASKENV_LAUNCHER: kubernetes and slurm do)",
                    field="resources.gpus", limit=0)]


def one_host_problems(resources: Mapping[str, Any] | None, replicas: int, maxima: Maxima,
                      host_memory: int) -> list[Problem]:
    """A task whose replicas all run on one host (the local launcher) asks, together, for
    its replicas times each one's memory (asked, or the default): more than the host has
    could never run whole, however long it waited.  Cores are shares, not reservations:
    replicas that ask for more cores than the host has run, only slower."""
    if replicas <= 1:
        return []  # one replica: resource_problems judged it against the host already
    res = resources or {}
    memory = _parsed(res.get("memory"), parse_bytes, "resources.memory", []) \
        or maxima.default_memory
    if memory * replicas <= host_memory:
        return []
    return [Problem(
        "resource_limit", f"resources.memory: {replicas} replicas of {show_bytes(memory)} "
        f"ask for {show_bytes(memory * replicas)} on one host, which has "
        f"{show_bytes(host_memory)} (the local launcher runs a task's replicas on one host)",
        field="resources.memory", limit=host_memory // replicas)]


def _parsed(value: Any, parse: Any, field: str, problems: list[Problem]) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(parse(str(value)))
    except BadQuantity as exc:
        problems.append(Problem("resource_quantity", f"{field}: {exc}", field=field))
        return None


def limits_for(resources: Mapping[str, Any] | None, maxima: Maxima) -> Limits:
    """The limits a launcher enforces: the request, or the default, never above the maxima.

    A request refused at creation never gets here; one stored before a maximum was
    lowered is clamped to it rather than run without limits.
    """
    res = resources or {}
    problems = resource_problems(res, replace(maxima, max_cpu=10**12, max_memory=2**62,
                                              max_gpus=10**6))
    if problems:  # stored before quantities were checked: refuse, never run unlimited
        raise ResourcesInvalid("the task's resources cannot be had",
                               [p for p in problems if p.rule == "resource_quantity"] or problems)
    cpu = parse_millicpu(str(res["cpu"])) if res.get("cpu") else maxima.default_cpu
    memory = parse_bytes(str(res["memory"])) if res.get("memory") else maxima.default_memory
    return Limits(millicpu=min(cpu, maxima.max_cpu), memory_bytes=min(memory, maxima.max_memory),
                  gpus=min(int(res.get("gpus") or 0), maxima.max_gpus), pids=maxima.pids,
                  open_files=maxima.open_files, file_bytes=maxima.file_bytes,
                  tmp_bytes=min(maxima.tmp_bytes, memory),
                  home_bytes=min(maxima.home_bytes, memory))


def host_capacity(settings: Any) -> tuple[int, int]:
    """Cores (in millicpu) and memory one host of the local launcher has: the settings,
    or this machine."""
    return _host_capacity(settings.local_host_cpu, settings.local_host_memory)


@functools.lru_cache(maxsize=8)
def _host_capacity(cpu_setting: str | None, memory_setting: str | None) -> tuple[int, int]:
    # Read once per process: every POST asks, and a host's cores and memory stay put.
    cpu = parse_millicpu(cpu_setting) if cpu_setting else (os.cpu_count() or 1) * 1000
    if memory_setting:
        return cpu, parse_bytes(memory_setting)
    with open("/proc/meminfo") as meminfo:
        total_kib = int(meminfo.readline().split()[1])  # MemTotal is the first line
    return cpu, total_kib * 1024


def platform_maxima(settings: Any, one_host: bool) -> Maxima:
    """The maxima a new task is judged against: the platform's, and, where the backend
    runs a task on one host (``one_host``, the local launcher), no more than one of its
    hosts has."""
    maxima = Maxima.from_settings(settings)
    if one_host:
        cpu, memory = host_capacity(settings)
        maxima = maxima.within(cpu=cpu, memory=memory)
    return maxima
