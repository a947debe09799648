"""The .env parser and exporter: values are never evaluated and round-trip exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.env import envfile

HOSTILE = {
    "QUOTES": "it's \"quoted\" \\'",
    "DOLLAR": "$HOME ${PATH} $(id) `id`",
    "EQUALS": "a=b=c",
    "NEWLINES": "line one\nline two\r\n",
    "HASH": "value # not a comment",
    "NON_ASCII": "数据集/训练 — ünïcode ✓",
    "EMPTY": "",
}


def test_hostile_values_round_trip() -> None:
    entries = [{"name": k, "value": v} for k, v in HOSTILE.items()]
    parsed, problems = envfile.parse(envfile.export(entries))
    assert problems == []
    assert {e["name"]: e["value"] for e in parsed} == HOSTILE


@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True),
                       st.text(st.characters(exclude_characters="\x00",
                                             exclude_categories=("Cs",)), max_size=60),
                       max_size=8))
def test_any_values_round_trip(values: dict[str, str]) -> None:
    text = envfile.export([{"name": k, "value": v} for k, v in values.items()])
    parsed, problems = envfile.parse(text)
    assert problems == []
    assert {e["name"]: e["value"] for e in parsed} == values


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
    assert "# 'TOKEN' is secret" in text
    assert envfile.parse(text)[0] == [{"name": "LR", "value": "0.1", "secret": False}]


def test_kubernetes_style_names_round_trip_quoted() -> None:
    entries = [{"name": "my var#1", "value": "v"}, {"name": "exported", "value": "w"}]
    parsed, problems = envfile.parse(envfile.export(entries))
    assert problems == []
    assert [(e["name"], e["value"]) for e in parsed] == [("my var#1", "v"), ("exported", "w")]
