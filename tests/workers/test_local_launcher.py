"""LocalLauncher runs real child processes: exact env, argv as typed, no shell."""

from __future__ import annotations

import gc
import json
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import pytest

from shared.config import Settings
from shared.policy import Resolved
from shared.workload import Workload
from workers.launchers.base import Hooks, Outcome
from workers.launchers.local import MINIMAL_PATH, LocalLauncher

# LocalLauncher._run_step never closes the step's stdout pipe (a source bug, pinned down by
# test_step_output_pipe_is_closed below).  The filter keeps that one leak from failing every
# other test here, so they still check what they are about; remove it once the bug is fixed.
pytestmark = pytest.mark.filterwarnings("ignore:unclosed file <_io.BufferedReader:ResourceWarning")

# Copies the environment block the kernel handed the process, byte for byte: unlike
# os.environ it is untouched by anything the interpreter sets for itself at start-up.
DUMP_ENV = ("import sys; data = open('/proc/self/environ', 'rb').read(); "
            "open(sys.argv[1], 'wb').write(data)")
WRITE_ARGV = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"
TRICKY_VALUES = {
    "SUBSHELL": "$(HOME)",
    "BACKTICKS": "`id`",
    "BRACES": "${PATH}",
    "SEMICOLON": "a;b",
    "NEWLINES": "line1\nline2\n",
    "QUOTES": "'single' \"double\" \\",
    "CHINESE": "数据/路径",
    "EMOJI": "🚀✨",
    "EMPTY": "",
    "EQUALS": "k=v=w",
}


class RecordingHooks:
    def __init__(self) -> None:
        self.started = 0
        self.lines: list[str] = []

    def hooks(self) -> Hooks:
        return Hooks(started=self._start, log=self.lines.append)

    def _start(self) -> None:
        self.started += 1

    @property
    def text(self) -> str:
        return "".join(self.lines)


def workload(steps: Sequence[Sequence[str]], env: dict[str, str], revision: int = 1,
             workdir: str | None = None) -> Workload:
    return Workload(
        task_id="task-local", revision=revision, name="train",
        steps=tuple(tuple(step) for step in steps),
        env=tuple(Resolved(n, v, "user") for n, v in env.items()),
        policy_version=0, workdir=workdir)


def read_env(path: Path) -> dict[str, str]:
    entries = [e for e in path.read_bytes().split(b"\0") if e]
    return dict(e.decode().split("=", 1) for e in entries)


def dump_step(path: Path) -> list[str]:
    return ["python3", "-c", DUMP_ENV, str(path)]


@pytest.fixture
def launcher(tmp_path: Path) -> LocalLauncher:
    return LocalLauncher(Settings(work_dir=str(tmp_path / "work")))


@pytest.fixture
def out(tmp_path: Path) -> Path:
    path = tmp_path / "out"
    path.mkdir()
    return path


def home_of(tmp_path: Path, revision: int = 1) -> str:
    return str(tmp_path / "work" / "task-local" / f"r{revision}")


def launch(launcher: LocalLauncher, job: Workload) -> tuple[Outcome, RecordingHooks]:
    recorder = RecordingHooks()
    return launcher.launch(job, recorder.hooks()), recorder


