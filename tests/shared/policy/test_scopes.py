"""The chain of scopes: built in one place, passed whole, of any length."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest

from shared.doctor.catalog import Entry, applying
from shared.env.envlist import Limits
from shared.policy.model import Policy
from shared.policy.scope_checks import check_scope_policy
from shared.policy.scopes import Chain, scopes_for
from shared.policy.store import PolicyStore
from shared.task.resolution import decide_policy, preview

PLATFORM = Policy.from_dict({"version": 3, "defaults": [{"name": "A", "value": "platform"}],
                             "protected": [{"name": "P", "value": "1", "reason": "fabric"}]})
# A scope between the platform and the project (a team's, as one would be added).
TEAM = Policy.from_dict({"scope": "team:vision-research", "version": 2,
                         "defaults": [{"name": "A", "value": "team"}],
                         "protected": [{"name": "T", "value": "x", "reason": "team rule"}]})
PROJECT = Policy.from_dict({"scope": "project:vision", "version": 5,
                            "defaults": [{"name": "A", "value": "project"},
                                         {"name": "B", "value": "project"}]})
DOC = {"id": "t", "name": "t", "revision": 1, "warnings": [], "project": "vision"}


def test_a_task_names_its_scopes_outermost_first_in_one_place() -> None:
    assert scopes_for({}) == ["platform"]
    assert scopes_for({"project": "vision"}) == ["platform", "project:vision"]


def test_a_chain_starts_with_the_platform_and_knows_what_lies_above_a_scope() -> None:
    chain = Chain((PLATFORM, TEAM, PROJECT))
    assert chain.scopes() == ["platform", "team:vision-research", "project:vision"]
    assert chain.above("project:vision").scopes() == ["platform", "team:vision-research"]
    assert chain.project == "vision" and chain.protected_names() == {"P", "T"}
    assert chain.versions() == {"platform": 3, "team:vision-research": 2, "project:vision": 5}
    draft = Policy.from_dict({"scope": "team:vision-research", "version": 9})
    assert chain.with_policy(draft).policies[1] is draft
    with pytest.raises(ValueError, match="starts with the platform"):
        Chain((PROJECT,))


def test_resolution_takes_a_chain_of_any_length_the_closest_default_winning() -> None:
    """Three scopes, and no resolution code knows there are three."""
    state, decided = decide_policy({**DOC, "env": [{"name": "T", "value": "mine"}]},
                                   Chain((PLATFORM, TEAM, PROJECT)))
    assert state == "rejected"  # the team's protected value holds against the user
    assert [e["variable"] for e in decided["errors"]] == ["T"]
    state, decided = decide_policy({**DOC, "env": []}, Chain((PLATFORM, TEAM, PROJECT)))
    assert state == "resolved", decided
    values = {v["name"]: (v["value"], v["scope"]) for v in decided["resolved"]
              if v["source"] in ("default", "protected")}
    assert values["A"] == ("project", "project:vision")  # the closest scope's default
    assert values["T"] == ("x", "team:vision-research") and values["P"] == ("1", "platform")
    assert decided["policy_versions"] == {"platform": 3, "team:vision-research": 2,
                                          "project:vision": 5}
    shown = preview([], "t", Chain((PLATFORM, TEAM, PROJECT)), Limits(), {"project": "vision"})
    assert shown["policy_versions"] == decided["policy_versions"]


def test_a_scopes_policy_is_checked_against_every_scope_above_it() -> None:
    """A project may not set what the team above it protects, as it may not set what the
    platform protects."""
    above = Chain((PLATFORM, TEAM, PROJECT)).above("project:vision")
    data = {"defaults": [{"name": "T", "value": "y"}, {"name": "P", "value": "0"}]}
    problems = check_scope_policy(data, above, Limits())
    assert {(p.rule, p.variable) for p in problems} == {
        ("layer.platform_protected", "T"), ("layer.platform_protected", "P")}
    assert any("team:vision-research" in p.message for p in problems)


def test_the_catalog_has_one_edited_layer_per_scope_the_innermost_winning() -> None:
    layers = [[Entry("LR", "platform's", layer="platform", scope="platform")],
              [Entry("LR", "team's", layer="team", scope="team:vision-research")],
              [Entry("LR", "project's", layer="project", scope="project:vision")]]
    assert applying(True, layers).get("LR") == layers[2][0]
    assert applying(True, layers[:2]).get("LR") == layers[1][0]


class Counting(fakeredis.FakeRedis):
    """Remembers each command it is sent."""

    sent: list[str] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]).upper())
        return super().execute_command(*args, **options)


def test_the_store_reads_a_tasks_chain_in_one_round_trip() -> None:
    client = Counting()
    store = PolicyStore(client)
    store.put(Policy.from_dict({"defaults": [{"name": "A", "value": "1"}]}))
    store.scoped("project:vision").put(Policy.from_dict({"defaults": [
        {"name": "B", "value": "2"}]}))
    store.chain({"project": "vision"})  # versions read once: a version never changes
    client.sent.clear()
    chain = store.chain({"project": "vision"})
    assert chain.scopes() == ["platform", "project:vision"]
    assert client.sent == ["MGET"]
