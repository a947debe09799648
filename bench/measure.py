"""Measuring tools for the benchmark: percentiles, CPU per process group, Redis
command counts, and load generators (as fast as possible, or paced).
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

CLK_TCK = os.sysconf("SC_CLK_TCK")


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(values: list[float]) -> dict[str, Any]:
    """n, mean, p50, p95, p99 and max, in the unit of ``values``."""
    s = sorted(values)
    if not s:
        return {"n": 0}
    return {"n": len(s), "mean": sum(s) / len(s), "p50": percentile(s, 0.50),
            "p95": percentile(s, 0.95), "p99": percentile(s, 0.99), "max": s[-1]}


# --- CPU time, per process group -------------------------------------------------------------

def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()  # fields from 3 (state) on


def session_cpu(sid: int) -> float:
    """CPU seconds (user + system) of every live process in session ``sid``.

    Each process the benchmark starts leads its own session (``start_new_session``),
    so a Celery worker's session holds the parent and its prefork children.
    """
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat(int(name))
        if fields and int(fields[3]) == sid:  # field 6: session
            total += int(fields[11]) + int(fields[12])  # fields 14, 15: utime, stime
    return total / CLK_TCK


def pid_cpu(pid: int) -> float:
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK if fields else 0.0


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + parts[4]  # idle + iowait
    return (sum(parts) - idle) / CLK_TCK, sum(parts) / CLK_TCK


@dataclass
class CpuMeter:
    """CPU used by named process groups (and by this process) over one phase."""

    groups: dict[str, int]  # name -> session id
    pids: dict[str, int] = field(default_factory=dict)  # name -> single pid (redis-server)
    _start: dict[str, float] = field(default_factory=dict)

    def _now(self) -> dict[str, float]:
        out = {name: session_cpu(sid) for name, sid in self.groups.items()}
        out.update({name: pid_cpu(pid) for name, pid in self.pids.items()})
        t = os.times()
        out["bench client"] = t.user + t.system
        busy, total = machine_cpu()
        out["_machine_busy"], out["_machine_total"] = busy, total
        return out

    def start(self) -> None:
        self._start = self._now()

    def stop(self, per: int) -> dict[str, Any]:
        end = self._now()
        used = {k: end[k] - self._start.get(k, 0.0) for k in end}
        wall_cpu = used.pop("_machine_total")
        busy = used.pop("_machine_busy")
        ours = sum(used.values())
        return {
            "cpu_seconds": used,
            "cpu_ms_per_item": {k: v / per * 1e3 for k, v in used.items()},
            "cpu_ms_per_item_total": ours / per * 1e3,
            "machine_busy_fraction": busy / wall_cpu if wall_cpu else None,
            "others_busy_cores": max(0.0, busy - ours) / (wall_cpu / (os.cpu_count() or 1))
            if wall_cpu else None,
        }


# --- Redis command counts --------------------------------------------------------------------

class RedisCounter:
    """``INFO commandstats`` between two points, less the commands this benchmark sent."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self.own: Counter[str] = Counter()

    def call(self, command: str, *args: Any) -> Any:
        self.own[command.lower()] += 1
        return self.r.execute_command(command, *args)

    def reset(self) -> None:
        self.own.clear()
        self.r.config_resetstat()

    def snapshot(self, per: int) -> dict[str, Any]:
        stats = self.r.info("commandstats")
        calls: Counter[str] = Counter()
        usec = 0.0
        for key, value in stats.items():
            name = key.removeprefix("cmdstat_")
            calls[name] += int(value["calls"])
            usec += float(value["usec"])
        calls -= self.own
        for name in ("info", "config|resetstat"):
            calls.pop(name, None)
        total = sum(calls.values())
        return {"total": total, "per_item": total / per,
                "redis_usec_per_item": usec / per,
                "by_command_per_item": {k: round(v / per, 3) for k, v in calls.most_common()}}


# --- load generators -------------------------------------------------------------------------

Send = Callable[[int], str]  # item number -> id of what was created
SenderFactory = Callable[[], Send]  # one sender per client thread (its own connection)


