"""Small helpers the podman tests share: run podman, read ``env -0`` dumps."""

from __future__ import annotations

import subprocess


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)


def env_dumps(logs: str, count: int) -> list[dict[str, str]]:
    """``count`` consecutive ``env -0`` outputs, each as a dict; all must be the same size."""
    entries = logs.split("\0")
    assert entries[-1] == "", "output after the last env entry"
    entries = entries[:-1]
    assert len(entries) % count == 0, entries
    size = len(entries) // count
    chunks = [entries[i * size:(i + 1) * size] for i in range(count)]
    return [dict(entry.split("=", 1) for entry in chunk) for chunk in chunks]
