"""The containers.conf podman runs taskenv's pods with: the host's, plus the task limits.

``podman kube play`` (4.3) takes no ulimit or pids limit from a Pod manifest (Kubernetes
has none to give), so the platform's limits on processes, open files and file size
would not hold in a container.  Its configuration does: ``[containers]``
``pids_limit`` (the container's pids cgroup) and ``default_ulimits`` (rlimits the step
cannot raise).  The launcher writes the host's configuration again with those set from
the task limits and points every podman command it runs at it (``CONTAINERS_CONF``,
which replaces the host's file: hence the copy of everything else in it).
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from shared.task.limits import Maxima

SYSTEM_CONF = Path("/etc/containers/containers.conf")


def host_conf() -> dict[str, Any]:
    """The configuration podman would read without us (the operator's own file)."""
    path = Path(os.environ.get("CONTAINERS_CONF") or SYSTEM_CONF)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def with_limits(conf: dict[str, Any], maxima: Maxima) -> dict[str, Any]:
    """``conf`` with the task limits as the containers' pids limit and rlimits; its other
    ulimits (the host's ``nproc``, which runc needs set here) kept."""
    containers = dict(conf.get("containers", {}))
    ours = {"nofile": f"{maxima.open_files}:{maxima.open_files}",
            "fsize": f"{maxima.file_bytes}:{maxima.file_bytes}"}
    kept = [u for u in containers.get("default_ulimits", []) if u.split("=", 1)[0] not in ours]
    containers["default_ulimits"] = kept + [f"{name}={value}" for name, value in ours.items()]
    containers["pids_limit"] = maxima.pids
    return {**conf, "containers": containers}


def dumps(conf: dict[str, Any]) -> str:
    """TOML for what containers.conf holds: tables of strings, numbers, booleans and
    arrays of them (sub-tables as ``[a.b]``)."""
    lines: list[str] = []

    def table(name: str, body: dict[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, dict)}
        if name:
            lines.append(f"[{name}]")
        lines.extend(f"{json.dumps(k)} = {_value(v)}" for k, v in scalars.items())
        for key, sub in body.items():
            if isinstance(sub, dict):
                table(f"{name}.{json.dumps(key)}" if name else json.dumps(key), sub)

    table("", conf)
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # TOML's basic strings escape as JSON does
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise ValueError(f"containers.conf: cannot write {type(value).__name__} {value!r}")


def write(directory: Path, maxima: Maxima) -> Path:
    """The configuration file for this worker's podman commands; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "containers.conf"
    tmp = directory / "containers.conf.tmp"
    tmp.write_text(dumps(with_limits(host_conf(), maxima)), encoding="utf-8")
    tmp.replace(path)  # whole or absent: another worker may be starting a play with it
    return path
