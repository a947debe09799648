"""Following a task: its states and its output as they come, until it is final.

A revision superseded by a later one (an env change, a rerun) is followed into that
one: a line says so, and the new revision's states and output follow, until the task
is final.  Once a revision is resolved (its scripts read by the doctor), ``resolved``
is called with it, before any of its output is printed.

Each poll reads the task (with ``If-None-Match``: a ``304`` while nothing changed),
then the log from the byte offset already printed (``GET /tasks/{id}/logs?offset=n``,
as the console's live page does): a poll costs what was written since, and a step's
output appears while the step runs.  Polls come
every ``interval`` seconds after a change, backing off to ``MAX_INTERVAL`` while
nothing changes.  A brief outage of the API (no answer, 429, 502-504) does not end a
follow: the poll is retried for ``patience`` seconds before the error is reported.
"""

from __future__ import annotations

import functools
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
# The states of a revision the policy stage has not looked at yet: past them, the doctor's
# findings on it are known (or it ended before, and has none).
UNRESOLVED = frozenset({"pending", "validated"})
# The rules of the doctor's findings among a revision's warnings and errors.
DOCTOR_RULES = ("doctor.", "rule.documented")


def resolved(doc: dict[str, Any]) -> bool:
    """The revision is past validation and policy (or ended before them)."""
    return doc.get("status", doc.get("state")) not in UNRESOLVED


def by_doctor(problem: dict[str, Any]) -> bool:
    return str(problem.get("rule") or "").startswith(DOCTOR_RULES)


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

    def task_again(self, task_id: str, last: dict[str, Any] | None,
                   etag: str | None) -> tuple[dict[str, Any], str | None]:
        """The task as it is now: a ``304`` to ``If-None-Match`` keeps ``last``."""
        found: tuple[dict[str, Any] | None, str | None] = self.retrying(
            lambda: self.client.task_if_changed(task_id, etag if last is not None else None))
        doc, etag = found
        if doc is not None:
            return doc, etag
        if last is not None:
            return last, etag
        return self.task(task_id), etag

    def drain(self, task_id: str, revision: int, offset: int,
              write: Callable[[str], None], replica: int | None = None) -> tuple[int, bool]:
        """Print the output after ``offset``, every chunk of it; (new offset, any printed)."""
        printed = False
        while True:
            text, after, skipped = self.retrying(
                functools.partial(self.client.logs_since, task_id, revision, offset, replica))
            if skipped:
                self.progress.print(Text(f"[{skipped} bytes of output were dropped before "
                                         "they could be shown]", style="yellow"))
            if text:
                write(text)
                printed = True
            if after == offset:
                return after, printed
            offset = after

    def stream(self, task_id: str, revision: int, write: Callable[[str], None],
               replica: int | None = None,
               on_resolved: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Print each state the task passes from ``revision`` on (on the progress console)
        and its output as it grows (through ``write``), until the task is final; a revision
        superseded by a later one is followed into it.  ``on_resolved`` is called once per
        revision, with the task, when it is first read resolved, before its output.  The
        last state read."""
        self.started, offset, last, pause = self.clock(), 0, None, self.interval
        doc: dict[str, Any] | None = None
        etag: str | None = None
        told = 0  # the last revision ``on_resolved`` was called for
        while True:
            # Read before the logs: when final, the logs are complete.  Unchanged: a 304.
            doc, etag = self.task_again(task_id, doc, etag)
            if doc["revision"] > revision:
                # What the superseded revision printed before it stopped, then the new one.
                self.drain(task_id, revision, offset, write, replica)
                self.progress.print(Text(shown(
                    f"task {task_id}: revision {revision} was superseded by revision "
                    f"{doc['revision']}")))
                revision, offset = doc["revision"], 0
            state = (doc["status"], doc["revision"])
            if state != last:
                self.progress.print(Text(shown(self.label(task_id, doc))))
            if on_resolved is not None and told < revision and resolved(doc):
                told = revision
                on_resolved(doc)
            printed = False
            if doc["status"] != "rejected":  # a rejected revision never ran: no output
                offset, printed = self.drain(task_id, revision, offset, write, replica)
            if is_final(doc["status"]):
                return doc
            if state != last or printed:
                last, pause = state, self.interval
                self.sleep(pause)
            else:
                self.sleep(pause)
                pause = min(pause * 1.5, MAX_INTERVAL)

    def until_resolved(self, task_id: str, revision: int, limit: float) -> dict[str, Any]:
        """The task once ``revision`` is resolved (or ended), superseded by a later
        revision, or ``limit`` seconds have passed, whichever comes first: polled as a
        follow polls, a ``304`` while nothing changed."""
        deadline, pause = self.clock() + limit, self.interval
        doc: dict[str, Any] | None = None
        etag: str | None = None
        while True:
            doc, etag = self.task_again(task_id, doc, etag)
            if doc["revision"] != revision or resolved(doc) or self.clock() >= deadline:
                return doc
            self.sleep(min(pause, max(0.0, deadline - self.clock())))
            pause = min(pause * 1.5, MAX_INTERVAL)

    def label(self, task_id: str, doc: dict[str, Any]) -> str:
        elapsed = self.clock() - self.started
        return f"task {task_id} revision {doc['revision']}: {doc['status']} ({elapsed:.1f} s)"
