"""Reading .env files without evaluating them, and exporting values that read back intact."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from dotenv import dotenv_values
from hypothesis import given
from hypothesis import strategies as st

from cli import envfile
from cli.errors import EnvRejected, UsageProblem
from tests.support.dotenv_values import EXPORTED_VALUES, LEFT_OUT, sourced
from tests.support.dotenv_values import HOSTILE_VALUES as HOSTILE


def as_variables(values: dict[str, str]) -> list[dict[str, object]]:
    return [{"name": k, "value": v, "source": "user"} for k, v in values.items()]


def test_exported_hostile_values_parse_back_identically_from_a_stream(tmp_path: Path):
    text = envfile.export(as_variables(HOSTILE), "task t1 revision 1")

    assert dotenv_values(stream=io.StringIO(text), interpolate=False) == EXPORTED_VALUES
    assert sourced(text, tmp_path) == EXPORTED_VALUES  # and a shell sets the same
    for name in LEFT_OUT:
        assert f"# {name!r} is not exported: its value holds" in text


def test_exported_hostile_values_parse_back_identically_from_a_file(tmp_path: Path):
    path = tmp_path / "task.env"
    path.write_text(envfile.export(as_variables(HOSTILE), "t"), encoding="utf-8")

    assert dotenv_values(path, interpolate=False) == EXPORTED_VALUES
    assert envfile.load(path) == EXPORTED_VALUES  # and our own reader agrees


@given(st.dictionaries(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    max_size=8))
def test_any_value_round_trips(values: dict[str, str]):
    text = envfile.export(as_variables(values), "t")

    exportable = {k: v for k, v in values.items() if not any(c in v for c in "'\\\r")}
    assert dotenv_values(stream=io.StringIO(text), interpolate=False) == exportable


def test_secrets_are_left_out_with_a_comment_naming_them():
    text = envfile.export([{"name": "HF_TOKEN", "value": "********", "secret": True},
                           {"name": "LR", "value": "0.01"}], "t")

    assert "# 'HF_TOKEN' is not exported: it is secret" in text
    assert "********" not in text
    assert dotenv_values(stream=io.StringIO(text), interpolate=False) == {"LR": "0.01"}


def test_a_name_a_shell_cannot_assign_is_named_not_written():
    text = envfile.export([{"name": "has space#x", "value": "v"}], "t")

    assert dotenv_values(stream=io.StringIO(text), interpolate=False) == {}
    assert "# 'has space#x' is not exported: a shell cannot assign this name" in text


def test_reading_never_expands_or_runs_anything():
    text = 'A=$HOME\nB="${HOME}"\nC=$(id)\nexport D=`id`\nE=\'single $x\'\n'

    assert envfile.parse(text, ".env") == {"A": "$HOME", "B": "${HOME}", "C": "$(id)",
                                           "D": "`id`", "E": "single $x"}


def test_a_name_set_twice_is_an_error_naming_it_and_its_lines():
    with pytest.raises(EnvRejected, match=r"line 3: LR is set twice \(first on line 1\)"):
        envfile.parse("LR=1\nX=2\nLR=3\n", ".env")


def test_an_unparseable_line_is_an_error_with_its_line_number():
    with pytest.raises(EnvRejected, match=r"\.env, line 3 of the \.env text is not KEY=value"):
        envfile.parse("A=1\n\nthis is not a statement\n", ".env")


def test_a_name_without_value_is_an_error_naming_it():
    with pytest.raises(EnvRejected, match="line 2: BARE has no '=' and value"):
        envfile.parse("A=1\nBARE\n", ".env")


def test_an_unreadable_file_is_a_usage_problem(tmp_path: Path):
    path = tmp_path / "latin1.env"
    path.write_bytes(b"A=\xe9\n")

    with pytest.raises(UsageProblem, match="cannot read"):
        envfile.load(path)
