"""Redis fails over under load, twice, and nothing accepted is lost or run twice.

A primary, two replicas and three sentinels (``down-after-milliseconds`` 2000: a shorter
one took a primary stalled by a loaded host for a dead one, and failed it over) on ports
of this test's own (46300-46399), the whole stack behind them
(``TASKENV_REDIS_MIN_REPLICAS=1``), 200 tasks from 8 clients with Idempotency-Keys on
the local launcher.  The primary is SIGKILLed while they flow; the old primary is
started again (it rejoins as a replica) and the new primary is killed too.  Counts are
printed as the other fault tests print them (pytest -s).
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import requests

from shared.keys import Keys
from shared.redis_conn import connect
from tests.faults.conftest import FaultStack, in_background
from tests.support.sentinels import SentinelGroup, free_ports
from tests.support.stack import api_url, wait_until_serving
from workers.launchers.local.report import STORED_AGAIN
from workers.localstack import start_api, stop_all

pytestmark = pytest.mark.integration

TASKS = 200
CLIENTS = 8
PACE = 0.24  # seconds between two tasks' first attempts (all clients): ~48 s of load
SETTLED = 15.0  # a request started this long after a kill must succeed
PORTS = (46300, 46400)
TICKS = 60  # lines a ticker prints, 0.1 s apart: it runs through a failover
TICKER = {"name": "ticker", "steps": [[
    "sh", "-c", f'for n in $(seq 1 {TICKS}); do echo "tick $n"; sleep 0.1; done']]}


class FailoverStack(FaultStack):
    """The fault tests' stack, on a sentinel group instead of one redis-server."""

    def __init__(self, root: Path, group: SentinelGroup, **extra_env: str) -> None:
        super().__init__(root, TASKENV_REDIS_URL=group.sentinel_url,
                         TASKENV_REDIS_SENTINEL_PASSWORD=group.sentinel_password,
                         TASKENV_REDIS_MASTER_NAME="mymaster", **extra_env)
        self.redis = group  # type: ignore[assignment]  # .url: the current primary's
        self.client.redis = connect(group.sentinel_url,
                                    sentinel_password=group.sentinel_password)


@dataclass
class Attempt:
    started: float
    ended: float
    outcome: str  # an HTTP status, or the exception's name (a dropped connection)


@dataclass
class Load:
    """What 8 careful clients saw: every attempt, and the ids of their 202s."""

    stack: FailoverStack
    attempts: list[Attempt] = field(default_factory=list)
    ids: dict[int, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    leaked: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, client: int, t0: float) -> None:
        session = requests.Session()
        for n in range(client, TASKS, CLIENTS):
            time.sleep(max(0.0, t0 + n * PACE - time.monotonic()))
            self.submit(session, n)

    def submit(self, session: requests.Session, n: int, give_up_after: float = 90) -> None:
        """POST until a 202, with one Idempotency-Key, waiting as Retry-After says."""
        url = api_url(self.stack.env) + "/api/v1/tasks"
        headers = {"Authorization": f"Bearer {self.stack.token}",
                   "Idempotency-Key": f"failover-{n}"}
        deadline = time.monotonic() + give_up_after
        while time.monotonic() < deadline:
            started = time.monotonic()
            wait = 0.2
            try:
                resp = session.post(url, json=self.stack.counting_task(n), headers=headers,
                                    timeout=30)
                outcome = str(resp.status_code)
                if any(s in resp.text for s in self.secrets):
                    with self.lock:
                        self.leaked += 1
                wait = min(float(resp.headers.get("Retry-After", wait)), 1.0)
            except requests.RequestException as exc:
                outcome = type(exc).__name__
                session = requests.Session()
            with self.lock:
                self.attempts.append(Attempt(started, time.monotonic(), outcome))
            if outcome == "202":
                with self.lock:
                    self.ids[n] = resp.json()["id"]
                return
            time.sleep(wait)

    def outcomes(self) -> Counter[str]:
        return Counter(a.outcome for a in self.attempts)

    def failed_after(self, kills: list[float]) -> list[Attempt]:
        """Attempts that did not succeed though no kill happened while they ran nor in
        the SETTLED s before they started."""
        def settled(a: Attempt) -> bool:
            return not any(a.started - SETTLED <= k <= a.ended for k in kills)
        return [a for a in self.attempts if settled(a) and a.outcome != "202"]


