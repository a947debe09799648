"""Connecting with a password, directly or through Sentinel."""

from __future__ import annotations

from redis.sentinel import Sentinel, SentinelConnectionPool

from shared.redis_conn import connect, parse_sentinel_url


def test_a_plain_url_carries_its_password() -> None:
    client = connect("redis://:s3cret%2Fpw@10.0.0.5:6380/2")
    kwargs = client.connection_pool.connection_kwargs

    assert (kwargs["password"], kwargs["host"], kwargs["port"], kwargs["db"]) == \
        ("s3cret/pw", "10.0.0.5", 6380, 2)


def test_a_sentinel_url_gives_its_password_to_the_master() -> None:
    client = connect("sentinel://:pw@10.0.0.1:26379;sentinel://:pw@10.0.0.2/3", "main")
    pool = client.connection_pool

    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "main"
    assert (pool.connection_kwargs["password"], pool.connection_kwargs["db"]) == ("pw", 3)
    # The sentinels are asked without it, as Celery's broker does.
    assert all(s.connection_pool.connection_kwargs.get("password") is None
               for s in pool.sentinel_manager.sentinels)


def test_sentinel_hosts_default_their_port_and_the_password_is_decoded() -> None:
    assert parse_sentinel_url("sentinel://:a%40b@s1;sentinel://s2:26380/1") == \
        ([("s1", 26379), ("s2", 26380)], 1, "a@b")


def test_the_sentinels_get_their_own_password_and_one_try_each() -> None:
    client = connect("sentinel://:pw@10.0.0.1:26379;sentinel://:pw@10.0.0.2/3", "main",
                     sentinel_password="sp", timeout=3)
    pool = client.connection_pool
    for s in pool.sentinel_manager.sentinels:
        kwargs = s.connection_pool.connection_kwargs
        assert kwargs["password"] == "sp" and kwargs["socket_timeout"] == 3
        assert s.connection_pool.make_connection().retry.get_retries() == 0
    assert pool.connection_kwargs["password"] == "pw"  # the primary's, apart
    assert pool.connection_kwargs["socket_timeout"] == 3


def test_every_call_is_bounded_and_retried_on_a_new_connection() -> None:
    conn = connect("redis://127.0.0.1:1/0", timeout=0.5).connection_pool.make_connection()
    assert conn.socket_timeout == 0.5 and conn.socket_connect_timeout == 0.5
    assert conn.retry.get_retries() == 3


def test_a_sentinel_still_failing_over_is_not_asked_where_the_primary_is():
    sentinel = Sentinel([("127.0.0.1", 1)])
    up = {"ip": "127.0.0.1", "port": 1, "is_master": True, "is_sdown": False,
          "is_odown": False, "num-other-sentinels": 2}
    assert sentinel.check_master_state({**up, "flags": "master"}, "mymaster")
    # The failover's leader names the old primary, up again and empty, until it ends.
    assert not sentinel.check_master_state({**up, "flags": "master,failover_in_progress"},
                                           "mymaster")
    assert not sentinel.check_master_state({**up, "flags": {"master", "failover_in_progress"}},
                                           "mymaster")
