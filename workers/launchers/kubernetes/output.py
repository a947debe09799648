"""A pod's log read while its container runs, through the API server's log endpoint.

The endpoint has no byte offset to go on from; it has ``sinceTime`` (the API server
hands it on to the kubelet to the second), ``timestamps=true`` (each line begins with
the time it was written) and ``limitBytes``.  So a reader keeps the second its last
answer began at and how many bytes of that answer it has taken, and asks again from
that second for those bytes and a chunk more: the log only grows, so the answer begins
with the same bytes, which are skipped.  Once it has taken lines of a later second, it
asks from that second on, so what is asked again is at most one second's output (and
never more than the log's budget, past which nothing is read).  Whole lines are taken;
a line longer than a read is taken in pieces.  A line's time is taken off before its
text goes on (:class:`~workers.launchers.common.stream.OutputStream`: the step's mark
shown as text, secrets hidden on the stream, a replica's lines prefixed, the budget).

The place is kept in this process's memory: a reconciler that starts while a pod runs
reads that pod's log from the second it started at, and says so in the log (output the
pod printed before and the last reconciler had not read is not in it).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from workers.launchers.common.stream import OutputStream

# A line of a log asked with timestamps=true: its time (the second, then what follows it).
LINE_TIME = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d) ")
READ_LIMIT_TIMES = 8  # a log's reads send at most this many times its budget, times included
ADOPTED = ("taskenv: the reconciler started while this ran: what was printed before {since} "
           "and not read by the one before it is not in this log")
OVER_READ = ("taskenv: output cut: reading this log took {sent} bytes, {times} times its "
             "budget of {budget} (a line's time counts too); the rest was not read")

# since (an RFC 3339 second, None: from the start), how many bytes: the answer, or None
# when there is no log to read yet (a container still waiting).
Fetch = Callable[[str | None, int], bytes | None]


@dataclass
class PodLog:
    """One pod's log, read from where the last read stopped."""

    pod: str
    stream: OutputStream
    since: str | None = None  # the second the answers begin at (None: the log's start)
    skip: int = 0  # bytes of such an answer already taken
    in_line: bool = False  # what was taken ends inside a line (its time already off)
    sent: int = 0  # bytes the API server sent for this log, in all
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))
    got: int = 0  # new bytes the last read took
    more: bool = False  # the last answer was cut at its limit: the log may hold more

    @classmethod
    def adopted(cls, pod: str, stream: OutputStream, since: str) -> tuple[PodLog, str]:
        """A reader of a pod that ran before this process started: from ``since`` on, and
        the line saying so."""
        return cls(pod, stream, since), stream.say(ADOPTED.format(since=since))

    def read(self, fetch: Fetch, most: int, ended: bool = False) -> str:
        """What the log gained since the last read, from an answer of at most the bytes
        already taken from its second and ``most`` more, as the log keeps it.  Whole lines,
        unless the container has ``ended`` (its last line may have no end)."""
        self.got, self.more = 0, False
        if self.stream.cut:
            return ""
        if self.sent > READ_LIMIT_TIMES * self.stream.budget:
            self.stream.cut = True
            return self.stream.say(OVER_READ.format(
                sent=self.sent, times=READ_LIMIT_TIMES, budget=self.stream.budget))
        limit = self.skip + most
        data = fetch(self.since, limit)
        if data is None or len(data) <= self.skip:
            return ""
        self.sent += len(data)
        self.more = len(data) >= limit
        new = data[self.skip:]
        end = len(new) if ended and not self.more else new.rfind(b"\n") + 1
        if not end:
            if len(data) < limit:
                return ""  # a line still being written: the next read takes it whole
            end = len(new)  # a line longer than a read: in pieces
        taken = data[:self.skip + end]
        text = self._text(taken, self.skip)
        self._move(taken)
        self.got = end
        return self.stream.feed(self.decoder.decode(text))

    def rest(self, fetch: Fetch, most: int) -> str:
        """Everything left of the log, a read at a time, and what the stream held back:
        the container has ended."""
        parts = []
        while True:
            parts.append(self.read(fetch, most, ended=True))
            if not (self.got and self.more) or self.stream.cut:
                break
        parts.append(self.stream.feed(self.decoder.decode(b"", final=True)))
        return "".join(parts) + self.stream.finish()

    def _text(self, taken: bytes, start: int) -> bytes:
        """The output in ``taken[start:]``, each line's time taken off."""
        out: list[bytes] = []
        pos = start
        if self.in_line:  # the rest of a line whose time was taken off before
            stop = taken.find(b"\n", pos)
            stop = len(taken) if stop == -1 else stop + 1
            out.append(taken[pos:stop])
            pos = stop
        while pos < len(taken):
            found = LINE_TIME.match(taken, pos)
            begin = found.end() if found else pos
            stop = taken.find(b"\n", begin)
            stop = len(taken) if stop == -1 else stop + 1
            out.append(taken[begin:stop])
            pos = stop
        return b"".join(out)

    def _move(self, taken: bytes) -> None:
        """Ask from the second of the last line taken on: skip what of it was taken."""
        starts: list[tuple[int, str]] = []
        pos = 0
        while pos < len(taken):
            found = LINE_TIME.match(taken, pos)
            if found:
                starts.append((pos, found.group(1).decode() + found.group(2).decode()))
            stop = taken.find(b"\n", pos)
            pos = len(taken) if stop == -1 else stop + 1
        self.in_line = not taken.endswith(b"\n")
        if not starts or starts[-1][1] == self.since:
            self.skip = len(taken)
            return
        second = starts[-1][1]
        first = next(at for at, when in starts if when == second)
        self.since, self.skip = second, len(taken) - first
