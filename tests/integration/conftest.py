"""Real processes: a redis-server, one Celery worker per queue and the API.

Nothing is faked here: messages cross Redis between separate worker processes,
exactly as in ``make run``, whose process-starting functions these fixtures use.
The stack itself lives in tests/support/stack.py, shared with the fault tests; its names
are importable from here too.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.support.stack import FINAL, HOSTILE, Stack, redis_server, running_stack
from workers.localstack import RedisServer

__all__ = ["FINAL", "HOSTILE", "Stack", "host_torch", "redis_server", "running_stack", "stack"]

# The Python the local launcher's sandboxes and the test cluster's Slurm steps run.
STEP_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(redis_server, tmp_path_factory.mktemp("stack")) as running:
        yield running


@pytest.fixture(scope="session")
def host_torch() -> None:
    """Fails (never skips) the ``torch`` tests when the steps' Python has no torch."""
    found = subprocess.run([STEP_PYTHON, "-c", "import torch"], capture_output=True, text=True,
                           timeout=120, check=False)
    if found.returncode != 0:
        why = (found.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.fail(f"the torch tests need torch for {STEP_PYTHON}, the Python the local and "
                    f"Slurm steps run ({why}): make test installs it, as {STEP_PYTHON} -m pip "
                    "install --break-system-packages torch==2.13.0 (the CPU build); deselect "
                    "them with -m 'not torch'", pytrace=False)
