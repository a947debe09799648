"""The .env parser and exporter: values are never evaluated and round-trip exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.env import envfile
from tests.support.dotenv_values import EXPORTED_VALUES, RUNS_IF_SOURCED, sourced

HOSTILE = {
    "QUOTES": "it's \"quoted\" \\'",
    "DOLLAR": "$HOME ${PATH} $(id) `id`",
    "EQUALS": "a=b=c",
    "NEWLINES": "line one\nline two\r\n",
    "HASH": "value # not a comment",
    "NON_ASCII": "数据集/训练 — ünïcode ✓",
    "EMPTY": "",
}


def test_hostile_values_round_trip_or_are_named_as_left_out() -> None:
    entries = [{"name": k, "value": v} for k, v in HOSTILE.items()]
    text = envfile.export(entries)
    parsed, problems = envfile.parse(text)
    assert problems == []
    assert {e["name"]: e["value"] for e in parsed} == {
        k: v for k, v in HOSTILE.items() if k not in {"QUOTES", "NEWLINES"}}
    assert "# 'QUOTES' is not exported: its value holds a single quote and a backslash" in text
    assert "# 'NEWLINES' is not exported: its value holds a carriage return" in text


# Names bash sets or owns itself when it sources a file: what it makes of them is its own.
BASH_OWNED = {"_", "PWD", "OLDPWD", "SHLVL", "UID", "EUID", "PPID", "BASHPID", "RANDOM",
              "SRANDOM", "SECONDS", "LINENO", "GROUPS", "HOSTNAME", "HOSTTYPE", "OSTYPE",
              "MACHTYPE", "IFS", "OPTIND", "OPTERR", "PS4", "SHELLOPTS", "BASHOPTS"}
names_st = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True).filter(
    lambda name: name not in BASH_OWNED and not name.startswith(("BASH", "FUNCNAME", "EPOCH",
                                                                 "COMP_", "HIST")))
values_st = st.dictionaries(names_st,
                            st.text(st.characters(exclude_characters="\x00",
                                                  exclude_categories=("Cs",)), max_size=60),
                            max_size=8)


@given(values_st)
def test_any_value_round_trips_exactly_or_is_named_in_a_comment(values: dict[str, str]) -> None:
    text = envfile.export([{"name": k, "value": v} for k, v in values.items()])
    parsed, problems = envfile.parse(text)
    assert problems == []
    back = {e["name"]: e["value"] for e in parsed}
    for name, value in values.items():
        if any(c in value for c in "'\\\r"):
            assert name not in back and f"# {name!r} is not exported: " in text
        else:
            assert back[name] == value


# 25 exports, or fewer when the active profile asks for fewer (make check)
@settings(max_examples=min(25, settings.default.max_examples), deadline=None)
@given(values_st)
def test_sourcing_any_export_sets_what_python_dotenv_reads_and_nothing_else(
        tmp_path_factory: pytest.TempPathFactory, values: dict[str, str]) -> None:
    text = envfile.export([{"name": k, "value": v} for k, v in values.items()])
    read = {e["name"]: e["value"] for e in envfile.parse(text)[0]}
    assert sourced(text, tmp_path_factory.mktemp("src")) == read


def test_sourcing_the_export_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    values = {**EXPORTED_VALUES, "RUN": RUNS_IF_SOURCED.format(marker=marker)}
    text = envfile.export([{"name": k, "value": v} for k, v in values.items()]
                          + [{"name": "x;touch " + str(marker), "value": "v"}])
    assert sourced(text, tmp_path) == values
    assert not marker.exists()


def test_dotenv_forms_are_read_as_written_and_never_expanded() -> None:
    text = ("# a comment\n"
            "export LR=0.01\n"
            "DATA=\"/data/${USER}\"\n"
            "CMD=$(rm -rf /)\n"
            "KEY='-----BEGIN KEY-----\nabc\n-----END KEY-----'\n")
    parsed, problems = envfile.parse(text)
    assert problems == []
    assert {e["name"]: e["value"] for e in parsed} == {
        "LR": "0.01", "DATA": "/data/${USER}", "CMD": "$(rm -rf /)",
        "KEY": "-----BEGIN KEY-----\nabc\n-----END KEY-----"}


def test_bad_lines_and_duplicates_are_each_named() -> None:
    parsed, problems = envfile.parse("A=1\nB='open\nA=2\n")
    rules = sorted((p.rule, p.variable) for p in problems)
    assert ("env_file.syntax", None) in rules
    assert [e["name"] for e in parsed] == ["A"]


def test_a_name_in_both_env_and_env_file_is_refused() -> None:
    problems = envfile.combine([{"name": "LR", "value": "1"}], [{"name": "LR", "value": "2"}])
    assert [(p.rule, p.variable) for p in problems] == [("env_file.conflict", "LR")]


def test_secrets_are_named_but_never_exported() -> None:
    text = envfile.export([{"name": "TOKEN", "value": "hunter2-hunter2", "secret": True},
                           {"name": "LR", "value": "0.1"}])
    assert "hunter2" not in text
    assert "# 'TOKEN' is not exported: it is secret" in text
    assert envfile.parse(text)[0] == [{"name": "LR", "value": "0.1", "secret": False}]


def test_names_a_shell_cannot_assign_are_named_not_written() -> None:
    entries = [{"name": "my var#1", "value": "v"}, {"name": "exported", "value": "w"},
               {"name": "a\nINJECTED", "value": "x"}]
    text = envfile.export(entries)
    parsed, problems = envfile.parse(text)
    assert problems == []
    assert [(e["name"], e["value"]) for e in parsed] == [("exported", "w")]
    assert "# 'my var#1' is not exported: a shell cannot assign this name" in text
    assert "# 'a\\nINJECTED' is not exported" in text
