"""A task's log: whose each line is (the platform's or a step's), and which replica's.

**The platform's own lines** (``==> step 2/3: python3``, ``taskenv: step 1 was
killed...``) start with :data:`MARK`, a control character (U+001F, the unit separator)
that a step's output never holds: the runner writes a step's output through
:func:`step_output`, which shows a U+001F the step printed as U+241F (``␟``).  So a
step that prints ``==> step 2/2`` prints a line of its own, and every view can tell
them apart (:func:`pieces`): the console shows the platform's lines in their own style,
the CLI too, and the JSON and text answers keep the mark as it is.  U+001E, the record
separator, would have served as well but is a line boundary for ``str.splitlines``.

**Replicas.**

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
from collections.abc import Iterable
from typing import Protocol

PREFIX = "[replica {index}] "
_LINE = re.compile(r"\[replica (\d+)\] ")

MARK = "\x1f"  # starts each of the platform's own lines
SHOWN_MARK = "\u241f"  # what a step's own U+001F is stored as


def platform_line(text: str) -> str:
    """One line of the platform's, marked and ended; a line break or other control
    character in ``text`` (an argv[0] may hold one) is escaped, so the line stays one."""
    shown = "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in text)
    return f"{MARK}{shown}\n"


def platform_lines(text: str) -> str:
    """A launcher's message of one or more lines, each marked as the platform's: what a
    step's output could never be, whatever names or paths the message quotes."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    marked: list[str] = []
    for line in lines:  # a replica's line keeps its prefix first, as ``only`` reads it
        head = _LINE.match(line)
        cut = head.end() if head else 0
        marked.append(line[:cut] + platform_line(line[cut:]))
    return "".join(marked)


def step_output(text: str) -> str:
    """A step's output as its log keeps it: never the platform's mark."""
    return text.replace(MARK, SHOWN_MARK) if MARK in text else text


def as_printed(secrets: Iterable[str]) -> list[str]:
    """Secret values as a step's output may hold them once through :func:`step_output`
    (with the mark shown): each value, and its shown form where that differs.  A redactor
    given these hides a secret holding a U+001F too."""
    values = list(secrets)
    return values + [step_output(v) for v in values if MARK in v]


class Capped(Protocol):
    """What :func:`marked_note` needs of ``shared.store.logtail.OutputCap``."""

    dropped: int

    def finish(self) -> str: ...

    def note(self) -> str: ...


def marked_note(cap: Capped) -> str:
    """What a capped log keeps of the output once it has ended (``cap.finish()``), the
    cap's note where output was dropped marked as the platform's line it is."""
    rest = cap.finish()
    if not cap.dropped:
        return rest
    return rest.replace(f"\n{cap.note()}\n", "\n" + platform_line(cap.note()), 1)


def pieces(text: str, platform_first: bool = False) -> list[tuple[str, bool]]:
    """``text`` (a log, or a piece of one) as ``(text, the platform's?)`` in order, the
    marks removed: a platform piece runs from its mark to the end of its line, line end
    included.  ``platform_first``: ``text`` goes on with a platform line the text before
    it left unfinished (a log read in chunks)."""
    found: list[tuple[str, bool]] = []
    pos = 0
    if platform_first:
        end = text.find("\n")
        pos = len(text) if end == -1 else end + 1
        if pos:
            found.append((text[:pos], True))
    while (at := text.find(MARK, pos)) != -1:
        if at > pos:
            found.append((text[pos:at], False))
        end = text.find("\n", at)
        end = len(text) if end == -1 else end + 1
        found.append((text[at + 1:end], True))
        pos = end
    if pos < len(text):
        found.append((text[pos:], False))
    return found


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
