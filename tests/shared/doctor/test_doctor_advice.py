"""Advice on an env: near-miss names and values outside their documented ones."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.doctor import advice
from shared.doctor.catalog import Entry, applying, layered
from shared.env.envlist import EnvVar

CATALOG = applying(True, [], [])


def warned(*variables: EnvVar) -> dict[str, str]:
    return {p.variable or "": p.message for p in advice.advise(list(variables), CATALOG)}


@pytest.mark.parametrize(("typed", "meant"), [
    ("NCCL_DEBGU", "NCCL_DEBUG"),  # a transposition
    ("NCCL_DEBU", "NCCL_DEBUG"),
    ("NCCL_SOCKET_IFNAM", "NCCL_SOCKET_IFNAME"),
    ("CUDA_LAUNCH_BLOCKIN", "CUDA_LAUNCH_BLOCKING"),
    ("OMP_NUM_THREAD", "OMP_NUM_THREADS"),
    ("HF_HUB_OFLINE", "HF_HUB_OFFLINE"),
    ("WANDB_PROJCET", "WANDB_PROJECT"),
    ("nccl_debug", "NCCL_DEBUG"),  # only the case differs
    ("PYTORCH_CUDA_ALLOC_CONFIG", "PYTORCH_CUDA_ALLOC_CONF"),
])
def test_a_near_miss_names_the_likely_name(typed: str, meant: str) -> None:
    message = warned(EnvVar(typed, "1"))[typed]
    assert f"did you mean {meant}" in message


@pytest.mark.parametrize("name", ["LR", "NCCL_SOMETHING_ELSE_ENTIRELY", "MY_NCCL_DEBUG",
                                  "WANDB", "DATA_DIR"])
def test_names_far_from_any_documented_one_get_nothing(name: str) -> None:
    assert warned(EnvVar(name, "1")) == {}


def test_same_family_only() -> None:
    """CUDA_DEBUG is not NCCL_DEBUG's typo: another library's prefix."""
    assert advice.likely("CUDA_DEBUG", ["NCCL_DEBUG"]) == []


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("NCCL_DEBUG", "verbose", "not one of the documented values VERSION, WARN, INFO, TRACE"),
    ("CUDA_LAUNCH_BLOCKING", "yes", "0, 1"),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segment:True",
     "'expandable_segment' is not a documented option (did you mean 'expandable_segments'?)"),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments", "not of the form option:value"),
    ("HF_HUB_OFFLINE", "enabled", "is read as false"),
    ("MKL_NUM_THREADS", "0", "below the documented minimum 1"),
    ("MKL_NUM_THREADS", "four", "not a whole number"),
    ("XLA_PYTHON_CLIENT_MEM_FRACTION", "75", "above the documented maximum 1"),
    ("OMP_PROC_BIND", "close,nearby", "has nearby, not among"),
    ("TRANSFORMERS_VERBOSITY", "verbose", "debug, info, warning, error, critical, fatal"),
])
def test_a_value_outside_the_documented_ones_is_named(name: str, value: str,
                                                      expected: str) -> None:
    message = warned(EnvVar(name, value))[name]
    assert expected in message and "https://" in message


@pytest.mark.parametrize(("name", "value", "start"), [
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segment:True",
     "PYTORCH_CUDA_ALLOC_CONF: 'expandable_segment' is not a documented option (did you mean "
     "'expandable_segments'?); documented options: backend, max_split_size_mb,"),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments,max_split_size_mb:128,roundup:4",
     "PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments' is not of the form option:value; "
     "'roundup' is not a documented option"),
    ("NCCL_DEBUG", "verbose", "NCCL_DEBUG: the value 'verbose' is not one of the documented"),
    ("OMP_PROC_BIND", "close,nearby", "OMP_PROC_BIND: the value 'close,nearby' has nearby, "
                                      "not among the documented values"),
    ("MKL_NUM_THREADS", "0", "MKL_NUM_THREADS: the value '0' is below the documented minimum 1"),
    ("HF_HUB_OFFLINE", "enabled", "HF_HUB_OFFLINE: the value 'enabled' is read as false"),
])
def test_a_value_warning_reads_as_one_sentence_about_what_is_wrong(name: str, value: str,
                                                                    start: str) -> None:
    """Each clause has its own subject: never "the value X has Y is not ..."."""
    message = warned(EnvVar(name, value))[name]
    assert message.startswith(start), message
    assert " has '" not in message


@pytest.mark.parametrize(("name", "value"), [
    ("NCCL_DEBUG", "INFO"), ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
    ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128,garbage_collection_threshold:0.6"),
    ("HF_HUB_OFFLINE", "1"), ("HF_HUB_OFFLINE", "yes"), ("OMP_PROC_BIND", "spread,close"),
    ("OMP_WAIT_POLICY", "passive"), ("XLA_PYTHON_CLIENT_MEM_FRACTION", ".5"),
    ("WANDB_MODE", "offline"), ("NCCL_SOCKET_IFNAME", "^docker,lo"),
])
def test_documented_values_pass(name: str, value: str) -> None:
    assert warned(EnvVar(name, value)) == {}


def test_a_secret_value_is_never_looked_at() -> None:
    catalog = layered([Entry("API_MODE", values=("a", "b"), type="enum")])
    assert advice.value_warnings([EnvVar("API_MODE", "not-listed-secret", True)],
                                 catalog) == []
    # The name is still advised on: a name is not a secret.
    assert advice.near_misses(["API_MODEE"], catalog)[0].variable == "API_MODEE"


def test_each_name_is_advised_once() -> None:
    found = advice.advise([EnvVar("NCCL_DEBGU", "1"), EnvVar("NCCL_DEBGU", "2")], CATALOG)
    assert len(found) == 1


def test_abbreviations_only_where_asked() -> None:
    assert advice.likely("LEARNING_RATE", ["LR"], same_family=False) == []
    assert advice.likely("LEARNING_RATE", ["LR"], same_family=False,
                         abbreviations=True) == ["LR"]
    assert advice.likely("LR", ["LEARNING_RATE"], same_family=False,
                         abbreviations=True) == ["LEARNING_RATE"]


@pytest.mark.parametrize(("a", "b", "edits"), [
    ("DEBUG", "DEBGU", 1), ("abc", "abc", 0), ("kitten", "sitting", 3), ("", "abc", 3),
])
def test_distance(a: str, b: str, edits: int) -> None:
    assert advice.distance(a, b, limit=5) == edits


_NAMES = st.from_regex(r"_?[A-Za-z]{1,5}(_[A-Za-z]{0,5}){0,2}", fullmatch=True)


@given(name=_NAMES, documented=st.lists(_NAMES, max_size=30))
def test_a_catalog_guesses_from_a_names_family_what_a_pass_over_all_of_it_would(
        name: str, documented: list[str]) -> None:
    """``Catalog.kin`` only narrows where the guesses come from: the same guesses as
    comparing the name with every documented one, for names of one word, of a family,
    of another case, with leading or trailing underscores."""
    catalog = layered([Entry(n) for n in documented] + [Entry(name.upper())])
    assert set(catalog.kin(name)) == {n for n in catalog.names()
                                      if advice.of_one_family(name, n)}
    assert advice.likely(name, catalog.kin(name)) == advice.likely(name, catalog.names())
