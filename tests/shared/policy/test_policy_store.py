"""The policy store: versions per scope, and many scopes read at once."""

from __future__ import annotations

import fakeredis

from shared.policy.model import Policy, project_scope
from shared.policy.store import PolicyStore


def test_the_current_policies_of_many_scopes_are_read_in_one_round_trip() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    platform = PolicyStore(client)
    for name, value in (("vision", "1"), ("speech", "2")):
        platform.scoped(project_scope(name)).put(Policy.from_dict(
            {"defaults": [{"name": "SEED", "value": value}]}))
    platform.scoped(project_scope("speech")).put(Policy.from_dict(
        {"defaults": [{"name": "SEED", "value": "3"}]}))
    scopes = [project_scope(n) for n in ("vision", "speech", "empty")]
    found = platform.currents(scopes)
    assert [found[s].version for s in scopes] == [1, 2, 0]
    assert found[project_scope("speech")].defaults[0].value == "3"
    assert found[project_scope("empty")] == platform.scoped(project_scope("empty")).current()