@dataclass
class Readiness:
    """/readyz asked every 0.5 s: what it answered, and when."""

    stack: FailoverStack
    answers: list[tuple[float, str, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        url = api_url(self.stack.env) + "/readyz"
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                resp = requests.get(url, timeout=30)
                self.answers.append((started, str(resp.status_code), resp.text))
            except requests.RequestException as exc:
                self.answers.append((started, type(exc).__name__, ""))
            time.sleep(0.5)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[SentinelGroup]:
    group = SentinelGroup(tmp_path / "sentinels", free_ports(6, *PORTS), down_after_ms=2000)
    try:
        yield group
    finally:
        group.stop()


@contextmanager
def running_stack(tmp_path: Path, group: SentinelGroup, min_replicas: int
                  ) -> Iterator[FailoverStack]:
    # A consumer that stopped reading its queue would be restarted by its worker after 10 s
    # (workers.liveness): counted, printed, and asserted not to happen (docs/design.md
    # names the two client traps that once made it happen here).
    stack = FailoverStack(tmp_path, group, TASKENV_REDIS_MIN_REPLICAS=str(min_replicas),
                          TASKENV_REDIS_REPLICA_WAIT_MS="1000",
                          TASKENV_CONSUMER_STALL_SECONDS="10",
                          # Run slots are not what this test is about: fewer waits.
                          TASKENV_LOCAL_MAX_RUNNING="8")
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def failover_stack(tmp_path: Path, group: SentinelGroup) -> Iterator[FailoverStack]:
    with running_stack(tmp_path, group, min_replicas=1) as stack:
        yield stack


def wait_for(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)


def test_two_failovers_under_load_lose_no_accepted_task(failover_stack: FailoverStack,
                                                        group: SentinelGroup):
    stack = failover_stack
    load = Load(stack, secrets=(group.password, group.sentinel_password))
    ready = Readiness(stack)
    in_background(ready.run)
    t0 = time.monotonic()
    clients = [in_background(load.run, k, t0) for k in range(CLIENTS)]

    wait_for(lambda: len(load.ids) >= TASKS // 3, 60)
    first = group.primary()
    kills = [time.monotonic()]
    first.kill()  # SIGKILL
    second = group.wait_new_primary(first)
    promoted_after = time.monotonic() - kills[0]
    first.start()  # it comes back, and the sentinels make it a replica of the new one
    group.wait_role(first, "slave")

    wait_for(lambda: len(load.ids) >= 2 * TASKS // 3, 60)
    wait_for(lambda: time.monotonic() - kills[0] > SETTLED, 30)
    kills.append(time.monotonic())
    second.kill()
    third = group.wait_new_primary(second)
    promoted_again_after = time.monotonic() - kills[1]
    for thread in clients:
        thread.join(timeout=180)
    ids = list(load.ids.values())
    submitted_after = time.monotonic() - t0

    report = stack.report(TASKS, ids, timeout=120)
    final_after = time.monotonic() - t0
    ready.stop.set()
    readyz = Counter(code for _, code, _ in ready.answers)
    outage_503 = [code for started, code, text in ready.answers
                  if started > kills[0] and code == "503" and "redis" in text]

    print("\n" + report.line("redis failover x2")
          + f" promoted_after={promoted_after:.1f}s,{promoted_again_after:.1f}s"
          f" ({first.name}->{second.name}->{third.name})"
          f" attempts={dict(load.outcomes())} readyz={dict(readyz)}"
          f" worker_self_restarts={stack.restarts}"
          f" submitted_after={submitted_after:.0f}s final_after={final_after:.0f}s")
    assert len(set(ids)) == len(ids) == TASKS  # a retry with its key never made another
    assert report.lost == 0
    assert report.launched_twice == 0
    assert report.states["succeeded"] == TASKS
    assert set(load.outcomes()) <= {"202", "503"}  # no 500, no dropped connection
    assert not load.failed_after(kills), load.failed_after(kills)
    assert set(readyz) <= {"200", "503"} and outage_503
    assert ready.answers[-1][1] == "200"
    assert stack.restarts == 0  # every worker followed the new primary by itself
    assert load.leaked == 0
    assert not any(s in text for _, _, text in ready.answers
                   for s in (group.password, group.sentinel_password))
    logged = stack.logs.read_text(errors="replace")  # every process's log lines
    assert group.password not in logged and group.sentinel_password not in logged


def test_with_both_replicas_stopped_a_creation_is_503_then_202(tmp_path: Path,
                                                              group: SentinelGroup):
    group.start()
    stack = FailoverStack(tmp_path, group, TASKENV_REDIS_MIN_REPLICAS="1",
                          TASKENV_REDIS_REPLICA_WAIT_MS="500")
    api = start_api(stack.env, logfile=stack.logs)
    try:
        wait_until_serving(stack.env)
        url = api_url(stack.env) + "/api/v1/tasks"
        headers = {"Authorization": f"Bearer {stack.token}", "Idempotency-Key": "stopped"}
        body = stack.counting_task(0)
        replicas = [n for n in group.data_nodes if n is not group.primary()]
        for node in replicas:
            node.signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            refused = requests.post(url, json=body, headers=headers, timeout=30)
            took = time.monotonic() - started
        finally:
            for node in replicas:
                node.signal(signal.SIGCONT)
        accepted = requests.post(url, json=body, headers=headers, timeout=30)
        again = requests.post(url, json=body, headers=headers, timeout=30)
    finally:
        stop_all([api])

    print(f"\nreplicas stopped: {refused.status_code} in {took:.2f}s, then "
          f"{accepted.status_code}, {again.status_code}")
    assert refused.status_code == 503 and took < 0.5 + 2.0, (refused.text, took)
    assert refused.json()["code"] == "unavailable" and refused.headers["Retry-After"]
    assert accepted.status_code == again.status_code == 202
    assert accepted.json()["id"] == again.json()["id"]


def test_forced_failovers_under_load_lose_fail_and_repeat_no_task(tmp_path: Path,
                                                                  group: SentinelGroup):
    """An operator's ``SENTINEL FAILOVER`` (or sentinels that take a slow primary for a dead
    one): the old primary lives on, and takes writes until no replica follows it
    (``min-replicas-to-write``); those writes are lost.  A task found one state back is
    recorded again from what its host kept (workers/launchers/local/ended.py), never run
    again nor failed as lost.  Tasks printing through each failover keep every line (the
    runner stores its output again, ``LogWriter.store_again``); a short task's one line
    written in the lost second, by a runner that ended in it, may be gone: counted.

    Here a replica that acknowledged a write (``WAIT``) may be one the sentinels then
    resynchronise from the promoted one, dropping it: a ``202`` holds only once every
    replica has the write (``TASKENV_REDIS_MIN_REPLICAS`` = 2, the group's replicas)."""
    with running_stack(tmp_path, group, min_replicas=2) as stack:
        forced_failovers_under_load(stack, group)


def forced_failover(group: SentinelGroup, old, attempts: int = 4):
    """``SENTINEL FAILOVER`` until a replica is promoted.  On a loaded host the chosen
    replica may not report itself promoted within ``failover-timeout`` (3 s): the sentinel
    aborts (``-failover-abort-slave-timeout``) and takes no new one for twice that; an
    operator asks again, and so does this."""
    for _ in range(attempts):
        try:
            group.sentinel_client(group.sentinels[0]).execute_command(
                "SENTINEL", "FAILOVER", "mymaster")
        except redis.ResponseError:  # INPROG: one still runs, or it may not start yet
            pass
        try:
            return group.wait_new_primary(old, timeout=12)
        except AssertionError:
            continue
    raise AssertionError(f"no failover from {old.name} after {attempts} requests")


def forced_failovers_under_load(stack: FailoverStack, group: SentinelGroup) -> None:
    load = Load(stack, secrets=(group.password, group.sentinel_password))
    t0 = time.monotonic()
    clients = [in_background(load.run, k, t0) for k in range(CLIENTS)]
    moves, tickers = [], []
    for share in (3, 2):
        wait_for(lambda share=share: len(load.ids) >= TASKS // share, 60)
        # Two tasks that print while the primary changes: their logs must come out whole.
        ticking = [stack.post(TICKER, key=f"ticker-{share}-{k}") for k in range(2)]
        assert None not in ticking
        tickers += ticking
        wait_for(lambda: set(stack.states_of(ticking).values()) == {"running"}, 30)
        old = group.primary()
        new = forced_failover(group, old)
        group.wait_role(old, "slave")
        moves.append(f"{old.name}->{new.name}")
    for thread in clients:
        thread.join(timeout=180)
    ids = list(load.ids.values())
    report = stack.report(TASKS, ids, timeout=120, output_may_be_lost=True)
    print("\n" + report.line("forced failover x2") + f" {moves} "
          f"attempts={dict(load.outcomes())}")
    assert len(set(ids)) == len(ids) == TASKS
    assert report.lost == 0 and report.launched_twice == 0
    assert report.states["succeeded"] == TASKS
    assert set(stack.wait_final(tickers, 60).values()) == {"succeeded"}
    logs = redis.Redis.from_url(group.url, decode_responses=True).mget(
        [Keys().log(t, 1) for t in tickers])
    missing = {t: [n for n in range(1, TICKS + 1) if f"tick {n}\n" not in (log or "")]
               for t, log in zip(tickers, logs, strict=True)}
    stored_again = sum(STORED_AGAIN in (log or "") for log in logs)
    print(f"tickers: {len(tickers)} stored again {stored_again}")
    assert not any(missing.values()), missing
