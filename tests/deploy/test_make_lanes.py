"""make test runs the suite in two parts split by marker: every marker names a part."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def heavy_markers() -> set[str]:
    [line] = [line for line in (ROOT / "Makefile").read_text().splitlines()
              if line.startswith("HEAVY :=")]
    return set(re.findall(r"[a-z]+", line.split(":=", 1)[1])) - {"or"}


def test_every_registered_marker_sends_its_tests_to_the_one_at_a_time_part() -> None:
    # A marker left out of HEAVY would run its tests beside the unit tests, two at once,
    # and make check would run them too.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    registered = {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    assert heavy_markers() == registered


@pytest.mark.parametrize(("unit", "real", "code"), [(0, 0, 0), (1, 0, 1), (0, 1, 1), (2, 1, 2)])
def test_both_parts_run_and_either_failing_fails_the_target(tmp_path: Path, unit: int,
                                                           real: int, code: int) -> None:
    """The recipe's pytest lines, run by bash as make runs them, with a python that
    records its arguments and exits as told for each part."""
    recipe = (ROOT / "Makefile").read_text().split("\ntest: ")[1].split("\n\n")[0]
    lines = [line.removeprefix("\t") for line in recipe.splitlines()[1:]
             if "setup.sh" not in line]
    fake = tmp_path / "python"
    fake.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/calls
case "$*" in *"not ("*) exit {unit};; *) exit {real};; esac
""")
    fake.chmod(0o755)
    script = ("\n".join(lines).replace("$(PY)", str(fake))
              .replace("$(HEAVY)", " or ".join(sorted(heavy_markers()))).replace("$$", "$"))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert done.returncode == code, done.stderr
    assert len(calls) == 2 and calls[0].startswith("-m pytest -n 2 -m not (")
