"""How the store's costs grow with history and with retention, on the run's redis-server.

* :func:`transition_cost`: ``TaskStore.transition`` (``pending -> validated``) of a task
  with 1 revision and of one with 200 revisions, each of 100 variables: wall time
  per call and bytes sent to Redis (``INFO stats`` ``total_net_input_bytes``, less
  what the ``INFO`` itself costs).  A state change writes only the fields it changes,
  so history must not make it dearer.
* :func:`retention_memory`: 20,000 tasks loaded as ``running`` and finished through
  ``TaskStore.transition``, once by a store with a retention of (practically) 0 s and
  once by one with retention off; ``expire_finished`` runs in both; what each leaves
  in Redis (``INFO memory`` ``used_memory``), each in a database of its own, empty
  at the start.
* :func:`revision_bytes`: what one revision adds to Redis when a user changes one
  variable of a big env (the review's 8 x 120 KiB values): ``used_memory`` per revision,
  each revision resolved as the policy stage writes it.  Revisions share unchanged long
  values (``shared/store/pool.py``), so this is about the one value changed, not the env.

``python -m bench.store_growth`` prints the last figure on a redis-server of its own.
"""

from __future__ import annotations

import base64
import os
import statistics
import time
from typing import Any

import redis

from bench.inputs import user_env
from shared.store.tasks import TaskStore
from shared.task import records, states

Doc = dict[str, Any]
HISTORY_FACTOR = 1.2  # a change at 200 revisions costs at most this times one at 1
RETAINED_FRACTION = 0.05  # what retention 0 may leave, as a fraction of retention off
# TaskStore reads a retention of 0 as "kept forever": the least positive one expires at once.
RETENTION_NOW = 1e-6
RESIZE_SECONDS = 2.0


def _net_in(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_input_bytes"])


def _info_bytes(client: redis.Redis) -> int:
    """What one ``INFO stats`` adds to the input byte count, to be subtracted."""
    a = _net_in(client)
    return _net_in(client) - a


def _task(variables: int) -> Doc:
    body = {"name": "growth", "steps": [["true"]], "env": user_env(variables)}
    return records.new_task(body, "bench")


def _at_revision(store: TaskStore, revisions: int, variables: int) -> str:
    """A new task whose current revision is number ``revisions``, at ``pending``."""
    doc, _ = store.create(_task(variables))
    for _ in range(revisions - 1):
        _next_revision(store, doc["id"], variables)
    return str(doc["id"])


def _next_revision(store: TaskStore, task_id: str, variables: int) -> None:
    store.update(task_id, lambda d: records.new_revision(d, user_env(variables), "bench",
                                                         "patch"))


def _timed_transition(store: TaskStore, task_id: str, info: int) -> tuple[float, int]:
    revision = store.get(task_id)["revision"]
    before = _net_in(store.r)
    started = time.perf_counter()
    done = store.transition(task_id, revision, states.PENDING, states.VALIDATED)
    took = time.perf_counter() - started
    sent = _net_in(store.r) - before - info
    if done is None:
        raise RuntimeError(f"task {task_id} was not at pending")
    return took, sent


def transition_cost(client: redis.Redis, sizes: tuple[int, int] = (1, 200),
                    variables: int = 100, samples: int = 30) -> dict[str, Any]:
    """Median time and bytes of one state change at each number of revisions.

    The sizes take turns, sample by sample, so a change in the machine's load during the
    measurement touches both alike (measured one after the other, the ratio of two medians
    of 0.4 ms moved between 0.97 and 1.30 on a shared machine).
    """
    store = TaskStore(client, "growth-transition")
    info = _info_bytes(client)
    ids = {n: _at_revision(store, n, variables) for n in sizes}
    times: dict[int, list[float]] = {n: [] for n in sizes}
    sent: dict[int, list[int]] = {n: [] for n in sizes}
    for i in range(samples):
        for n in sizes:
            # Each sample on a fresh revision: one more on the long history, a new task
            # for the short one.
            if i and n > 1:
                _next_revision(store, ids[n], variables)
            elif i:
                ids[n] = _at_revision(store, 1, variables)
            took, nbytes = _timed_transition(store, ids[n], info)
            times[n].append(took)
            sent[n].append(nbytes)
    rows = [{"revisions": n, "variables": variables, "samples": samples,
             "median_ms": statistics.median(times[n]) * 1e3,
             "min_ms": min(times[n]) * 1e3, "bytes_sent": statistics.median(sent[n])}
            for n in sizes]
    small, large = rows
    return {"rows": rows, "time_ratio": large["median_ms"] / small["median_ms"],
            "bytes_ratio": large["bytes_sent"] / small["bytes_sent"],
            "factor": HISTORY_FACTOR}


def _finish_all(store: TaskStore, ids: list[str]) -> None:
    for task_id in ids:
        store.move(task_id, 1, states.RUNNING, states.SUCCEEDED, exit_code=0)


def _expire_all(store: TaskStore) -> int:
    expired = 0
    while n := store.expire_finished(time.time()):
        expired += n
    return expired


def _empty_db(client: redis.Redis, db: int) -> redis.Redis:
    """A client of database ``db`` on the same server, emptied.

    Each measurement starts from an empty keyspace: Redis grows a keyspace's hash table
    in powers of two and shrinks it only once it is nearly empty, so in a database that
    already holds the listing's two million keys the growth to 2^22 buckets (32 MiB)
    would be counted as left behind."""
    pool = client.connection_pool
    own = redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=pool.connection_class, **{**pool.connection_kwargs, "db": db}))
    own.flushdb()
    return own


