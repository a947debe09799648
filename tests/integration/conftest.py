"""Real processes: a redis-server, one Celery worker per queue and the API.

Nothing is faked here: messages cross Redis between separate worker processes,
exactly as in ``make run``, whose process-starting functions these fixtures use.
The stack itself lives in tests/support/stack.py, shared with the fault tests; its names
are importable from here too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.stack import FINAL, HOSTILE, Stack, redis_server, running_stack
from workers.localstack import RedisServer

__all__ = ["FINAL", "HOSTILE", "Stack", "redis_server", "running_stack", "stack"]


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(redis_server, tmp_path_factory.mktemp("stack")) as running:
        yield running
