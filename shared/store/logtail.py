"""A revision's output: appended and trimmed in one step, read from a byte offset.

The log is one Redis string per revision, so the new output since the last read is a
``GETRANGE`` from the offset the reader last got: a poll costs what was written since,
not the whole log.  Past a limit (``TaskStore.LOG_LIMIT``) only the newest half is kept;
a second key counts the bytes trimming has dropped from the front.  Offsets count from
the first byte ever written, so they stay valid across trims: a reader behind what was
dropped is told how many bytes it missed (``skipped``) and goes on from the oldest kept
byte, instead of being sent text again or losing its place.

Appending and trimming are one Lua script, and so is reading the count with the bytes:
a reader never sees a log trimmed but not yet counted.  The same script counts what the
log takes in its owner's stored bytes (``shared.access.quotas``): a log is part of its
task's size, given back when the task expires, and an owner whose quota is full sees
their logs stop, with a line saying so, while everyone else's go on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.client import NEVER_DECODE
from redis.commands.core import Script

from shared.access.quotas import LOG_FULL_NOTE
from shared.keys import Keys
from shared.store import scripts

# The cap of what a log keeps is in a module of the standard library alone (the Slurm job
# program runs the same code on its node); its users import it from here.
from shared.store.outputcap import RESERVED, TAIL_KEPT, OutputCap  # noqa: F401

MAX_CHUNK = 256 * 1024  # one answer's worth; the reader asks again for the rest

# KEYS: log, cut, the task.  ARGV: text, limit, what an owner's stored-bytes counter key
# begins with, the note said where the owner's quota stopped the output, "1" to replace the
# log (else append).  Past the limit it keeps the newest half, from the start of a
# character (a UTF-8 character has at most 3 continuation bytes), and adds what it dropped
# to the cut.  A counted task's log counts in its ``bytes`` and its owner's stored bytes
# (shared.access.quotas), by what the log's size changed; within the limit the task was
# created under (``bytes_allowed``) what fits is kept, then the note, once.
APPEND = scripts.BYTES + r"""
local log, cut, task = KEYS[1], KEYS[2], KEYS[3]
local text, limit, stored_prefix, note = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local replace = ARGV[5] == '1'
local t = redis.call('HMGET', task, 'owner', 'bytes', 'bytes_allowed')
local counter, allowed = '', 0
if t[1] and t[2] then
  counter = stored_prefix .. cjson.decode(t[1])
  allowed = tonumber(t[3] or '0')
end
local old = false  -- the log's size before: measured only where needed
if replace then old = redis.call('STRLEN', log) end
if allowed > 0 then
  local stored = tonumber(redis.call('GET', counter) or '0')
  if stored + #text > allowed then  -- it may not fit: look closer
    old = old or redis.call('STRLEN', log)
    local base = old
    if replace then base = 0 end
    local after = base + #text
    if not replace and after > limit then after = math.floor(limit / 2) end  -- a trim's most
    if after > old and stored + after - old > allowed then
      local n = math.max(0, math.min(#text, allowed - stored + old - base - #note))
      while n > 0 and n < #text and string.byte(text, n + 1) >= 128
          and string.byte(text, n + 1) < 192 do n = n - 1 end
      local noted = not replace and n == 0 and old >= #note
        and redis.call('GETRANGE', log, -#note, -1) == note
      text = string.sub(text, 1, n)
      if not noted then text = text .. note end
    end
  end
end
local size
if replace then
  redis.call('SET', log, text)
  redis.call('DEL', cut)
  size = #text
else
  size = redis.call('APPEND', log, text)
  old = old or size - #text
  if size > limit then
    local tail = redis.call('GETRANGE', log, -math.max(1, math.floor(limit / 2)), -1)
    local partial = string.match(tail, '^[\128-\191]?[\128-\191]?[\128-\191]?')
    tail = string.sub(tail, #partial + 1)
    redis.call('SET', log, tail)
    redis.call('INCRBY', cut, size - #tail)
    size = #tail
  end
end
if counter ~= '' and size ~= old then
  redis.call('HINCRBY', task, 'bytes', size - old)
  count(counter, size - old)
end
return size
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

    def _counted(self, task_id: str, revision: int, text: str | bytes, limit: int,
                 replace: bool) -> int:
        keys = [*self._pair(task_id, revision), self.keys.task(task_id)]
        args = [text, limit, self.keys.quota_bytes(), LOG_FULL_NOTE, "1" if replace else "0"]
        return int(self._append(keys=keys, args=args))

    def append(self, task_id: str, revision: int, text: str | bytes, limit: int) -> int:
        """Append output; past ``limit`` bytes keep the newest half and count the rest.
        The bytes the log keeps now.  The owner's stored bytes count what the log grew
        by; past their quota only what fits is kept, then a line says output was dropped.
        One command: the caller sends at most a chunk (:func:`pieces`)."""
        return self._counted(task_id, revision, text, limit, replace=False)

    def replace(self, task_id: str, revision: int, text: str) -> None:
        """The log is ``text`` from now on, as if it had been written from the start
        (counted, and held to the owner's quota, as :meth:`append`), sent a chunk per
        command: the first replaces the log, the others are appended, never trimmed."""
        for n, piece in enumerate(pieces(text) if text else [b""]):
            self._counted(task_id, revision, piece, len(text.encode()), replace=n == 0)

    def ends_with(self, task_id: str, revision: int, text: str) -> bool:
        """Whether the log ends with ``text`` (one read of that many bytes)."""
        data = text.encode()
        end = self.r.getrange(self.keys.log(task_id, revision), -len(data), -1)
        return (end.encode() if isinstance(end, str) else end) == data

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


def pieces(text: str, most: int = MAX_CHUNK) -> Iterator[bytes]:
    """``text`` as UTF-8, in pieces of at most ``most`` bytes (``most`` at least 4), each
    ending on a character's end: what one command to Redis carries."""
    data = text.encode()
    start = 0
    while start < len(data):
        end = min(len(data), start + most)
        while end < len(data) and data[end] & 0xC0 == 0x80:  # inside a character
            end -= 1
        yield data[start:end]
        start = end


def whole_characters(data: bytes) -> tuple[str, int]:
    """The text of ``data`` up to a character cut at its end, and the bytes it used."""
    for cut in range(4):  # a UTF-8 character is at most 4 bytes: at most 3 left over
        try:
            used = len(data) - cut
            return data[:used].decode(), used
        except UnicodeDecodeError:
            continue
    return data.decode(errors="replace"), len(data)


def log_budget(limit: int, store_limit: int) -> int:
    """What one revision's output may take of its log: the setting, within what the store
    keeps, less the room the launcher's own lines need."""
    return max(0, min(limit or store_limit, store_limit) - RESERVED)


def head_only_note(kept: int) -> str:
    """Said where a backend's log was read only up to the budget."""
    return (f"\ntaskenv: output cut: the log keeps the first {kept} bytes of this output; "
            "the rest was not read\n")
