"""Tokens, console sessions and the failure budget, on fakeredis."""

from __future__ import annotations

from shared.access.tokens import AuthFailures, SessionStore, TokenStore, digest
from shared.keys import Keys


def test_failures_within_budget_wait_for_nothing(redis_client) -> None:
    failures = AuthFailures(redis_client, per_minute=3)
    assert [failures.fail("10.0.0.1", f"tke_guess{i}") for i in range(4)] ==\
        [0, 0, 0, AuthFailures.WINDOW]


def test_a_token_beginning_is_counted_as_a_digest_only(redis_client) -> None:
    failures = AuthFailures(redis_client, per_minute=1)
    failures.fail("10.0.0.1", "tke_abcdefgh-rest-of-it")

    assert failures.fail("10.0.0.2", "tke_abcdefgh-another-rest") == AuthFailures.WINDOW
    assert failures.fail("10.0.0.3", "tke_zzzzzzzz") == 0
    assert not [k for k in redis_client.keys("*") if "abcdefgh" in k]


def test_a_missing_token_counts_against_the_address_only(redis_client) -> None:
    failures = AuthFailures(redis_client, per_minute=1)
    failures.fail("10.0.0.1", "")
    assert redis_client.keys("*") == [Keys().auth_failures("10.0.0.1")]


def test_a_session_is_stored_under_its_ids_digest_and_read_back(redis_client) -> None:
    sessions = SessionStore(redis_client, idle_seconds=600)
    sid = sessions.new_id()
    sessions.save(sid, '{"who": 1}', token_id="t1")

    assert sessions.load(sid) == '{"who": 1}'
    key = Keys().session(digest(sid))
    assert 0 < redis_client.ttl(key) <= 600
    assert not [k for k in redis_client.keys("*") if sid in k]


def test_a_session_before_login_is_kept_briefly(redis_client) -> None:
    sessions = SessionStore(redis_client, idle_seconds=3600)
    sid = sessions.new_id()
    sessions.save(sid, "{}", token_id=None)
    assert redis_client.ttl(Keys().session(digest(sid))) <= SessionStore.ANONYMOUS_SECONDS


def test_an_ended_session_is_gone(redis_client) -> None:
    sessions = SessionStore(redis_client)
    sid = sessions.new_id()
    sessions.save(sid, "{}", token_id="t1")
    sessions.end(sid)
    assert sessions.load(sid) is None


def test_revoking_a_token_ends_every_session_made_with_it(redis_client) -> None:
    tokens, sessions = TokenStore(redis_client), SessionStore(redis_client)
    _, alice = tokens.create("alice", "user", "tests")
    _, bob = tokens.create("bob", "user", "tests")
    alice_sessions = [sessions.new_id() for _ in range(2)]
    for sid in alice_sessions:
        sessions.save(sid, "{}", token_id=alice.id)
    bob_session = sessions.new_id()
    sessions.save(bob_session, "{}", token_id=bob.id)

    tokens.revoke(alice.id)

    assert [sessions.load(sid) for sid in alice_sessions] == [None, None]
    assert sessions.load(bob_session) == "{}"
