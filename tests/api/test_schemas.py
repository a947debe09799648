"""The env list's shape, checked the quick way and the schema's way alike."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.schemas import EnvEntry, EnvList

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))
_ENTRIES = st.one_of(
    st.fixed_dictionaries({"name": st.text(max_size=8), "value": st.text(max_size=8)},
                          optional={"secret": st.one_of(st.booleans(), _SCALARS)}),
    st.dictionaries(st.sampled_from(["name", "value", "secret", "extra"]), _SCALARS,
                    max_size=4),
    _SCALARS,
)


class Quick(ma.Schema):
    env = EnvList(load_default=list)


class Nested(ma.Schema):
    env = ma.fields.List(ma.fields.Nested(EnvEntry), load_default=list)


def loaded(schema: ma.Schema, body: dict[str, Any]) -> Any:
    try:
        return schema.load(body)
    except ma.ValidationError as exc:
        return ("refused", exc.messages)


@given(env=st.one_of(st.lists(_ENTRIES, max_size=6), _SCALARS))
def test_an_env_list_loads_as_the_nested_schema_loads_it(env: Any) -> None:
    """Accepted alike (the same entries, with ``secret`` false where it was left out) and
    refused alike (the same messages, entry by entry)."""
    assert loaded(Quick(), {"env": env}) == loaded(Nested(), {"env": env})


def test_a_plain_list_is_taken_without_a_schema_per_entry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EnvEntry, "_do_load", lambda *a, **k: pytest.fail("a nested load"))
    body = {"env": [{"name": "LR", "value": "0.1"}, {"name": "KEY", "value": "s", "secret": True}]}
    assert Quick().load(body) == {"env": [{"name": "LR", "value": "0.1", "secret": False},
                                          {"name": "KEY", "value": "s", "secret": True}]}
