"""Following a task: poll its state until it is final, with a live status line.

A brief outage of the API (no answer, 429, 502-504) does not end a follow: the
poll is retried for ``patience`` seconds before the error is reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.text import Text

from cli.client import Client
from cli.errors import ApiError
from cli.outcome import is_final
from cli.render import shown

MAX_INTERVAL = 2.0


def new_output(seen: str, text: str) -> str:
    """What to print of ``text`` when ``seen`` was printed already."""
    return text[len(seen):] if text.startswith(seen) else text


def finished(doc: dict[str, Any], revision: int) -> bool:
    """Final for the revision followed, or superseded by a later revision."""
    return doc["revision"] > revision or is_final(doc["status"])


@dataclass
class Follower:
    client: Client
    progress: Console
    interval: float = 0.3
    patience: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False, default=0.0)

    def retrying(self, call: Callable[[], Any]) -> Any:
        """``call()``, asked again while the API is briefly unreachable."""
        deadline = self.clock() + self.patience
        while True:
            try:
                return call()
            except ApiError as exc:
                if not exc.transient or self.clock() > deadline:
                    raise
                self.sleep(self.interval)

    def task(self, task_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = self.retrying(lambda: self.client.task(task_id))
        return doc

    def logs(self, task_id: str, revision: int) -> str:
        text: str = self.retrying(lambda: self.client.logs(task_id, revision))
        return text

    def wait(self, seconds: float) -> float:
        self.sleep(seconds)
        return min(seconds * 1.5, MAX_INTERVAL)

    def until_final(self, task_id: str, revision: int) -> dict[str, Any]:
        """Poll until ``revision`` of the task is final; print each state it passes."""
        self.started, last, pause = self.clock(), None, self.interval
        with self.progress.status(Text(shown(f"task {task_id}: submitted"))) as line:
            while True:
                doc = self.task(task_id)
                state = (doc["status"], doc["revision"])
                if state != last:
                    self.progress.print(Text(shown(self.label(task_id, doc))))
                    last, pause = state, self.interval
                line.update(Text(shown(self.label(task_id, doc))))
                if finished(doc, revision):
                    return doc
                pause = self.wait(pause)

    def stream_logs(self, task_id: str, revision: int,
                    write: Callable[[str], None]) -> dict[str, Any]:
        """Print the revision's output as it grows, until the revision is final."""
        seen, pause = "", self.interval
        while True:
            doc = self.task(task_id)  # read before the logs: when final, the logs are complete
            text = self.logs(task_id, revision)
            if text != seen:
                write(new_output(seen, text))
                seen, pause = text, self.interval
            if finished(doc, revision):
                return doc
            pause = self.wait(pause)

    def label(self, task_id: str, doc: dict[str, Any]) -> str:
        elapsed = self.clock() - self.started
        return f"task {task_id} revision {doc['revision']}: {doc['status']} ({elapsed:.1f} s)"
