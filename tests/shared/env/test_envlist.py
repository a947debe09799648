"""Every rule of shared.env.envlist.validate, and that all problems come back at once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.env import envlist
from shared.env.envlist import (
    MAX_PROBLEMS,
    EnvVar,
    Limits,
    capped,
    check_storable,
    entry_bytes,
    parse,
    validate,
)
from shared.errors import Problem

SHELL = Limits()
KUBERNETES = Limits(name_rule="kubernetes")

# Values are data: none of these may be refused or altered.
PLAIN_DATA_VALUES = [
    "$(HOME)", "${HOME}", "`id`", "a;b", "a && b", "line1\nline2", "tab\there",
    "数据/路径", "🚀 launch", "x=y=z", "'quoted' \"twice\"", "\\n", "",
]


def var(name: object = "NAME", value: object = "value", **extra: object) -> dict[str, object]:
    return {"name": name, "value": value, **extra}


def with_rule(problems: list[Problem], rule: str) -> list[Problem]:
    return [p for p in problems if p.rule == rule]


def rules_of(problems: list[Problem]) -> list[str]:
    return [p.rule for p in problems]


def the_one(problems: list[Problem], rule: str) -> Problem:
    found = with_rule(problems, rule)
    assert len(found) == 1, problems
    return found[0]


def test_a_valid_list_has_no_problems() -> None:
    env = [var("LEARNING_RATE", "0.01"), var("DATA_DIR", "/data"),
           var("TOKEN", "t-secret-1", secret=True)]
    assert validate(env, SHELL) == []


def test_an_empty_list_is_valid() -> None:
    assert validate([], SHELL) == []


@pytest.mark.parametrize("value", PLAIN_DATA_VALUES)
def test_shell_metacharacters_newlines_and_unicode_are_valid_values(value: str) -> None:
    assert validate([var("V", value)], SHELL) == []


# --- names -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["A", "_", "a", "_x9", "LEARNING_RATE", "nccl_debug", "A1_B2"])
def test_shell_names_accepted(name: str) -> None:
    assert validate([var(name)], SHELL) == []


@pytest.mark.parametrize("name", ["1A", "A-B", "A B", "A=B", "A.B", "Ä", "$A", "A\nB", "数据"])
def test_shell_rule_rejects_name(name: str) -> None:
    problem = the_one(validate([var(name)], SHELL), "name.shell")
    assert problem.variable == name
    assert problem.field == "env[0].name"
    assert "^[A-Za-z_][A-Za-z0-9_]*$" in problem.message


@pytest.mark.parametrize("name", ["A-B", "a.b", "1A", "with space", "~tilde", "A:B", "x/y"])
def test_kubernetes_rule_accepts_printable_ascii(name: str) -> None:
    assert validate([var(name)], KUBERNETES) == []


@pytest.mark.parametrize("name", ["A=B", "=", "tab\there", "new\nline", "Ä", "数据", "del\x7f"])
def test_kubernetes_rule_rejects_equals_control_and_non_ascii(name: str) -> None:
    problem = the_one(validate([var(name)], KUBERNETES), "name.kubernetes")
    assert problem.variable == name
    assert problem.field == "env[0].name"
    assert "'='" in problem.message


def test_unprintable_name_is_shown_escaped_in_the_message() -> None:
    problem = the_one(validate([var("A\nB")], SHELL), "name.shell")
    assert "\n" not in problem.message
    assert repr("A\nB") in problem.message


@pytest.mark.parametrize("name", ["", None, 5, ["A"]])
def test_name_is_required_and_must_be_a_non_empty_string(name: object) -> None:
    problem = the_one(validate([var(name)], SHELL), "name.required")
    assert problem.field == "env[0].name"
    assert "env[0]" in problem.message


def test_missing_name_key_is_name_required() -> None:
    problem = the_one(validate([{"value": "x"}], SHELL), "name.required")
    assert problem.field == "env[0].name"


def test_duplicate_names_are_reported_with_both_positions() -> None:
    problems = validate([var("A", "1"), var("B"), var("A", "2")], SHELL)
    problem = the_one(problems, "name.duplicate")
    assert problem.variable == "A"
    assert problem.field == "env[2].name"
    assert "env[0]" in problem.message and "env[2]" in problem.message


def test_each_repeat_of_a_name_is_reported_against_its_first_position() -> None:
    problems = with_rule(validate([var("A"), var("A"), var("A")], SHELL), "name.duplicate")
    assert [p.field for p in problems] == ["env[1].name", "env[2].name"]
    assert all("env[0]" in p.message for p in problems)


def test_names_are_case_sensitive() -> None:
    assert validate([var("path"), var("PATH")], SHELL) == []


# --- values ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [None, 5, 0.5, True, ["x"], {"k": "v"}])
def test_value_must_be_a_string(value: object) -> None:
    problem = the_one(validate([var("V", value)], SHELL), "value.type")
    assert problem.variable == "V"
    assert problem.field == "env[0].value"
    assert type(value).__name__ in problem.message


def test_missing_value_is_a_type_problem() -> None:
    problem = the_one(validate([{"name": "V"}], SHELL), "value.type")
    assert problem.variable == "V"


def test_value_type_problem_without_a_usable_name_names_the_position() -> None:
    problem = the_one(validate([{"name": 7, "value": 7}], SHELL), "value.type")
    assert problem.variable is None
    assert "env[0]" in problem.message


def test_nul_byte_in_a_value_is_refused() -> None:
    problem = the_one(validate([var("V", "a\x00b")], SHELL), "value.nul")
    assert problem.variable == "V"
    assert problem.field == "env[0].value"
    assert "V" in problem.message


def test_value_at_exactly_the_byte_limit_is_valid() -> None:
    assert validate([var("V", "x" * 16)], Limits(max_value_bytes=16)) == []


def test_value_one_byte_over_the_limit_is_refused_naming_the_limit() -> None:
    problem = the_one(validate([var("V", "x" * 17)], Limits(max_value_bytes=16)),
                      "value.max_bytes")
    assert problem.variable == "V"
    assert problem.limit == 16
    assert "16" in problem.message and "17" in problem.message
    assert problem.field == "env[0].value"


def test_value_limit_counts_utf8_bytes_not_characters() -> None:
    limits = Limits(max_value_bytes=8)
    assert validate([var("V", "é" * 4)], limits) == []  # 8 bytes
    assert rules_of(validate([var("V", "é" * 4 + "x")], limits)) == ["value.max_bytes"]


def test_default_value_limit_is_linux_max_arg_strlen() -> None:
    assert validate([var("V", "x" * 128 * 1024)], SHELL) == []
    assert rules_of(validate([var("V", "x" * (128 * 1024 + 1))], SHELL)) == ["value.max_bytes"]


# --- the list as a whole -----------------------------------------------------------------

def test_entry_bytes_counts_name_equals_value_and_nul() -> None:
    assert entry_bytes("AB", "xyz") == len(b"AB=xyz\x00")
    assert entry_bytes("A", "é") == len("A=é\x00".encode())


def test_env_at_exactly_the_total_byte_limit_is_valid() -> None:
    env = [var("A", "12345"), var("BB", "6789")]
    limit = entry_bytes("A", "12345") + entry_bytes("BB", "6789")
    assert validate(env, Limits(max_env_bytes=limit)) == []


def test_env_one_byte_over_the_total_limit_is_refused_naming_the_limit() -> None:
    env = [var("A", "12345"), var("BB", "67890")]
    limit = entry_bytes("A", "12345") + entry_bytes("BB", "6789")
    problem = the_one(validate(env, Limits(max_env_bytes=limit)), "env.max_bytes")
    assert problem.limit == limit
    assert str(limit) in problem.message and str(limit + 1) in problem.message


def test_env_at_exactly_the_variable_count_limit_is_valid() -> None:
    assert validate([var(f"V{i}") for i in range(3)], Limits(max_vars=3)) == []


def test_one_variable_over_the_count_limit_is_refused_once_naming_the_limit() -> None:
    problem = the_one(validate([var(f"V{i}") for i in range(4)], Limits(max_vars=3)),
                      "env.max_vars")
    assert problem.limit == 3
    assert "3" in problem.message and "4" in problem.message


@pytest.mark.parametrize("secret", ["yes", "true", 1, 0, None, []])
def test_secret_must_be_a_boolean(secret: object) -> None:
    problem = the_one(validate([var("S", "v", secret=secret)], SHELL), "secret.type")
    assert problem.variable == "S"
    assert problem.field == "env[0].secret"


@pytest.mark.parametrize("secret", [True, False])
def test_boolean_secret_is_valid(secret: bool) -> None:
    assert validate([var("S", "value-of-8", secret=secret)], SHELL) == []


# --- all at once -------------------------------------------------------------------------

def test_all_problems_are_reported_at_once() -> None:
    env = [
        var("1BAD"),
        var("DUP", "1"),
        var("DUP", "2"),
        var("NUL", "a\x00b"),
        var("BIG", "x" * 40),
        var("TYPED", 42),
        var("SECRET", "v", secret="yes"),
        var(""),
    ]
    limits = Limits(max_vars=5, max_value_bytes=32, max_env_bytes=64)
    problems = validate(env, limits)
    assert sorted(rules_of(problems)) == sorted([
        "name.shell", "name.duplicate", "value.nul", "value.max_bytes", "value.type",
        "secret.type", "name.required", "env.max_vars", "env.max_bytes",
    ])


def test_one_entry_can_break_several_rules_and_all_are_reported() -> None:
    problems = validate([var("1BAD", None, secret="no")], SHELL)
    assert sorted(rules_of(problems)) == ["name.shell", "secret.type", "value.type"]
    assert {p.variable for p in problems} == {"1BAD"}


def test_every_per_variable_problem_names_the_variable_in_field_and_message() -> None:
    env = [var("1BAD"), var("DUP"), var("DUP"), var("NUL", "\x00"), var("BIG", "x" * 9),
           var("TYPED", 1), var("SECRET", "v", secret=1)]
    problems = validate(env, Limits(max_value_bytes=8))
    assert len(problems) == 6
    for problem in problems:
        assert problem.variable is not None, problem
        assert problem.variable in problem.message, problem
        assert problem.field is not None and problem.field.startswith("env["), problem


def test_every_problem_with_a_limit_names_it_in_the_message() -> None:
    env = [var(f"V{i}", "x" * 10) for i in range(3)]
    problems = validate(env, Limits(max_vars=2, max_value_bytes=9, max_env_bytes=20))
    limited = [p for p in problems if p.limit is not None]
    assert {p.rule for p in limited} == {"env.max_vars", "env.max_bytes", "value.max_bytes"}
    for problem in limited:
        assert str(problem.limit) in problem.message, problem


def test_problem_dict_leaves_out_empty_fields() -> None:
    problem = the_one(validate([var("V", "x" * 3)], Limits(max_value_bytes=2)), "value.max_bytes")
    assert problem.to_dict() == {"rule": "value.max_bytes", "variable": "V",
                                 "field": "env[0].value", "limit": 2,
                                 "message": problem.message}
    required = the_one(validate([var("")], SHELL), "name.required").to_dict()
    assert "variable" not in required and "limit" not in required


def test_validate_accepts_any_iterable() -> None:
    assert validate(iter([var("A")]), SHELL) == []


def test_parse_turns_entries_into_env_vars_keeping_order_and_secret_flag() -> None:
    parsed = parse([var("B", "2"), var("A", "$(HOME)", secret=True)])
    assert parsed == [EnvVar("B", "2"), EnvVar("A", "$(HOME)", secret=True)]
    assert parsed[1].to_dict() == {"name": "A", "value": "$(HOME)", "secret": True}
    assert parsed[0].to_dict() == {"name": "B", "value": "2"}


def test_limits_come_from_settings() -> None:
    from shared.config import Settings

    settings = Settings(name_rule="kubernetes", max_vars=7, max_value_bytes=8, max_env_bytes=9)
    assert Limits.from_settings(settings) == Limits("kubernetes", 7, 8, 9)


@pytest.mark.parametrize("value", ["\ud800", "ok\udfffok"])
def test_value_that_is_not_encodable_text_is_a_problem_not_a_crash(value: str) -> None:
    # JSON may carry a lone surrogate ("\ud800"); Python's json module accepts it.
    problems = validate([var("V", value)], SHELL)
    assert [p.variable for p in problems] == ["V"]


def test_name_that_is_not_encodable_text_is_a_problem_not_a_crash() -> None:
    problems = validate([var("\ud800", "v")], KUBERNETES)
    assert [p.rule for p in problems] == ["name.kubernetes"]


# --- secrets long enough to redact ---------------------------------------------------------

@pytest.mark.parametrize("value", ["", "abc", "1234567"])
def test_a_secret_shorter_than_eight_characters_is_refused_with_its_name_and_limit(
        value: str) -> None:
    problem = the_one(validate([var("HF_TOKEN", value, secret=True)], SHELL),
                      "secret.too_short")
    assert (problem.variable, problem.limit, problem.field) == ("HF_TOKEN", 8, "env[0].value")
    assert "at least 8 characters" in problem.message


def test_eight_characters_make_a_secret_and_a_short_plain_value_is_fine() -> None:
    assert validate([var("A", "12345678", secret=True), var("B", "x")], SHELL) == []


def test_a_policy_secret_default_or_protected_value_must_be_eight_characters_too() -> None:
    from shared.policy.model import check_policy

    problems = check_policy({
        "defaults": [var("DB_PASSWORD", "pw", secret=True)],
        "protected": [{"name": "REGISTRY_TOKEN", "value": "abc", "secret": True,
                       "reason": "platform registry"},
                      {"name": "GPUS", "reason": "the scheduler's", "secret": True}],
    }, SHELL)
    assert [(p.rule, p.variable, p.limit) for p in problems] == [
        ("secret.too_short", "DB_PASSWORD", 8), ("secret.too_short", "REGISTRY_TOKEN", 8)]


# --- refused before anything is stored, and capped ------------------------------------------

def test_check_storable_keeps_only_what_could_make_a_record_large_or_unsafe() -> None:
    limits = Limits(max_vars=3, max_value_bytes=10)
    env = [var("BAD NAME", "v"), var("A", "x" * 11), var("A", "s", secret=True),
           var("B", "v"), var("C", "\ud800")]
    assert sorted(rules_of(check_storable(env, limits))) == [
        "env.max_vars", "secret.too_short", "value.encoding", "value.max_bytes"]


def test_a_huge_value_that_cannot_be_encoded_is_still_refused_for_its_size() -> None:
    problems = validate([var("V", "\ud800" + "x" * 20)], Limits(max_value_bytes=10))
    assert {"value.encoding", "value.max_bytes"} <= set(rules_of(problems))


def test_a_long_problem_list_is_capped_with_a_count_of_the_rest() -> None:
    env = [var("DUP", "v")] * 120_000
    problems = capped(validate(env, Limits(max_vars=10**6, max_env_bytes=10**9)))
    assert len(problems) == MAX_PROBLEMS + 1
    last = problems[-1]
    assert (last.rule, last.limit) == ("errors.truncated", MAX_PROBLEMS)
    assert f"and {120_000 - 1 - MAX_PROBLEMS} more" in last.message


def test_a_short_problem_list_is_not_touched() -> None:
    problems = validate([var("1X", "v")], SHELL)
    assert capped(problems) == problems


# Entries near every rule's edge: names valid or not, values with NULs, lone surrogates,
# sizes around the limit, secrets short and long, fields of the wrong type.
EDGE = Limits(max_value_bytes=16)
names_st = st.one_of(st.sampled_from(["A", "LR", "_X1", "", "1BAD", "a-b", "é", "A B"]),
                     st.text(max_size=6), st.integers(), st.none())
values_st = st.one_of(st.text(max_size=20), st.sampled_from(["\x00", "a\ud800", "x" * 17]),
                      st.integers(), st.none())
secret_st = st.one_of(st.booleans(), st.sampled_from(["yes", 1, None]))


@settings(max_examples=400, deadline=None)
@given(names_st, values_st, secret_st, st.booleans())
def test_the_quick_check_of_an_entry_agrees_with_the_full_one(
        name: object, value: object, secret: object, with_secret: bool) -> None:
    """``validate`` checks each entry in one quick pass and says what is wrong only where
    something is: the quick pass passes exactly the entries the full check finds nothing
    in, and counts their bytes as ``entry_bytes`` does."""
    entry = var(name, value, **({"secret": secret} if with_secret else {}))
    for limits in (EDGE, KUBERNETES):
        rule = envlist.NAME_RULES[limits.name_rule]
        size = envlist._clean_size(entry, rule, limits)
        full = envlist._check_entry("env[0]", entry, limits)
        assert (size is not None) == (full == []), (entry, full)
        if size is not None:
            assert size == entry_bytes(str(name), str(value))


@given(st.text(min_size=1, max_size=10), st.text(max_size=20), st.booleans())
def test_parsed_variables_and_plain_user_entries_are_the_ordinary_values(
        name: str, value: str, secret: bool) -> None:
    """``parse``, ``Resolved.of_user`` and ``Resolved.from_dict`` skip the frozen
    ``__init__`` for speed: what they make equals, hashes, prints and stays as frozen as
    what the constructor makes."""
    from dataclasses import FrozenInstanceError

    from shared.policy.model import Resolved, Shadowed

    [parsed] = envlist.parse([{"name": name, "value": value, "secret": secret}])
    made = EnvVar(name, value, secret)
    assert parsed == made and hash(parsed) == hash(made) and repr(parsed) == repr(made)
    fast, slow = Resolved.of_user(name, value, secret), Resolved(name, value, "user",
                                                                  secret=secret)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.to_dict() == slow.to_dict()
    with pytest.raises(FrozenInstanceError):
        fast.value = "changed"  # type: ignore[misc]
    layered = Resolved(name, value, "project", ("platform",), secret, "project:p", 3, "w",
                       (Shadowed("platform", "platform", "x"),))
    for made in (slow, layered):  # ``from_dict`` fills one the same way
        read = Resolved.from_dict(made.to_dict())
        assert read == made and hash(read) == hash(made) and repr(read) == repr(made)
        with pytest.raises(FrozenInstanceError):
            read.value = "changed"  # type: ignore[misc]
