"""``make help``: every target with a ``## description``, each description starting at
the same column, however long the longest target's name is."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESCRIBED = re.compile(r"^([a-z0-9-]+):.*## (.*)$", re.MULTILINE)


def make_help(makefile: Path) -> list[str]:
    done = subprocess.run(["make", "--no-print-directory", "-f", str(makefile), "help"],
                          cwd=makefile.parent, capture_output=True, text=True, timeout=60,
                          check=True)
    return done.stdout.splitlines()


def columns(lines: list[str], described: dict[str, str]) -> set[int]:
    """The column each line's description starts at."""
    starts = set()
    for line, (name, text) in zip(lines, described.items(), strict=True):
        assert line.lstrip().startswith(name + " "), line
        assert line.endswith(text), line
        starts.add(line.index(text))
    return starts


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_every_description_starts_at_the_same_column() -> None:
    described = dict(DESCRIBED.findall((ROOT / "Makefile").read_text()))
    assert max(map(len, described)) > 12  # pytorch-image, compose-image: the old width
    assert len(columns(make_help(ROOT / "Makefile"), described)) == 1


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_longer_target_name_moves_every_description_along(tmp_path: Path) -> None:
    makefile = tmp_path / "Makefile"
    shutil.copy(ROOT / "Makefile", makefile)
    with makefile.open("a") as f:
        f.write("a-target-with-a-very-long-name-indeed: ## What it does\n\ttrue\n")
    described = dict(DESCRIBED.findall(makefile.read_text()))
    [start] = columns(make_help(makefile), described)
    assert start == 2 + len("a-target-with-a-very-long-name-indeed") + 2
