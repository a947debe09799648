"""The start-up hook list: a setting with a documented default and ``*`` families."""

from __future__ import annotations

from shared.policy.hooks import DEFAULT, DEFAULT_HOOKS, StartupHooks, injection_problems


def test_every_default_entry_says_what_it_does_and_where_that_is_documented() -> None:
    for pattern, why in DEFAULT.items():
        assert len(why) > 20 and why.endswith(")"), pattern


def test_families_cover_their_members_and_nothing_else() -> None:
    assert DEFAULT_HOOKS.match("LD_PRELOAD") == "LD_*"
    assert DEFAULT_HOOKS.match("GIT_CONFIG_VALUE_3") == "GIT_CONFIG_*"
    assert DEFAULT_HOOKS.match("BASH_FUNC_x%%") == "BASH_FUNC_*"
    for ordinary in ("WORLD_SIZE", "OLD_PRELOAD", "ENVIRONMENT", "LEARNING_RATE", "NCCL_DEBUG"):
        assert DEFAULT_HOOKS.match(ordinary) is None


def test_an_empty_setting_is_the_default_never_nothing() -> None:
    assert StartupHooks.from_setting("").patterns == DEFAULT
    assert StartupHooks.from_setting(" default ").patterns == DEFAULT


def test_an_operator_adds_families_and_takes_one_default_out() -> None:
    hooks = StartupHooks.from_setting("default, MY_*, -BROWSER")
    assert hooks.match("MY_HOOK") == "MY_*" and hooks.match("BROWSER") is None
    assert hooks.match("BASH_ENV") == "BASH_ENV"


def test_a_reservation_is_allowed_a_value_is_not() -> None:
    problems = injection_problems({"protected": [
        {"name": "BASH_ENV", "reason": "r"},
        {"name": "ENV", "value": "/x", "reason": "r"}]}, DEFAULT_HOOKS)
    assert [(p.rule, p.variable, p.field) for p in problems] == [
        ("layer.startup_hook", "ENV", "protected[1].value")]