@dataclass
class Submitted:
    ids: list[str]
    submitted_at: list[float]  # time.time() just before the request was sent
    response_seconds: list[float]
    first: float
    last: float
    errors: int = 0

    @property
    def rate(self) -> float:
        return (len(self.ids) - 1) / (self.last - self.first) if len(self.ids) > 1 else 0.0


def submit(make_sender: SenderFactory, count: int, threads: int,
           rate: float | None = None) -> Submitted:
    """Send ``count`` items from ``threads`` threads, as fast as possible or at ``rate``/s.

    Paced sending is open-loop: item i is due at start + i/rate whatever happened
    to earlier items, so a slow server does not slow the offered load down.
    """
    counter = itertools.count()
    ids: list[str | None] = [None] * count
    sent_at = [0.0] * count
    took = [0.0] * count
    errors = [0]
    start = time.perf_counter() + 0.05

    def run() -> None:
        send = make_sender()
        while (i := next(counter)) < count:
            if rate is not None:
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            sent_at[i] = time.time()
            t0 = time.perf_counter()
            try:
                ids[i] = send(i)
            except Exception:  # counted and reported; the run goes on
                errors[0] += 1
            took[i] = time.perf_counter() - t0

    workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    ok = [i for i in range(count) if ids[i] is not None]
    return Submitted(ids=[ids[i] for i in ok],  # type: ignore[misc]
                     submitted_at=[sent_at[i] for i in ok],
                     response_seconds=[took[i] for i in ok],
                     first=min(sent_at), last=max(sent_at), errors=errors[0])


def http_poster(port: int, path: str, body: dict[str, Any], token: str | None,
                expect: int) -> SenderFactory:
    """One keep-alive HTTP connection per thread, POSTing the same JSON body."""
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"

    def factory() -> Send:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def send(_: int) -> str:
            nonlocal conn
            try:
                conn.request("POST", path, payload, headers)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                raise
            if resp.status != expect:
                raise RuntimeError(f"POST {path} answered {resp.status}: {data[:200]!r}")
            return str(json.loads(data)["id"])

        return send

    return factory


def wait_until(done: Callable[[], int], target: int, timeout: float,
               interval: float = 0.1) -> bool:
    """Poll ``done()`` until it reaches ``target``; False on timeout."""
    deadline = time.monotonic() + timeout
    while done() < target:
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


# --- one measured load -----------------------------------------------------------------------

def in_ms(summary: dict[str, Any]) -> dict[str, Any]:
    """A :func:`summarize` of seconds, in milliseconds."""
    return {k: (v * 1e3 if k != "n" else v) for k, v in summary.items()}


def measured(name: str, sender: SenderFactory, count: int, threads: int,
             finished: Callable[[], int], already: int, timeout: float,
             counter: RedisCounter, cpu: CpuMeter, rate: float | None = None) -> dict[str, Any]:
    """Submit ``count`` items and wait until the finished count has grown by ``count``."""
    counter.reset()
    cpu.start()
    started = time.perf_counter()
    sub = submit(sender, count, threads, rate)
    complete = wait_until(finished, already + len(sub.ids), timeout)
    wall = time.perf_counter() - started
    out = {"name": name, "count": count, "accepted": len(sub.ids), "errors": sub.errors,
           "complete": complete, "wall_seconds": wall,
           "offered_rate": rate, "submit_rate": sub.rate,
           "submit_response_ms": in_ms(summarize(sub.response_seconds)),
           "cpu": cpu.stop(max(1, len(sub.ids))),
           "redis_commands": counter.snapshot(max(1, len(sub.ids)))}
    out["_sub"] = sub
    return out


def latency_report(sub: Submitted, marks: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Latency from the client's submit time to each mark, throughput to the last mark."""
    out: dict[str, Any] = {}
    for mark, times in marks.items():
        lat = [times[i] - t for i, t in zip(sub.ids, sub.submitted_at, strict=True)
               if i in times]
        out[f"submit_to_{mark}_ms"] = in_ms(summarize(lat))
        if times:
            out[f"throughput_to_{mark}"] = len(times) / (max(times.values()) - sub.first)
    return out


def best(rounds: list[dict[str, Any]], key: str = "throughput") -> dict[str, Any]:
    """The least disturbed of several rounds on a shared machine: the fastest."""
    return max(rounds, key=lambda r: r[key])
