"""The Slurm launcher's set-up, checked at start: ``make run`` refuses in seconds, naming
what is missing (client commands, SLURM_CONF, munge, the controller, the shared directory)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.config import Settings
from tests.support.slurm import SlurmCluster
from workers.launchers.registry import setup_problems as backend_setup_problems
from workers.launchers.slurm.setup import setup_problems

ROOT = Path(__file__).resolve().parents[4]


def test_missing_client_commands_are_named(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    [problem] = setup_problems(Settings(slurm_dir=str(tmp_path / "slurm")))
    assert "sbatch, squeue, scancel, scontrol" in problem and "slurm-client" in problem


@pytest.mark.slurm
def test_the_test_clusters_set_up_has_no_problem(slurm_cluster: SlurmCluster, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    settings = Settings(launcher="slurm", slurm_dir=str(tmp_path / "shared"))
    assert setup_problems(settings) == []
    assert backend_setup_problems(settings) == []  # what make run and the workers ask


@pytest.mark.slurm
def test_each_missing_piece_is_named(slurm_cluster: SlurmCluster, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    unwritable = tmp_path / "a-file"
    unwritable.write_text("")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "nowhere.conf"))
    problems = setup_problems(Settings(slurm_dir=str(unwritable)))
    assert any("SLURM_CONF" in p and "nowhere.conf" in p for p in problems), problems
    assert any("munge does not answer" in p for p in problems), problems  # default socket
    assert any(p.startswith(f"TASKENV_SLURM_DIR {unwritable}") for p in problems), problems
    conf = tmp_path / "no-controller.conf"  # munge answers, no controller listens
    text = Path(slurm_cluster.env["SLURM_CONF"]).read_text()
    port = next(line for line in text.splitlines() if line.startswith("SlurmctldPort="))
    conf.write_text(text.replace(port, "SlurmctldPort=9"))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    started = time.monotonic()
    [problem] = setup_problems(Settings(slurm_dir=str(tmp_path / "shared")))
    assert "controller" in problem and time.monotonic() - started < 15, problem


@pytest.mark.slurm
@pytest.mark.integration
def test_make_run_refuses_in_seconds_naming_what_is_missing(tmp_path: Path) -> None:
    env = {**os.environ, "TASKENV_LAUNCHER": "slurm",
           "SLURM_CONF": str(tmp_path / "missing.conf"),
           "TASKENV_SLURM_DIR": str(tmp_path / "shared")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "workers.localstack"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    took = time.monotonic() - started
    assert done.returncode == 2, (done.stdout, done.stderr)
    said = done.stdout + done.stderr
    assert f"SLURM_CONF {tmp_path / 'missing.conf'} cannot be read" in said, said
    assert took < 15, took
