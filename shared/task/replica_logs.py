"""A task's log when it has several replicas: each line prefixed with its replica's index.

One log per revision, as for any task (its size limit and retention unchanged):
every replica's lines, each as ``[replica k] text``, in the order they arrived.
``GET /tasks/{id}/logs?replica=k`` keeps replica ``k``'s lines, without the prefix.
A task of one replica keeps its log unprefixed, as before replicas existed.

Each replica's output is redacted on its own stream before it is prefixed, so a
secret cut across two writes of one replica is still hidden whole, and lines of
two replicas never interleave inside a line.
"""

from __future__ import annotations

import re

PREFIX = "[replica {index}] "
_LINE = re.compile(r"\[replica (\d+)\] ")


def prefixed(index: int, text: str) -> str:
    """Whole lines of one replica, each prefixed (``text`` ends with a line break or is
    the replica's last, unfinished line)."""
    head = PREFIX.format(index=index)
    lines = text.splitlines(keepends=True)
    return "".join(head + line for line in lines)


def only(text: str, index: int) -> str:
    """Replica ``index``'s lines of a prefixed log, without their prefix."""
    head = PREFIX.format(index=index)
    return "".join(line[len(head):] for line in text.splitlines(keepends=True)
                   if line.startswith(head))


class LinePrefixer:
    """Turns one replica's stream, cut anywhere, into prefixed whole lines."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.pending = ""

    def feed(self, text: str) -> str:
        """The whole lines ``text`` completes; a line without its end waits."""
        self.pending += text
        cut = self.pending.rfind("\n") + 1
        done, self.pending = self.pending[:cut], self.pending[cut:]
        return prefixed(self.index, done)

    def flush(self) -> str:
        """The last, unfinished line, ended: the replica's output is over."""
        rest, self.pending = self.pending, ""
        return prefixed(self.index, rest + "\n") if rest else ""
