"""A full Redis is an answer, not a crash: a real redis-server with a small maxmemory,
filled while real tasks run through real Celery workers.

Past the reserve, new work is refused with 503 store_full while running tasks finish and
their outcomes land; at the very brim (Redis answering out-of-memory), heartbeats still
renew and an outcome waits for room, then lands once space is freed.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import pytest
import redis

from tests.support.stack import Stack, running_stack
from workers.localstack import RedisServer

pytestmark = pytest.mark.integration

FILLER = b"x" * (256 * 1024)


@pytest.fixture(scope="module")
def small_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("small-redis"), password=secrets.token_hex(16),
                         maxmemory="48mb").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(small_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(small_redis, tmp_path_factory.mktemp("full"),
                       TASKENV_HEARTBEAT_SECONDS="1") as running:
        yield running


def used(client: redis.Redis) -> tuple[int, int]:
    info = client.info("memory")
    return int(info["used_memory"]), int(info["maxmemory"])


def fill_to(client: redis.Redis, share: float, start: int = 0) -> int:
    """Filler keys until Redis uses ``share`` of maxmemory (1.0: until it refuses even a
    small one: then it is over maxmemory, and refuses every write that needs memory)."""
    n = start
    for size in (len(FILLER), 1024):
        while True:
            used_now, limit = used(client)
            if share < 1 and used_now >= share * limit:
                return n
            try:
                client.set(f"filler:{n}", FILLER[:size])
            except redis.exceptions.OutOfMemoryError:
                break
            n += 1
    return n


def sleeper(name: str, seconds: float) -> dict[str, object]:
    code = (f"import time; print('{name} started', flush=True); time.sleep({seconds}); "
            f"print('{name} done', flush=True)")
    return {"name": name, "steps": [["python3", "-c", code]], "env": []}


def wait_status(stack: Stack, task_id: str, wanted: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        doc = stack.task(task_id)
        if doc["status"] == wanted:
            return doc
        assert time.monotonic() < deadline, doc
        time.sleep(0.1)


def assert_store_full(response) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["code"] == "store_full", body
    assert "full" in body["message"] and "maxmemory" in body["message"], body
    assert int(response.headers["Retry-After"]) > 0


def test_new_work_is_refused_while_accepted_tasks_finish_and_nothing_is_lost(
        stack: Stack) -> None:
    alice = stack.new_token("alice")
    raw = stack.redis
    earlier = stack.create({"name": "earlier", "steps": [["true"]], "env": []}, token=alice)
    assert stack.wait(earlier["id"])["status"] == "succeeded"
    short = stack.create(sleeper("short", 3), token=alice)
    long = stack.create(sleeper("long", 9), token=alice)
    wait_status(stack, short["id"], "running")
    wait_status(stack, long["id"], "running")

    # 1. Past the reserve (95% of maxmemory): new work is refused, naming the condition.
    n = fill_to(raw, 0.95)
    time.sleep(1.2)  # the API reads Redis's memory at most once a second
    assert_store_full(stack.call("POST", "/api/v1/tasks", token=alice,
                                 json={"name": "new", "steps": [["true"]], "env": []}))
    assert_store_full(stack.call("PATCH", f"/api/v1/tasks/{earlier['id']}/env", token=alice,
                                 json={"set": [{"name": "A", "value": "1"}]}))
    assert_store_full(stack.call("POST", f"/api/v1/tasks/{earlier['id']}/rerun", token=alice))
    # ... while a task already running finishes, its outcome and output stored.
    done = stack.wait(short["id"], timeout=30)
    assert done["status"] == "succeeded", done
    assert "short done" in stack.call("GET", short["url"] + "/logs", token=alice).text

    # 2. To the brim: Redis itself refuses to grow.  Filling key by key stops within a
    # few hundred bytes of the ceiling, where memory drifts as client buffers come and go;
    # the ceiling is brought down to just under what Redis holds, so it is firmly over.
    fill_to(raw, 1.0, start=n)
    raw.config_set("maxmemory", used(raw)[0] - 1024 * 1024)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        raw.set("one-more", "x")
    assert_store_full(stack.call("POST", "/api/v1/tasks", token=alice,
                                 json={"name": "new", "steps": [["true"]], "env": []}))
    # The running task's heartbeat lives on past its lifetime (3 s), so nothing looks dead.
    beat = f"{stack.env['TASKENV_KEY_PREFIX']}:task:{long['id']}:beat:1"
    time.sleep(4)
    assert raw.exists(beat), "the heartbeat expired while Redis was full"
    assert stack.task(long["id"])["status"] == "running"
    # Its step ends while Redis is full: the outcome waits for room ...
    time.sleep(7)
    assert stack.task(long["id"])["status"] == "running"

    # 3. An operator frees space: the outcome lands, nothing accepted was lost.
    for key in raw.scan_iter("filler:*"):
        raw.delete(key)
    raw.config_set("maxmemory", "48mb")
    finished = stack.wait(long["id"], timeout=60)
    assert finished["status"] == "succeeded", finished
    for task in (earlier, short, long):
        assert stack.task(task["id"])["status"] == "succeeded"
    again = stack.call("POST", "/api/v1/tasks", token=alice,
                       json={"name": "after", "steps": [["true"]], "env": []})
    assert again.status_code == 202, again.text
    assert stack.wait(again.json()["id"])["status"] == "succeeded"


def test_the_redis_make_run_starts_has_a_ceiling_and_never_evicts(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from workers.localstack import DEFAULT_MAXMEMORY, local_redis

    monkeypatch.delenv("TASKENV_REDIS_MAXMEMORY", raising=False)
    server = local_redis(tmp_path).start()
    try:
        client = redis.Redis.from_url(server.url)
        assert DEFAULT_MAXMEMORY == "1gb"
        assert client.config_get("maxmemory")["maxmemory"] == str(2**30)
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    finally:
        server.stop()
    monkeypatch.setenv("TASKENV_REDIS_MAXMEMORY", "64mb")
    server = local_redis(tmp_path / "other").start()
    try:
        assert redis.Redis.from_url(server.url).config_get("maxmemory")["maxmemory"] == \
            str(64 * 2**20)
    finally:
        server.stop()
