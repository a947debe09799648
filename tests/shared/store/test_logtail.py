"""A revision's log: appended and trimmed in one step, read from a byte offset that stays
valid across trims."""

from __future__ import annotations

import fakeredis

from shared.keys import Keys
from shared.store.logtail import Chunk, LogTail, whole_characters
from shared.store.tasks import TaskStore

TASK = "a" * 32


def test_since_returns_only_the_bytes_after_the_offset() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    TaskStore(client, "t").append_log(TASK, 1, "one\ntwo ✓\n")
    tail = LogTail(client, "t")
    first = tail.since(TASK, 1, 0)
    assert first == Chunk("one\ntwo ✓\n", 12, 12, reset=False, skipped=0)
    assert tail.since(TASK, 1, 4).text == "two ✓\n"
    assert tail.since(TASK, 1, 12).text == ""
    assert tail.since(TASK, 1, 99) == Chunk("one\ntwo ✓\n", 12, 12, reset=True, skipped=0)
    assert tail.since("b" * 32, 1, 0) == Chunk("", 0, 0)  # no log yet


def test_a_cut_character_is_left_for_the_next_read() -> None:
    assert whole_characters("a✓".encode()[:3]) == ("a", 1)
    assert whole_characters("a✓".encode()) == ("a✓", 4)


def test_a_trim_keeps_the_newest_half_and_counts_what_it_dropped() -> None:
    client = fakeredis.FakeRedis()
    tail = LogTail(client, "t")
    tail.append(TASK, 1, "0123456789", limit=16)
    tail.append(TASK, 1, "abcdefgh", limit=16)  # 18 bytes: keep the newest 8
    assert client.get(Keys("t").log(TASK, 1)) == b"abcdefgh"
    assert tail.size(TASK, 1) == 18
    assert tail.since(TASK, 1, 14) == Chunk("efgh", 18, 18)
    assert tail.since(TASK, 1, 3) == Chunk("abcdefgh", 18, 18, skipped=7)


def test_a_trim_never_keeps_half_a_character() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    tail = LogTail(client, "t")
    tail.append(TASK, 1, "✓✓✓✓", limit=10)  # 12 bytes; the newest 5 begin inside a ✓
    assert client.get(Keys("t").log(TASK, 1)) == "✓"
    assert tail.since(TASK, 1, 0) == Chunk("✓", 12, 12, skipped=9)


def test_a_reader_following_across_trims_sees_each_kept_byte_once_and_what_it_missed(
) -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    store = TaskStore(client, "t")
    store.LOG_LIMIT = 64
    tail = LogTail(client, "t")
    written, offset, skips, seen = b"", 0, [], 0
    for n in range(60):
        line = f"line {n} ✓\n"
        store.append_log(TASK, 1, line)
        written += line.encode()
        if n % 7 == 6:  # the reader polls less often than the log is trimmed
            chunk = tail.since(TASK, 1, offset, most=16)
            start = offset + chunk.skipped
            assert chunk.text.encode() == written[start:chunk.offset]
            assert not chunk.reset and chunk.size == len(written)
            skips += [chunk.skipped] if chunk.skipped else []
            seen, offset = seen + len(chunk.text.encode()), chunk.offset
    assert skips and all(skip > 0 for skip in skips)
    while (chunk := tail.since(TASK, 1, offset, most=16)).offset != offset:
        assert chunk.text.encode() == written[offset + chunk.skipped:chunk.offset]
        skips += [chunk.skipped] if chunk.skipped else []
        seen, offset = seen + len(chunk.text.encode()), chunk.offset
    assert offset == len(written) == seen + sum(skips)
    assert written.endswith(store.read_log(TASK, 1).encode())


def test_reading_works_on_a_server_that_lost_its_scripts() -> None:
    client = fakeredis.FakeRedis()
    tail = LogTail(client, "t")
    tail.append(TASK, 1, "kept\n", limit=100)
    client.script_flush()
    assert tail.since(TASK, 1, 0).text == "kept\n"