def _left_behind(client: redis.Redis, template: Doc, n: int, prefix: str,
                 retention: float, db: int) -> dict[str, Any]:
    from bench.growth import copies, used_memory

    own = _empty_db(client, db)
    store = TaskStore(own, prefix, retention_seconds=retention)
    docs = [{**doc, "state": states.RUNNING} for doc in copies(template, n)]
    before = used_memory(own)
    store.load_many(docs)
    _finish_all(store, [d["id"] for d in docs])
    stored = used_memory(own) - before
    expired = _expire_all(store)
    time.sleep(RESIZE_SECONDS)  # Redis shrinks an emptied keyspace's table in its cron
    left = used_memory(own) - before
    own.flushdb()
    own.close()
    return {"retention_seconds": retention, "expired": expired, "bytes_stored": stored,
            "bytes_left": left, "bytes_left_per_task": left / n}


def retention_memory(client: redis.Redis, template: Doc, n: int = 20_000) -> dict[str, Any]:
    """What ``n`` finished tasks leave in Redis with retention 0 and with retention off."""
    off = _left_behind(client, template, n, "growth-kept", 0, db=1)
    now = _left_behind(client, template, n, "growth-expired", RETENTION_NOW, db=2)
    return {"tasks": n, "retention_off": off, "retention_0": now,
            "ratio": now["bytes_left"] / off["bytes_left"] if off["bytes_left"] else None,
            "limit": RETAINED_FRACTION}


def revision_bytes(client: redis.Redis, revisions: int = 10, variables: int = 8,
                   size: int = 120 * 1024) -> dict[str, Any]:
    """Bytes each new revision adds when one of ``variables`` values of ``size`` changes."""
    store = TaskStore(client, "growth-revisions")
    # Random text: values that deflate to nothing (``"A" * size``) would hide what is stored.
    env = [{"name": f"V{i}", "value": _noise(size)} for i in range(variables)]
    doc, _ = store.create(records.new_task({"name": "big", "steps": [["true"]], "env": env},
                                           "bench"))
    task_id = doc["id"]
    _resolved(store, task_id)
    before = _used(client)
    for n in range(revisions):
        store.move(task_id, n + 1, states.RESOLVED, states.CANCELLED)

        def change(d: Doc, n: int = n) -> Doc:
            new_env = [dict(e) for e in d["env"]]
            new_env[0]["value"] = _noise(size)
            return records.new_revision(d, new_env, "bench", "patch")
        store.update(task_id, change)
        _resolved(store, task_id)
    per_revision = (_used(client) - before) / revisions
    env_bytes = variables * size
    return {"variables": variables, "value_bytes": size, "env_bytes": env_bytes,
            "revisions": revisions, "bytes_per_revision": per_revision,
            "share_of_env": per_revision / env_bytes}


def _noise(size: int) -> str:
    return base64.b64encode(os.urandom(size * 3 // 4)).decode()[:size]


def _resolved(store: TaskStore, task_id: str) -> None:
    """The validation and policy stages' writes: the resolved env holds every value."""
    revision = store.get(task_id)["revision"]
    store.transition(task_id, revision, states.PENDING, states.VALIDATED, warnings=[])
    store.advance(task_id, revision, states.VALIDATED, lambda d: (states.RESOLVED, {
        "resolved": [{"name": e["name"], "value": e["value"], "source": "user",
                      "overrode": [], "secret": False} for e in d["env"]],
        "policy_version": 0}))


def _used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def revision_line(result: dict[str, Any]) -> str:
    return (f"a revision changing 1 of {result['variables']} values of "
            f"{result['value_bytes'] // 1024} KiB adds {result['bytes_per_revision'] / 1024:.0f}"
            f" KiB to Redis ({result['share_of_env']:.0%} of the "
            f"{result['env_bytes'] / 2**20:.2f} MiB env)")


def lines(transition: dict[str, Any], retention: dict[str, Any]) -> list[str]:
    small, large = transition["rows"]
    off, now = retention["retention_off"], retention["retention_0"]
    return [
        f"state change, {small['variables']} variables: {small['median_ms']:.2f} ms, "
        f"{small['bytes_sent']:.0f} B sent at {small['revisions']} revision; "
        f"{large['median_ms']:.2f} ms, {large['bytes_sent']:.0f} B at {large['revisions']} "
        f"(x{transition['time_ratio']:.2f} time, x{transition['bytes_ratio']:.2f} bytes)",
        f"{retention['tasks']:,} finished tasks leave {off['bytes_left'] / 2**20:.1f} MiB "
        f"with retention off, {now['bytes_left'] / 2**20:.2f} MiB with retention 0 "
        f"({now['expired']:,} expired; x{retention['ratio']:.3f})",
    ]


def main() -> None:
    import tempfile
    from pathlib import Path

    from workers.localstack import RedisServer

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp)).start()
        try:
            print(revision_line(revision_bytes(redis.Redis.from_url(server.url))))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
