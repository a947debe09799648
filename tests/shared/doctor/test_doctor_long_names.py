"""The doctor's search for a near-miss is bounded by the name's length limit: a name at the
limit is compared (with a bounded edit distance), a longer one is no one's variable and is
compared with nothing, whoever wrote it (an env, a policy, a script)."""

from __future__ import annotations

from shared.doctor import advice
from shared.doctor.catalog import Entry, layered
from shared.doctor.preflight import preflight
from shared.env.envlist import MAX_NAME_LENGTH

AT_LIMIT = "NCCL_" + "X" * (MAX_NAME_LENGTH - 5)
PAST_LIMIT = "NCCL_" + "X" * (MAX_NAME_LENGTH - 4)


def _typo(name: str) -> str:
    """``name`` with its last two characters swapped: one edit away."""
    return name[:-2] + "YX"


def test_a_near_miss_at_the_limit_is_found() -> None:
    documented = AT_LIMIT[:-2] + "XY"
    assert len(documented) == MAX_NAME_LENGTH
    assert advice.likely(_typo(documented), [documented]) == [documented]
    catalog = layered([Entry(documented)])
    (problem,) = advice.near_misses([_typo(documented)], catalog)
    assert f"did you mean {documented}" in problem.message


def test_a_name_past_the_limit_gets_no_guess_however_close() -> None:
    documented = PAST_LIMIT[:-2] + "XY"
    assert advice.likely(_typo(documented), [documented]) == []
    assert advice.likely(_typo(documented), [documented], same_family=False,
                         abbreviations=True) == []


def test_a_known_name_past_the_limit_is_never_a_guess() -> None:
    long_known = "A" * (MAX_NAME_LENGTH + 1)
    assert advice.likely("A" * (MAX_NAME_LENGTH - 1), [long_known, "AAAB"],
                         same_family=False) == []


def test_a_script_reading_a_name_past_the_limit_gets_no_guess() -> None:
    """The static reader takes any name a script writes; the one the task sets that it is
    close to is not looked for past the limit."""
    set_name = "X" * MAX_NAME_LENGTH
    read_name = "X" * (MAX_NAME_LENGTH + 1)
    script = f"import os\nos.environ['{read_name}']\n"
    report = preflight([{"path": "t.py", "content": script}],
                       [{"name": set_name, "value": "1", "source": "user", "scope": None}],
                       layered([]))
    (missing,) = report.missing
    assert missing["name"] == read_name and missing["suggestions"] == []


def test_the_distance_is_bounded_and_agrees_with_the_documented_cases() -> None:
    assert advice.distance("DEBUG", "DEBGU", limit=3) == 1
    assert advice.distance("A" * 5000, "B" * 5000, limit=2) == 3
    assert advice.distance("X" * MAX_NAME_LENGTH, "X" * (MAX_NAME_LENGTH - 1) + "Y",
                           limit=2) == 1
