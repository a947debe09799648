"""What the Slurm launcher needs on the workers' host, checked at start in seconds.

``make run`` (and every worker) asks :func:`setup_problems` before it starts anything:
a missing piece is said once, naming it, instead of every task failing a minute later
with a traceback per reconciler pass.  Checked, in order: Slurm's client commands;
``SLURM_CONF`` (the file it names, or the default ``/etc/slurm/slurm.conf``); munge
(the socket ``slurm.conf``'s ``AuthInfo`` names, or munge's default, answering); the
controller (``scontrol ping``, bounded by :data:`PING_SECONDS`); the shared directory
(``TASKENV_SLURM_DIR``, made if missing, writable).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CLIENTS = ("sbatch", "squeue", "scancel", "scontrol")
DEFAULT_CONF = "/etc/slurm/slurm.conf"
DEFAULT_MUNGE_SOCKET = "/run/munge/munge.socket.2"
PING_SECONDS = 10.0
_SOCKET = re.compile(r"^\s*AuthInfo\s*=\s*(?:.*,)?socket=([^,\s]+)", re.I | re.M)


def setup_problems(settings: Any) -> list[str]:
    """Each reason no job could be submitted from here, naming what is missing."""
    missing = [name for name in CLIENTS if shutil.which(name) is None]
    if missing:
        return [f"the slurm launcher needs Slurm's client commands on this host; missing: "
                f"{', '.join(missing)} (Debian: slurm-client)"]
    problems: list[str] = []
    conf = os.environ.get("SLURM_CONF") or DEFAULT_CONF
    text = ""
    try:
        text = Path(conf).read_text(errors="replace")
    except OSError as exc:
        named = "SLURM_CONF" if os.environ.get("SLURM_CONF") else "SLURM_CONF is unset and"
        problems.append(f"{named} {conf} cannot be read ({exc.strerror}): point SLURM_CONF "
                        "at the cluster's slurm.conf")
    munge = _munge_problem(text)
    if munge:
        problems.append(munge)
    if not problems:
        ping = _ping_problem()
        if ping:
            problems.append(ping)
    shared = _directory_problem(Path(settings.slurm_dir))
    if shared:
        problems.append(shared)
    return problems


def _munge_problem(conf_text: str) -> str | None:
    found = _SOCKET.search(conf_text)
    path = found.group(1) if found else DEFAULT_MUNGE_SOCKET
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(path)
        except OSError as exc:
            return (f"munge does not answer at {path} ({exc.strerror or exc}): start munged "
                    "with the cluster's key; Slurm authenticates every command through it")
    return None


def _ping_problem() -> str | None:
    env = {k: os.environ[k] for k in ("SLURM_CONF",) if k in os.environ}
    try:
        result = subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=PING_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return f"the Slurm controller did not answer scontrol ping in {PING_SECONDS:g}s"
    if " is UP" in result.stdout:
        return None
    said = (result.stdout + result.stderr).strip().splitlines()
    return (f"the Slurm controller is not reachable (scontrol ping: "
            f"{said[-1] if said else result.returncode}): check SLURM_CONF's SlurmctldHost")


def _directory_problem(directory: Path) -> str | None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".taskenv-check-"):
            pass
    except OSError as exc:
        return (f"TASKENV_SLURM_DIR {directory} is not a directory this account can write "
                f"({exc.strerror or exc}): it must be on a filesystem the nodes share")
    return None
