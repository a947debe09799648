"""What the worker tests share: stores on fakeredis, hooks that record, workloads."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import fakeredis
import pytest

from shared.policy.model import Resolved
from shared.policy.store import PolicyStore
from shared.secrets import Cipher, new_key
from shared.store.tasks import TaskStore
from shared.task.workload import Workload
from workers.launchers.base import Hooks


@pytest.fixture
def tasks() -> TaskStore:
    return TaskStore(fakeredis.FakeRedis(decode_responses=True), cipher=Cipher([new_key()]))


@pytest.fixture
def policies(tasks: TaskStore) -> PolicyStore:
    return PolicyStore(tasks.r, cipher=tasks.cipher)


class RecordingHooks:
    """Hooks for a launch that remember the start signals and every log line."""

    def __init__(self) -> None:
        self.started = 0
        self.lines: list[str] = []
        self.hooks = Hooks(started=self._started, log=self.lines.append)

    def _started(self) -> None:
        self.started += 1

    @property
    def text(self) -> str:
        return "".join(self.lines)


def build_workload(steps: Sequence[Sequence[str]], env: Mapping[str, str] | None = None,
                   secrets: Mapping[str, str] | None = None, **fields: Any) -> Workload:
    """A workload of user variables ``env`` and protected secrets ``secrets``; ``fields``
    override the rest (a fresh task id, revision 1)."""
    variables = [Resolved(k, v, "user") for k, v in (env or {}).items()]
    variables += [Resolved(k, v, "protected", (), True) for k, v in (secrets or {}).items()]
    defaults: dict[str, Any] = {"task_id": uuid.uuid4().hex, "revision": 1, "name": "train",
                                "policy_version": 1}
    return Workload(steps=tuple(tuple(step) for step in steps), env=tuple(variables),
                    **{**defaults, **fields})
