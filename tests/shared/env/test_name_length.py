"""A variable's name is at most MAX_NAME_LENGTH characters: named with its limit, once,
beside every other problem of the list, and never judged by the policy or the doctor."""

from __future__ import annotations

from typing import Any

import pytest

from shared.env.envlist import MAX_NAME_LENGTH, Limits, judgeable, validate

LONG = "A" * (MAX_NAME_LENGTH + 1)


def test_the_limit_is_above_what_peers_accept_and_far_below_the_env_s_size() -> None:
    """GitLab accepts keys of up to 255 characters, a ConfigMap key 253: every name they
    accept fits."""
    assert 255 <= MAX_NAME_LENGTH <= 1024


@pytest.mark.parametrize("limits", [Limits(), Limits(name_rule="kubernetes")])
def test_a_name_at_the_limit_passes_and_one_past_it_is_refused_naming_the_limit(
        limits: Limits) -> None:
    assert validate([{"name": "A" * MAX_NAME_LENGTH, "value": "1"}], limits) == []
    problems = validate([{"name": LONG, "value": "1"}], limits)
    assert [p.rule for p in problems] == ["name.max_length"]
    problem = problems[0]
    assert problem.limit == MAX_NAME_LENGTH and problem.variable == LONG
    assert problem.field == "env[0].name"
    assert str(MAX_NAME_LENGTH) in problem.message
    assert f"{len(LONG)} characters" in problem.message


def test_the_message_of_a_huge_name_stays_short() -> None:
    huge = "B" * 100_000
    (problem,) = validate([{"name": huge, "value": "1"}], Limits())
    assert len(problem.message) < 600


def test_it_comes_with_every_other_problem_at_once() -> None:
    env: list[dict[str, Any]] = [{"name": LONG + "-", "value": "x\x00"}, {"name": "OK", "value": 1},
           {"name": LONG, "value": "1"}, {"name": LONG, "value": "2"}]
    rules = sorted(p.rule for p in validate(env, Limits()))
    assert rules == sorted(["name.max_length", "name.shell", "value.nul", "value.type",
                            "name.max_length", "name.max_length", "name.duplicate"])


def test_a_name_past_the_limit_is_not_judged_by_the_policy_or_the_doctor() -> None:
    env = [{"name": LONG, "value": "1"}, {"name": "LR", "value": "0.1"}]
    assert [e["name"] for e in judgeable(env, Limits())] == ["LR"]
