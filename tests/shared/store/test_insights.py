"""Per-day counters of states and rejections: windows, scopes, expiry, names only."""

from __future__ import annotations

import fakeredis

from shared.store.insights import DAY, KEEP_SECONDS, Insights

NOW = 1_700_000_000.0


def problem(rule: str, variable: str | None = None, message: str = "m") -> dict[str, object]:
    return {"rule": rule, "variable": variable, "message": message}


def test_states_are_summed_over_the_days_asked_for() -> None:
    counters = Insights(fakeredis.FakeRedis(decode_responses=True), "t")
    counters.entered("pending", None, NOW - 3 * DAY)
    counters.entered("pending", "vision", NOW)
    counters.entered("succeeded", "vision", NOW)
    assert counters.states(1, now=NOW) == {"pending": 1, "succeeded": 1}
    assert counters.states(7, now=NOW) == {"pending": 2, "succeeded": 1}
    assert counters.states(7, "vision", now=NOW) == {"pending": 1, "succeeded": 1}
    assert counters.states(7, "other", now=NOW) == {}


def test_rejections_rank_rule_and_variable_pairs_counting_each_task_once() -> None:
    counters = Insights(fakeredis.FakeRedis(decode_responses=True), "t")
    for _ in range(2):
        counters.rejected([problem("policy.protected", "NCCL_P2P_DISABLE"),
                           problem("policy.protected", "NCCL_P2P_DISABLE", "again")], None, NOW)
    counters.rejected([problem("name.invalid", "1BAD"), problem("env.size")], None, NOW)
    assert counters.rejections(7, now=NOW) == [
        {"rule": "policy.protected", "variable": "NCCL_P2P_DISABLE", "count": 2},
        {"rule": "env.size", "variable": None, "count": 1},
        {"rule": "name.invalid", "variable": "1BAD", "count": 1}]
    assert counters.rejections(7, now=NOW, limit=1)[0]["count"] == 2


def test_counters_expire_after_a_week_and_a_day_and_hold_no_value() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    Insights(client, "t").rejected([problem("rule.pattern", "TOKEN", "hunter2 is wrong")],
                                   "vision", NOW)
    keys = client.keys("t:insights:*")
    assert len(keys) == 2  # every task's and the project's
    assert all(0 < client.ttl(k) <= KEEP_SECONDS for k in keys)
    assert all("hunter2" not in str(client.hgetall(k)) for k in keys)


def test_a_redis_error_never_undoes_what_is_counted() -> None:
    server = fakeredis.FakeServer()
    server.connected = False  # every command fails with ConnectionError
    broken = Insights(fakeredis.FakeRedis(server=server), "t")
    broken.entered("pending", None, NOW)
    broken.rejected([problem("policy.protected", "X")], "vision", NOW)
    server.connected = True
    assert broken.states(7, now=NOW) == {}
