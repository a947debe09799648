"""Error lines name the variable and the rule; data is printed as typed, never as markup."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from cli import render


def text_of(*parts: Any) -> str:
    out = Console(record=True, width=200, file=io.StringIO())
    for part in parts:
        out.print(part)
    return out.export_text()


def test_problem_line_names_variable_message_rule_and_limit():
    line = render.problem_line({"variable": "BIG", "rule": "value.size", "limit": 131072,
                                "message": "BIG is longer than 128 KiB"})

    assert line == "BIG: BIG is longer than 128 KiB (value.size, limit 131072)"


def test_problem_line_falls_back_to_the_field_then_the_request():
    assert render.problem_line({"field": "steps.0", "rule": "schema", "message": "m"}) == (
        "steps.0: m (schema)")
    assert render.problem_line({"rule": "schema", "message": "m"}) == "request: m (schema)"


def test_values_with_markup_and_control_characters_are_shown_literally():
    table = render.env_table([{"name": "X", "value": "[bold]$(id)[/bold]\nnext",
                               "source": "user", "overrode": ["default"]}])

    shown = text_of(table)

    assert "[bold]$(id)[/bold]\\nnext" in shown
    assert "default" in shown


def test_diff_lines_show_each_change_with_its_source_and_hide_secrets():
    diff = {"added": [{"name": "NEW", "value": "1", "source": "user"}],
            "removed": [{"name": "OLD", "value": "x", "source": "default"}],
            "changed": [{"name": "LR", "old": "0.01", "new": "0.005", "source": "user"},
                        {"name": "HF_TOKEN", "old": "********", "new": "********",
                         "source": "user", "secret": True}]}

    lines = [line.plain for line in render.diff_lines(diff)]

    assert lines == ["+ NEW=1  [user]", "- OLD=x  [default]", "~ LR: 0.01 -> 0.005  [user]",
                     "~ HF_TOKEN: (secret) changed  [user]"]
    assert [line.plain for line in render.diff_lines({})] == ["no differences"]


def test_impact_summary_lists_rejections_and_value_changes():
    impact = {"considered": 12, "rejected": 5, "newly_rejected": 2, "already_rejected": 3,
              "rejections": [{"variable": "DATA_ROOT", "rule": "policy.protected",
                              "message": "protected", "tasks": 5, "newly_rejected": 2,
                              "already_rejected": 3, "owners": 1}],
              "changes": [{"name": "NCCL_DEBUG", "old": "WARN", "new": "INFO", "tasks": 5,
                           "owners": 3},
                          {"name": "KEY", "secret": True, "old": "a", "new": "b", "tasks": 1,
                           "owners": 1},
                          {"name": "ADDED", "old": None, "new": "1", "tasks": 4, "owners": 2}]}

    shown = text_of(*render.impact_parts(impact))

    assert ("tasks considered: 12, would newly be rejected: 2 (rejected today already: 3), "
            "would change: 3") in shown
    assert "would be rejected: 5" not in shown
    assert "DATA_ROOT" in shown and "policy.protected" in shown
    assert "WARN" in shown and "INFO" in shown
    assert "(unset)" in shown
    assert "(changed)" in shown and " a " not in shown


def test_a_message_that_repeats_its_field_is_not_said_twice():
    line = render.problem_line({"field": "steps.0.0", "rule": "schema",
                                "message": "steps.0.0: Not a valid string."})

    assert line == "steps.0.0: Not a valid string. (schema)"


def test_a_multi_line_message_keeps_its_lines_indented_under_the_first():
    line = render.problem_line({"variable": "DATA_ROOT", "rule": "policy.protected",
                                "message": "DATA_ROOT is protected: shared storage\n"
                                           "ask #infra\r\nfor a bucket\n"})

    assert line == ("DATA_ROOT: DATA_ROOT is protected: shared storage (policy.protected)\n"
                    "  ask #infra\n"
                    "  for a bucket")


def test_each_line_of_a_message_keeps_its_control_characters_escaped():
    assert render.prose("one\x1b[2J\ntwo\x07\tend") == "one\\x1b[2J\n  two\\x07\\tend"


def test_a_protected_reason_of_several_lines_is_shown_as_lines_in_its_cell():
    shown = text_of(*render.policy_tables({"version": 1, "protected": [
        {"name": "DATA_ROOT", "value": "/mnt", "reason": "shared storage\nask #infra"}],
        "rules": [{"name": "LR", "max": 1, "description": "fits\nin memory"}]}))

    rows = shown.splitlines()
    assert "\\n" not in shown
    assert any("DATA_ROOT" in r and "shared storage" in r for r in rows)
    assert any("ask #infra" in r and "DATA_ROOT" not in r for r in rows)  # its own line
    assert any("in memory" in r and "fits" not in r for r in rows)
