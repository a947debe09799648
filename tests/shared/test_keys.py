"""Key names: every kind is distinct, and a task's keys stay under the task's own key."""

from __future__ import annotations

from shared.keys import Keys

TASK, OWNER, STATE, REVISION = "0123abcd", "alice", "pending", 1


def every_key(keys: Keys) -> dict[str, str]:
    return {
        "task": keys.task(TASK),
        "log": keys.log(TASK, REVISION),
        "log_cut": keys.log_cut(TASK, REVISION),
        "beat": keys.beat(TASK, REVISION),
        "suspect": keys.suspect(TASK, REVISION),
        "requeue_claim": keys.requeue_claim(TASK, REVISION, STATE),
        "idempotency": keys.idempotency(OWNER, TASK),
        "index": keys.index(),
        "index_owner": keys.index(OWNER),
        "by_state": keys.by_state(),
        "by_state_owner": keys.by_state(OWNER),
        "old_state_index": keys.old_state_index(STATE),
        "old_state_index_owner": keys.old_state_index(STATE, OWNER),
        "state_indexes_adopted": keys.state_indexes_adopted(),
        "task_seq": keys.task_seq(),
        "policy_seq": keys.policy_seq(),
        "policy_version": keys.policy_version(REVISION),
        "policy_current": keys.policy_current(),
        "token": keys.token(TASK),
        "token_ids": keys.token_ids(),
        "audit": keys.audit(),
        "auth_failures": keys.auth_failures("127.0.0.1"),
        "auth_failures_of_token": keys.auth_failures_of_token(TASK),
        "session": keys.session(TASK),
        "token_sessions": keys.token_sessions(TASK),
        "reconciler_lock": keys.reconciler_lock(),
        "queue": keys.queue(STATE),
        "slot_leases": keys.slot_leases("host-1"),
        "slot_queue": keys.slot_queue("host-1"),
    }


def test_no_two_kinds_of_key_share_a_name_for_the_same_ids():
    made = every_key(Keys())
    assert len(set(made.values())) == len(made), made


def test_every_key_is_under_the_prefix_so_deployments_can_share_a_redis():
    assert all(k.startswith("tenant-a:") for k in every_key(Keys("tenant-a")).values())
    assert not set(every_key(Keys("tenant-a")).values()) & set(every_key(Keys()).values())


def test_only_a_tasks_own_keys_live_under_its_key():
    made = every_key(Keys())
    under_task = {kind for kind, key in made.items() if key.startswith(made["task"] + ":")}
    assert under_task == {"log", "log_cut", "beat", "suspect", "requeue_claim"}


def test_the_policy_script_completes_the_version_stem_as_policy_version_does():
    keys = Keys()
    assert keys.policy_version() + "7" == keys.policy_version(7)


def test_kombu_puts_its_prefix_before_the_queue_name():
    keys = Keys()
    assert keys.queue("launch") == keys.celery_prefix() + "launch"
