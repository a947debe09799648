"""What the run was measured on: the machine, its load, and the versions that matter."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import celery
import kombu
import redis


def machine(client: redis.Redis) -> dict[str, Any]:
    return {"nproc": len(os.sched_getaffinity(0)), "cpu_model": cpu_model(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                / 2**30, 1),
            "python": platform.python_version(),
            "redis_server": client.info("server")["redis_version"],
            "celery": celery.__version__, "kombu": kombu.__version__,
            "redis_py": redis.__version__, "flask": _dist_version("flask"),
            "waitress": _dist_version("waitress"),
            "loadavg_at_start": loadavg()}


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def loadavg() -> list[str]:
    """The 1, 5 and 15 minute load averages: how busy the neighbours were."""
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def _dist_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None
