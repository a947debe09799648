"""Room in Redis: new work stops short of maxmemory; an out-of-memory reply is waited out."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from shared.errors import StoreFull
from shared.store.room import Memory, Room, full, patiently

MIB = 1024 * 1024


class FakeInfo:
    def __init__(self, used: int, limit: int) -> None:
        self.memory = {"used_memory": used, "maxmemory": limit}
        self.calls = 0

    def info(self, section: str) -> dict[str, Any]:
        self.calls += 1
        return dict(self.memory)


def test_new_work_stops_at_the_reserve_and_the_refusal_names_the_numbers() -> None:
    client = FakeInfo(91 * MIB, 100 * MIB)
    room = Room(client, reserve_percent=10)  # type: ignore[arg-type]
    with pytest.raises(StoreFull) as refused:
        room.check()
    message = refused.value.message
    assert refused.value.code == "store_full"
    assert "maxmemory" in message and "93184 KiB" in message and "10%" in message


def test_below_the_reserve_or_without_a_maxmemory_there_is_room() -> None:
    Room(FakeInfo(89 * MIB, 100 * MIB)).check()  # type: ignore[arg-type]
    Room(FakeInfo(10 ** 12, 0)).check()  # type: ignore[arg-type]


def test_memory_is_read_at_most_once_per_interval() -> None:
    now = [0.0]
    client = FakeInfo(1, 100)
    room = Room(client, clock=lambda: now[0])  # type: ignore[arg-type]
    for _ in range(50):
        room.check()
    now[0] = 1.5
    room.check()
    assert client.calls == 2


def test_an_out_of_memory_reply_is_retried_until_room_is_made() -> None:
    answers: list[Any] = [redis.exceptions.OutOfMemoryError("OOM"),
                          redis.exceptions.OutOfMemoryError("OOM"), "stored"]
    slept: list[float] = []

    def call() -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert patiently(call, 60, "an outcome", sleep=slept.append) == "stored"
    assert slept == [0.1, 0.2]


def test_without_patience_the_reply_is_raised_at_once() -> None:
    def call() -> None:
        raise redis.exceptions.OutOfMemoryError("OOM")

    with pytest.raises(redis.exceptions.OutOfMemoryError):
        patiently(call, 0, "a request", sleep=lambda s: pytest.fail("slept"))


def test_a_refusal_without_numbers_still_names_the_condition() -> None:
    assert "maxmemory" in full(None, 10).message
    assert Memory.of({"used_memory": "5", "maxmemory": "0"}) == Memory(5, 0)
