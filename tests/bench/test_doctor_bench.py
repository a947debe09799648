"""The doctor's benchmark measures what it says: a 2,000-line script set, with findings."""

from __future__ import annotations

import pytest

from bench import doctor


def test_the_script_set_is_two_thousand_lines_of_python_and_shell() -> None:
    files = doctor.script_set()
    assert sum(f["content"].count("\n") for f in files) == doctor.TARGET_LINES
    assert {f["path"].rsplit(".", 1)[1] for f in files} == {"py", "sh"}


@pytest.mark.slow
def test_the_phase_reports_both_ratios() -> None:
    result = doctor.phase(quick=True)
    assert result["script_lines"] == doctor.TARGET_LINES
    assert result["findings"]["missing"] > 0 and result["findings"]["unknowable"] == 1
    assert 1 < result["ratio_warm"] < result["ratio_cold"]
    assert len(doctor.lines(result)) == 4
