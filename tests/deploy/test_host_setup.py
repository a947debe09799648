"""The README's two commands are the whole set-up: ``make run`` and ``make test`` each
run ``deploy/host/setup.sh``, which installs what is missing and nothing else.

The script runs for real, with Debian's package tools replaced on the PATH by fakes that
say which packages are "installed" and record what ``apt-get`` was asked, so a test can
take a machine apart without touching this one's packages.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "deploy" / "host" / "setup.sh"


def fake_tools(tmp_path: Path, installed: set[str]) -> dict[str, str]:
    """A PATH whose ``dpkg-query`` knows only ``installed`` and whose ``apt-get``
    records its arguments in ``apt.log``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    known = " ".join(sorted(installed))
    (bin_dir / "dpkg-query").write_text(
        "#!/bin/sh\npkg=\"$4\"\nfor k in " + known + "; do\n"
        "  [ \"$k\" = \"$pkg\" ] && { echo 'install ok installed'; exit 0; }\ndone\nexit 1\n")
    (bin_dir / "apt-get").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/apt.log\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def packages_of(what: str) -> list[str]:
    """The packages the script checks for ``what``, read from the script itself."""
    run, test = re.findall(r"^\s*packages=\(([^)]*)\)", SETUP.read_text(), re.M)
    return (run if what == "run" else test).split()


def test_run_installs_only_what_is_missing(tmp_path: Path) -> None:
    env = fake_tools(tmp_path, installed=set())
    done = subprocess.run([str(SETUP), "run"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "apt.log").read_text().splitlines()
    assert calls == ["update -q", "install -y -q bubblewrap"]
    assert "installing bubblewrap" in done.stdout


def test_nothing_is_installed_when_everything_is_there(tmp_path: Path) -> None:
    env = fake_tools(tmp_path, installed=set(packages_of("run")))
    done = subprocess.run([str(SETUP), "run"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not (tmp_path / "apt.log").exists()


def test_the_suite_asks_for_every_engine_it_runs(tmp_path: Path) -> None:
    """``make test``'s list names each engine the suite runs for real; with all but one
    present, only that one is installed."""
    wanted = packages_of("test")
    for engine in ("redis-server", "podman", "runc", "bubblewrap", "slurm-wlm", "munge",
                   "chromium", "stress-ng"):
        assert engine in wanted
    env = fake_tools(tmp_path, installed=set(wanted) - {"munge"})
    # The real kubectl, podman and python3 answer the rest.
    done = subprocess.run([str(SETUP), "test"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "apt.log").read_text().splitlines() == ["update -q",
                                                              "install -y -q munge"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_not_root_it_prints_the_sudo_command_and_stops() -> None:
    # The fakes where another user can run them (pytest's own directories are root's).
    with tempfile.TemporaryDirectory() as shared:
        Path(shared).chmod(0o755)
        _not_root(Path(shared))


def _not_root(tmp_path: Path) -> None:
    env = fake_tools(tmp_path, installed=set())
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           str(SETUP), "run"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert f"sudo {ROOT}/deploy/host/setup.sh run" in done.stderr
    assert not (tmp_path / "apt.log").exists()


def test_make_run_and_make_test_run_it_and_ci_adds_nothing() -> None:
    """Both targets' recipes call the script; ``.ci/run`` installs nothing of its own and
    runs the README's test command."""
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "test"):
        recipe = makefile.split(f"\n{target}: ")[1].split("\n\n")[0]
        assert f"deploy/host/setup.sh {target}" in recipe
    ci = (ROOT / ".ci" / "run").read_text()
    assert "apt-get" not in ci and "pip install" not in ci
    assert re.search(r"^make test$", ci, re.M)
    readme = (ROOT / "README.md").read_text()
    assert "make test    #" in readme and "make run     #" in readme
