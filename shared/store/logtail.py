"""A revision's output: appended and trimmed in one step, read from a byte offset.

The log is one Redis string per revision, so the new output since the last read is a
``GETRANGE`` from the offset the reader last got: a poll costs what was written since,
not the whole log.  Past a limit (``TaskStore.LOG_LIMIT``) only the newest half is kept;
a second key counts the bytes trimming has dropped from the front.  Offsets count from
the first byte ever written, so they stay valid across trims: a reader behind what was
dropped is told how many bytes it missed (``skipped``) and goes on from the oldest kept
byte, instead of being sent text again or losing its place.

Appending and trimming are one Lua script, and so is reading the count with the bytes:
a reader never sees a log trimmed but not yet counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.client import NEVER_DECODE
from redis.commands.core import Script

from shared.keys import Keys

MAX_CHUNK = 256 * 1024  # one answer's worth; the reader asks again for the rest

# KEYS: log, cut.  ARGV: text, limit.  Keeps the newest half past the limit, from the
# start of a character (a UTF-8 character has at most 3 continuation bytes), and adds
# what it dropped to the cut.
APPEND = r"""
local log, cut, text, limit = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local size = redis.call('APPEND', log, text)
if size <= limit then return size end
local tail = redis.call('GETRANGE', log, -math.max(1, math.floor(limit / 2)), -1)
local partial = string.match(tail, '^[\128-\191]?[\128-\191]?[\128-\191]?')
tail = string.sub(tail, #partial + 1)
redis.call('SET', log, tail)
redis.call('INCRBY', cut, size - #tail)
return #tail
"""

# KEYS: log, cut.  ARGV: offset, most bytes.  Returns where the bytes start (the offset,
# or the oldest kept byte when the offset was dropped or lies past the end), the log's
# end, and the bytes.
READ = r"""
local log, cut_key, offset, most = KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2])
local cut = tonumber(redis.call('GET', cut_key) or '0')
local size = cut + redis.call('STRLEN', log)
local start = offset
if start < cut or start > size then start = cut end
local last = math.min(size, start + most) - 1
if last < start then return {start, size, ''} end
return {start, size, redis.call('GETRANGE', log, start - cut, last - cut)}
"""


@dataclass(frozen=True)
class Chunk:
    text: str
    offset: int  # where the next read starts (bytes since the log began)
    size: int  # the log's end now (bytes since the log began, dropped ones included)
    reset: bool = False  # the text starts the log anew: replace what was shown
    skipped: int = 0  # bytes before the text that were dropped unread


class LogTail:
    def __init__(self, client: redis.Redis, prefix: str = "taskenv") -> None:
        self.r = client
        self.keys = Keys(prefix)
        self._append = client.register_script(APPEND)
        self._read = client.register_script(READ)

    def _pair(self, task_id: str, revision: int) -> list[str]:
        return [self.keys.log(task_id, revision), self.keys.log_cut(task_id, revision)]

    def append(self, task_id: str, revision: int, text: str, limit: int) -> int:
        """Append output; past ``limit`` bytes keep the newest half and count the rest.
        The bytes the log keeps now."""
        return int(self._append(keys=self._pair(task_id, revision), args=[text, limit]))

    def replace(self, task_id: str, revision: int, text: str) -> None:
        """The log is ``text`` from now on, as if it had been written from the start."""
        log, cut = self._pair(task_id, revision)
        pipe = self.r.pipeline(transaction=True)
        pipe.set(log, text)
        pipe.delete(cut)
        pipe.execute()

    def size(self, task_id: str, revision: int) -> int:
        """The log's end: every byte written to it, dropped ones included."""
        pipe = self.r.pipeline(transaction=True)
        pipe.get(self.keys.log_cut(task_id, revision))
        pipe.strlen(self.keys.log(task_id, revision))
        cut, kept = pipe.execute()
        return int(cut or 0) + int(kept)

    def since(self, task_id: str, revision: int, offset: int, most: int = MAX_CHUNK) -> Chunk:
        """The output after ``offset`` bytes, at most ``most`` of them, whole UTF-8
        characters only.  From 0 it is everything kept, and its offset where to go on."""
        start, size, data = self._bytes(self._read, self._pair(task_id, revision),
                                        [offset, most])
        reset = offset > size
        text, used = whole_characters(bytes(data))
        return Chunk(text, start + used, size, reset, start if reset else start - offset)

    def _bytes(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run ``script`` for bytes, even on a client that decodes: they may end inside a
        character."""
        command = [len(keys), *keys, *args]
        try:
            return self.r.execute_command("EVALSHA", script.sha, *command,
                                          **{NEVER_DECODE: True})
        except redis.exceptions.NoScriptError:  # a restarted or another server
            return self.r.execute_command("EVAL", script.script, *command,
                                          **{NEVER_DECODE: True})


def whole_characters(data: bytes) -> tuple[str, int]:
    """The text of ``data`` up to a character cut at its end, and the bytes it used."""
    for cut in range(4):  # a UTF-8 character is at most 4 bytes: at most 3 left over
        try:
            used = len(data) - cut
            return data[:used].decode(), used
        except UnicodeDecodeError:
            continue
    return data.decode(errors="replace"), len(data)


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


def log_budget(limit: int, store_limit: int) -> int:
    """What one revision's output may take of its log: the setting, within what the store
    keeps, less the room the launcher's own lines need."""
    return max(0, min(limit or store_limit, store_limit) - RESERVED)


def head_only_note(kept: int) -> str:
    """Said where a backend's log was read only up to the budget."""
    return (f"\ntaskenv: output cut: the log keeps the first {kept} bytes of this output; "
            "the rest was not read\n")
