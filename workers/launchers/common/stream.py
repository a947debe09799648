"""One replica's output on its way into the task's log while the step runs, for a launcher
that reads it from its backend a piece at a time (podman's container log file, a pod's log
on Kubernetes) rather than from a runner of its own.

Each piece goes through what the local runner does to a step's output: a step's U+001F
is shown as text (``step_output``: only the platform's lines carry the mark), secret
values are hidden on the stream (:class:`~shared.secrets.StreamRedactor`: a secret cut
across two reads is still hidden whole, the tail that could begin one held back until
the next piece or the end), and a task of several replicas has each line prefixed with
its replica's index once the line is whole.  What a replica's output may take of the log
is its share of the log's budget: past it, the rest is not read, the piece that reaches
it is cut (a secret the cut falls inside is dropped, never shown in part), and a line of
the platform's says so.
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.secrets import StreamRedactor
from shared.store.logtail import whole_characters
from shared.task.replica_logs import (
    LinePrefixer,
    as_printed,
    platform_line,
    platform_lines,
    prefixed,
    step_output,
)


def cut_note(kept: int) -> str:
    """Said where the output was read only up to its budget."""
    return (f"taskenv: output cut: the log keeps the first {kept} bytes of this output; "
            "the rest was not read")


class OutputStream:
    """One replica's output, fed in pieces of text as it is read, given back as the log
    keeps it.  ``replica``: its index in a task of several (each line prefixed), None for
    a task of one.  ``taken``: bytes of the budget an earlier reader already used."""

    def __init__(self, secrets: Iterable[str], budget: int, replica: int | None = None,
                 taken: int = 0, cut: bool = False) -> None:
        self.redactor = StreamRedactor(as_printed(secrets))
        self.prefixer = LinePrefixer(replica) if replica is not None else None
        self.replica = replica
        self.budget, self.taken, self.cut = budget, taken, cut
        self.at_line_start = True  # the last text given back ended a line (or none was)

    def feed(self, text: str) -> str:
        """``text``, the step's output as it came, as the log keeps it; nothing once the
        budget is spent.  The piece that spends it is cut there, and the note follows."""
        if self.cut:
            return ""
        data = text.encode(errors="surrogatepass")
        if self.taken + len(data) <= self.budget:
            self.taken += len(data)
            return self._shown(text)
        head = whole_characters(data[:self.budget - self.taken])[0]
        self.taken, self.cut = self.budget, True
        shown = self._shown(head)
        self.redactor = StreamRedactor(())  # its tail may begin a secret: dropped
        return shown + self.say(cut_note(self.budget))

    def say(self, message: str) -> str:
        """A line of the platform's, after the replica's line in progress is ended."""
        ended = self.prefixer.flush() if self.prefixer is not None else (
            "" if self.at_line_start else "\n")
        self.at_line_start = True
        if self.replica is None:
            return ended + platform_line(message)
        return ended + platform_lines(prefixed(self.replica, message + "\n"))

    def finish(self) -> str:
        """What is held back, once the output has ended: the redactor's tail and the last
        unfinished line (ended, for a replica's)."""
        rest = self._shown_text(self.redactor.flush())
        if self.prefixer is not None:
            rest += self.prefixer.flush()
        return rest

    def _shown(self, text: str) -> str:
        return self._shown_text(self.redactor.feed(step_output(text)))

    def _shown_text(self, redacted: str) -> str:
        if self.prefixer is not None:
            return self.prefixer.feed(redacted)
        if redacted:
            self.at_line_start = redacted.endswith("\n")
        return redacted
