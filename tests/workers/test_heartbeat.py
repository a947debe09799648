"""One heartbeat thread per process: a short launch writes nothing, a long one beats."""

from __future__ import annotations

import time
from typing import Any

import fakeredis
import pytest
import redis

from shared.store.tasks import TaskStore
from workers import heartbeat
from workers.heartbeat import TICK, Pulse, keep_alive


class CountingRedis(fakeredis.FakeRedis):
    """Counts round trips (a pipeline is one), and can be told Redis is away."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.trips = 0
        self.away = False

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self._trip()
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        run = pipe.execute

        def execute(raise_on_error: bool = True) -> Any:
            self._trip()
            return run(raise_on_error)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe

    def _trip(self) -> None:
        if self.away:
            raise redis.ConnectionError("Redis is restarting")
        self.trips += 1


@pytest.fixture
def tasks() -> TaskStore:
    return TaskStore(CountingRedis(decode_responses=True))


def test_a_launch_released_within_a_tick_writes_no_beat(tasks: TaskStore) -> None:
    pulse = Pulse(interval=5)
    held = pulse.hold(tasks, "t1", 1)
    assert pulse.beat_due(held.since + TICK / 2) == 0
    pulse.release(held)
    assert tasks.r.trips == 0  # type: ignore[attr-defined]
    assert not tasks.liveness.is_alive("t1", 1)


def test_a_long_launch_beats_after_a_tick_then_every_interval_and_its_beat_goes_with_it(
        tasks: TaskStore) -> None:
    pulse = Pulse(interval=5)
    held = pulse.hold(tasks, "t1", 1)
    assert pulse.beat_due(held.since + TICK) == 1
    assert tasks.liveness.is_alive("t1", 1)
    assert 0 < tasks.r.ttl(tasks.keys.beat("t1", 1)) <= 15
    assert pulse.beat_due(held.since + TICK + 4) == 0  # not due yet
    assert pulse.beat_due(held.since + TICK + 5) == 1
    pulse.release(held)
    assert not tasks.liveness.is_alive("t1", 1)
    assert pulse.beat_due(held.since + 60) == 0  # released: never beaten again


def test_every_due_launch_is_beaten_in_one_round_trip(tasks: TaskStore) -> None:
    pulse = Pulse(interval=5)
    held = [pulse.hold(tasks, f"t{n}", 1) for n in range(20)]
    assert pulse.beat_due(max(h.since for h in held) + TICK) == 20
    assert tasks.r.trips == 1  # type: ignore[attr-defined]
    assert all(tasks.liveness.is_alive(f"t{n}", 1) for n in range(20))


def test_a_beat_that_meets_redis_away_is_written_once_it_is_back(tasks: TaskStore) -> None:
    pulse = Pulse(interval=5)
    held = pulse.hold(tasks, "t1", 1)
    tasks.r.away = True  # type: ignore[attr-defined]
    pulse.beat_due(held.since + TICK)  # logged, not raised: the launch goes on
    tasks.r.away = False  # type: ignore[attr-defined]
    assert not tasks.liveness.is_alive("t1", 1)
    pulse.beat_due(held.since + TICK + 0.1)  # still due: it was never written
    assert tasks.liveness.is_alive("t1", 1)


def test_keep_alive_beats_from_the_process_thread_while_held(tasks: TaskStore) -> None:
    with keep_alive(tasks, "t1", 1, interval=5):
        deadline = time.monotonic() + 5 * TICK
        while not tasks.liveness.is_alive("t1", 1):
            assert time.monotonic() < deadline, "no beat from the heartbeat thread"
            time.sleep(0.05)
    assert not tasks.liveness.is_alive("t1", 1)
    assert heartbeat.pulse(5) is heartbeat.pulse(5)  # one per process and interval
