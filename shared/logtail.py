"""A revision's output read from a byte offset, for a page that follows it live.

The log is one Redis string per revision (``TaskStore.append_log``), so the new
output since the last read is a ``GETRANGE`` from the offset the reader last got: a
poll costs what was written since, not the whole log.  When the store has cut the
log to its newest half (past ``TaskStore.LOG_LIMIT``) an old offset may lie past
the end: the reader then starts again from the start of what is kept (``reset``).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.client import NEVER_DECODE

from shared.keys import Keys

MAX_CHUNK = 256 * 1024  # one answer's worth; the reader asks again for the rest


@dataclass(frozen=True)
class Chunk:
    text: str
    offset: int  # where the next read starts (bytes)
    size: int  # the log's length now (bytes)
    reset: bool = False  # the text starts the log anew: replace what was shown


class LogTail:
    def __init__(self, client: redis.Redis, prefix: str = "taskenv") -> None:
        self.r = client
        self.keys = Keys(prefix)

    def size(self, task_id: str, revision: int) -> int:
        return int(self.r.strlen(self.keys.log(task_id, revision)))  # type: ignore[arg-type]

    def since(self, task_id: str, revision: int, offset: int) -> Chunk:
        """The output after ``offset`` bytes, whole UTF-8 characters only."""
        size = self.size(task_id, revision)
        reset = offset > size
        start = 0 if reset else offset
        if start == size:
            return Chunk("", start, size, reset)
        end = min(size, start + MAX_CHUNK) - 1
        # Bytes, even from a client that decodes: the range may end inside a character.
        data = self.r.execute_command("GETRANGE", self.keys.log(task_id, revision), start, end,
                                      **{NEVER_DECODE: True})
        text, used = whole_characters(bytes(data))
        return Chunk(text, start + used, size, reset)


def whole_characters(data: bytes) -> tuple[str, int]:
    """The text of ``data`` up to a character cut at its end, and the bytes it used."""
    for cut in range(4):  # a UTF-8 character is at most 4 bytes: at most 3 left over
        try:
            used = len(data) - cut
            return data[:used].decode(), used
        except UnicodeDecodeError:
            continue
    return data.decode(errors="replace"), len(data)
