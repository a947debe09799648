TAIL_KEPT = 64 * 1024  # of output past the cap, the last this many bytes are kept
# Room left in the budget for the note and the launcher's own lines (written around the
# output), so the whole stays under the store's limit and is never trimmed there.
RESERVED = 4 * 1024


class OutputCap:
    """What of a revision's output its log keeps: the head up to a budget, then the last
    :data:`TAIL_KEPT` bytes, and between them a line saying how much was dropped.

    Fed text in pieces of any size (already redacted); holds at most the tail's budget
    whatever the output's size or line structure.  ``limit`` is the whole log's budget;
    0 keeps everything.
    """

    def __init__(self, limit: int, tail: int = TAIL_KEPT) -> None:
        self.limit = limit
        self.tail_budget = min(tail, limit // 4)
        self.head_room = max(0, limit - self.tail_budget - RESERVED)
        self.tail: list[bytes] = []
        self.tail_size = 0
        self.dropped = 0

    def feed(self, text: str) -> str:
        """The part of ``text`` to store now; the rest is held as the tail or dropped."""
        if not self.limit:
            return text
        data = text.encode(errors="surrogatepass")
        now, later = data[:self.head_room], data[self.head_room:]
        self.head_room -= len(now)
        if later:
            self._hold(later)
        return now.decode(errors="ignore") if later else text

    def _hold(self, data: bytes) -> None:
        self.tail.append(data)
        self.tail_size += len(data)
        while self.tail_size - len(self.tail[0]) >= self.tail_budget:
            self.tail_size -= len(self.tail[0])
            self.dropped += len(self.tail.pop(0))
        if self.tail_size > self.tail_budget:  # trim the oldest piece to the budget
            extra = self.tail_size - self.tail_budget
            self.tail[0] = self.tail[0][extra:]
            self.tail_size -= extra
            self.dropped += extra

    def finish(self) -> str:
        """What is left to store once the output has ended: the note and the tail."""
        tail = b"".join(self.tail).decode(errors="ignore")  # cut characters at its edges
        self.tail, self.tail_size = [], 0
        if not self.dropped:
            return tail
        return f"\n{self.note()}\n{tail}"

    def note(self) -> str:
        """The line the log shows where output was dropped."""
        return f"taskenv: {self.reason()} here (the log keeps its start and its end)"

    def reason(self) -> str:
        """What the task's record says."""
        return (f"output cut: {self.dropped} bytes were dropped, past the log's limit of "
                f"{self.limit} bytes")
