"""The platform's record of its secret keys, by fingerprint: who may join, a rotation."""

from __future__ import annotations

import fakeredis

from shared.keyring import join, recorded, sealed_with_only
from shared.keys import Keys
from shared.secrets import key_fingerprints, new_key

KEYS = Keys("kr")
OLD, NEW = new_key(), new_key()


def fingerprints(*keys: str) -> list[str]:
    return key_fingerprints(",".join(keys))


def test_a_fingerprint_names_a_key_and_shows_nothing_of_it() -> None:
    [old] = fingerprints(OLD)
    assert fingerprints(f" {OLD} ") == [old] and fingerprints(NEW) != [old]
    assert len(old) == 64 and OLD not in old
    assert fingerprints(NEW, OLD) == fingerprints(NEW) + fingerprints(OLD)  # in order
    assert key_fingerprints("") == key_fingerprints(" , ") == []


def test_the_first_process_records_its_key_and_others_must_hold_it() -> None:
    client = fakeredis.FakeRedis()
    assert join(client, KEYS, fingerprints(OLD)) == []
    assert recorded(client, KEYS) == set(fingerprints(OLD))
    assert join(client, KEYS, []) == fingerprints(OLD)  # no keys: refused
    assert join(client, KEYS, fingerprints(NEW)) == fingerprints(OLD)  # other keys: refused
    assert recorded(client, KEYS) == set(fingerprints(OLD))  # a refused process adds nothing


def test_a_platform_without_keys_records_none_and_takes_processes_without_keys() -> None:
    client = fakeredis.FakeRedis()
    assert join(client, KEYS, []) == [] and join(client, KEYS, []) == []
    assert recorded(client, KEYS) == set()


def test_a_rotation_records_the_new_key_then_leaves_it_alone() -> None:
    client = fakeredis.FakeRedis()
    join(client, KEYS, fingerprints(OLD))
    # 1. Restarted with the new key first and the old one kept: joins, records the new.
    assert join(client, KEYS, fingerprints(NEW, OLD)) == []
    assert recorded(client, KEYS) == set(fingerprints(NEW, OLD))
    assert join(client, KEYS, fingerprints(NEW)) == fingerprints(OLD)  # not yet alone
    assert join(client, KEYS, fingerprints(OLD)) == fingerprints(NEW)  # nor the old alone
    # 2. rotate-secrets re-sealed every value with the new key.
    sealed_with_only(client, KEYS, fingerprints(NEW)[0])
    # 3. The new key alone is the platform's; a process still holding both joins too.
    assert join(client, KEYS, fingerprints(NEW)) == []
    assert join(client, KEYS, fingerprints(NEW, OLD)) == []
    assert join(client, KEYS, fingerprints(OLD)) == fingerprints(NEW)
    assert recorded(client, KEYS) == set(fingerprints(NEW))


def test_the_record_is_the_prefix_s_own() -> None:
    client = fakeredis.FakeRedis()
    join(client, KEYS, fingerprints(OLD))
    assert join(client, Keys("another"), fingerprints(NEW)) == []
