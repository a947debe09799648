"""Reading a revision's log from a byte offset."""

from __future__ import annotations

import fakeredis

from shared.logtail import LogTail, whole_characters
from shared.store import TaskStore


def test_since_returns_only_the_bytes_after_the_offset() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    TaskStore(client, "t").append_log("a" * 32, 1, "one\ntwo ✓\n")
    tail = LogTail(client, "t")
    first = tail.since("a" * 32, 1, 0)
    assert (first.text, first.offset, first.reset) == ("one\ntwo ✓\n", 12, False)
    assert tail.since("a" * 32, 1, 4).text == "two ✓\n"
    assert tail.since("a" * 32, 1, 12).text == ""
    assert tail.since("a" * 32, 1, 99).reset is True
    assert tail.since("b" * 32, 1, 0).text == ""  # no log yet


def test_a_cut_character_is_left_for_the_next_read() -> None:
    assert whole_characters("a✓".encode()[:3]) == ("a", 1)
    assert whole_characters("a✓".encode()) == ("a✓", 4)