def test_every_step_sees_exactly_the_resolved_env_plus_path_and_home(
        launcher: LocalLauncher, out: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKENV_TEST_LEAK_MARKER", "must-not-leak")
    env = {"TASK_ID": "task-local", "LEARNING_RATE": "0.01", "DATA_DIR": "/data"}
    job = workload([dump_step(out / "step1"), dump_step(out / "step2")], env)
    outcome, _ = launch(launcher, job)
    assert outcome == Outcome("succeeded", exit_code=0)
    expected = {**env, "PATH": MINIMAL_PATH, "HOME": home_of(tmp_path)}
    for step in ("step1", "step2"):
        seen = read_env(out / step)
        assert seen == expected
        assert "TASKENV_TEST_LEAK_MARKER" not in seen


def test_values_arrive_byte_exact(launcher: LocalLauncher, out: Path) -> None:
    outcome, _ = launch(launcher, workload([dump_step(out / "env")], TRICKY_VALUES))
    assert outcome.state == "succeeded"
    raw = (out / "env").read_bytes()
    for name, value in TRICKY_VALUES.items():
        assert f"{name}={value}\0".encode() in raw, name
    seen = read_env(out / "env")
    assert {n: seen[n] for n in TRICKY_VALUES} == TRICKY_VALUES


def test_a_shell_script_reads_values_as_data(launcher: LocalLauncher, out: Path) -> None:
    script = out / "show.sh"
    script.write_text('printf "%s" "$TRICKY" > "$1"\n')
    value = "$(touch pwned) `touch pwned`; touch pwned\n数据 🚀"
    outcome, _ = launch(launcher, workload(
        [["/bin/sh", str(script), str(out / "value")]], {"TRICKY": value}))
    assert outcome.state == "succeeded"
    assert (out / "value").read_bytes() == value.encode()
    assert not list(out.rglob("pwned"))


def test_argv_is_passed_as_a_list_without_a_shell(launcher: LocalLauncher, out: Path) -> None:
    args = ["$(HOME)", "`id`", "a;b", "two words", "*", "line1\nline2", "数据"]
    outcome, _ = launch(launcher, workload(
        [["python3", "-c", WRITE_ARGV, str(out / "argv"), *args]], {}))
    assert outcome.state == "succeeded"
    assert json.loads((out / "argv").read_text()) == args


def test_resolved_path_and_home_win_over_the_minimal_ones(launcher: LocalLauncher,
                                                          out: Path) -> None:
    env = {"PATH": "/usr/bin:/bin:/opt/tools/bin", "HOME": "/home/trainer"}
    launch(launcher, workload([["/usr/bin/python3", "-c", DUMP_ENV, str(out / "env")]], env))
    assert read_env(out / "env") == env


def test_steps_run_in_the_revision_home_by_default(launcher: LocalLauncher, out: Path,
                                                   tmp_path: Path) -> None:
    launch(launcher, workload([["python3", "-c", "import os,sys; "
                                "open(sys.argv[1], 'w').write(os.getcwd())",
                                str(out / "cwd")]], {}, revision=3))
    assert (out / "cwd").read_text() == home_of(tmp_path, revision=3)


def test_steps_run_in_the_workdir_when_one_is_given(launcher: LocalLauncher, out: Path) -> None:
    launch(launcher, workload([["python3", "-c", "import os,sys; "
                                "open(sys.argv[1], 'w').write(os.getcwd())",
                                str(out / "cwd")]], {}, workdir=str(out)))
    assert (out / "cwd").read_text() == str(out)


def test_a_failing_step_stops_the_later_ones(launcher: LocalLauncher, out: Path) -> None:
    marker = out / "second-step-ran"
    job = workload([["python3", "-c", "import sys; sys.exit(3)"],
                    ["python3", "-c", f"open({str(marker)!r}, 'w')"]], {})
    outcome, _ = launch(launcher, job)
    assert outcome.state == "failed"
    assert outcome.exit_code == 3
    assert "step 1" in outcome.reason and "3" in outcome.reason
    assert not marker.exists()


def test_a_later_step_failure_names_that_step(launcher: LocalLauncher) -> None:
    outcome, _ = launch(launcher, workload([["true"], ["false"]], {}))
    assert (outcome.state, outcome.exit_code) == ("failed", 1)
    assert "step 2" in outcome.reason


def test_a_missing_executable_fails_with_a_reason(launcher: LocalLauncher) -> None:
    outcome, _ = launch(launcher, workload([["/no/such/program", "--flag"]], {}))
    assert outcome.state == "failed"
    assert outcome.exit_code is None
    assert "step 1" in outcome.reason and "No such file" in outcome.reason


def test_output_goes_to_the_log_hook(launcher: LocalLauncher) -> None:
    code = "import sys; print('hello 数据'); print('oops', file=sys.stderr)"
    outcome, recorder = launch(launcher, workload([["python3", "-c", code], ["true"]], {}))
    assert outcome.state == "succeeded"
    assert recorder.started == 1
    assert "==> step 1/2: python3\n" in recorder.lines
    assert "==> step 2/2: true\n" in recorder.lines
    assert "hello 数据\n" in recorder.lines and "oops\n" in recorder.lines


def test_a_step_over_the_timeout_is_killed(tmp_path: Path) -> None:
    launcher = LocalLauncher(Settings(work_dir=str(tmp_path), step_timeout_seconds=1))
    started = time.monotonic()
    outcome, _ = launch(launcher, workload([["sleep", "30"]], {}))
    assert time.monotonic() - started < 15
    assert outcome.state == "failed" and "1s" in outcome.reason


def test_observe_has_nothing_to_add(launcher: LocalLauncher) -> None:
    assert launcher.observe(workload([["true"]], {})) is None


def test_step_output_pipe_is_closed(launcher: LocalLauncher) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        launch(launcher, workload([["true"], ["true"]], {}))
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []
