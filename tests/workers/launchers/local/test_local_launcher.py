"""LocalLauncher with real bwrap sandboxes, a real runner process and a real redis-server.

The steps' behaviour (exact env, argv as typed, no shell, isolation, timeouts) is
checked through :class:`Runner` in this process, reading what the steps print;
the launch itself (returns at once, the runner records the end, a redelivered
launch adopts the runner) through ``stages.launch`` on a real Redis.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.config import Settings
from shared.env.envlist import Limits
from shared.env.identity import Group, replica_env
from shared.errors import LaunchFailed
from shared.policy.model import Resolved
from shared.policy.store import PolicyStore
from shared.redis_conn import connect
from shared.secrets import REDACTED, Cipher, new_key
from shared.store.tasks import TaskStore
from shared.task import records, states
from shared.task.workload import Workload
from workers import outcomes, stages
from workers.launchers.base import Hooks, Outcome
from workers.launchers.common.run_dir import prepare_home
from workers.launchers.common.sandbox import TASK_HOME
from workers.launchers.local import launcher as local
from workers.launchers.local.launcher import (
    MINIMAL_PATH,
    UNSAFE,
    LocalLauncher,
    SandboxUnavailable,
    runner_alive,
    runner_spec,
)
from workers.launchers.local.runner import Runner
from workers.localstack import RedisServer
from workers.reconcile import reconcile_once

# The environment block the kernel handed the process, byte for byte: unlike os.environ
# it is untouched by anything the interpreter sets for itself at start-up.
PRINT_ENV = ("import json; raw = open('/proc/self/environ', 'rb').read().split(b'\\0'); "
             "print('ENV=' + json.dumps(dict(e.decode().split('=', 1) for e in raw if e)))")
PRINT_ARGV = "import json, sys; print('ARGV=' + json.dumps(sys.argv[1:]))"
PRINT_CWD = "import os; print('CWD=' + os.getcwd())"
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
KEY = new_key()

pytestmark = pytest.mark.sandbox  # real bwrap sandboxes and runner processes

# The identity of a task of one replica: a world of one (docs/distributed.md).
ONE = dict(replica_env(Group(), 0))


def workload(steps: Sequence[Sequence[str]], env: dict[str, str] | None = None,
             revision: int = 1, workdir: str | None = None,
             task_id: str = "task-local") -> Workload:
    return Workload(
        task_id=task_id, revision=revision, name="train",
        steps=tuple(tuple(step) for step in steps),
        env=tuple(Resolved(n, v, "user") for n, v in (env or {}).items()),
        policy_version=0, workdir=workdir)


def python(code: str, *args: str) -> list[str]:
    return ["python3", "-c", code, *args]


def run(launcher: LocalLauncher, job: Workload) -> tuple[Outcome, str]:
    """The job's steps as its runner runs them, with the log collected here."""
    home = prepare_home(launcher.run_dir(job), job.workdir)
    runner = Runner(runner_spec(launcher.settings, job, home, launcher.bwrap))
    lines: list[str] = []
    return runner.run(lines.append), "".join(lines)


def printed(text: str, tag: str) -> Any:
    return [json.loads(line[len(tag) + 1:]) for line in text.splitlines()
            if line.startswith(tag + "=")]


@pytest.fixture
def launcher(tmp_path: Path) -> LocalLauncher:
    return LocalLauncher(Settings(work_dir=str(tmp_path / "work")))


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


# --- the steps, in the sandbox ---------------------------------------------------------------

def test_every_step_sees_exactly_the_resolved_env_plus_path_and_home(
        launcher: LocalLauncher, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKENV_TEST_LEAK_MARKER", "must-not-leak")
    env = {"TASK_ID": "task-local", "LEARNING_RATE": "0.01", "DATA_DIR": "/data"}
    outcome, text = run(launcher, workload([python(PRINT_ENV), python(PRINT_ENV)], env))
    assert outcome == Outcome("succeeded", exit_code=0)
    expected = {**env, **ONE, "PATH": MINIMAL_PATH, "HOME": TASK_HOME}
    assert printed(text, "ENV") == [expected, expected]


def test_pid_1_and_the_parent_hold_nothing_at_all(launcher: LocalLauncher) -> None:
    """bwrap (the sandbox's pid 1, the step's parent) is the platform's: the step cannot
    read its environment at all (and it started with an empty one: the step's values
    reached bwrap as data)."""
    code = ("import json, os\n"
            "def held(p):\n"
            "    try:\n"
            "        return len([e for e in open(p, 'rb').read().split(b'\\0') if e])\n"
            "    except PermissionError:\n"
            "        return 'sealed'\n"
            "print('HELD=' + json.dumps([held('/proc/1/environ'), "
            "held(f'/proc/{os.getppid()}/environ'), os.environ.get('A')]))")
    outcome, text = run(launcher, workload([python(code)], {"A": "1"}))
    assert outcome.state == "succeeded", text
    assert printed(text, "HELD") == [["sealed", "sealed", "1"]]


def test_a_tasks_ld_preload_runs_nothing_outside_the_sandbox(launcher: LocalLauncher,
                                                             tmp_path: Path) -> None:
    """LD_PRELOAD pointing at a library an earlier step wrote: the exec helper's Python
    and bwrap, which run on the host, start without it, so the library never loads there
    (a host-side load would leave its canary in the host's /tmp, out of the sandbox's reach)."""
    gcc = shutil.which("gcc") or "gcc"  # make test installs it
    canary = Path(f"/tmp/taskenv-preload-{uuid.uuid4().hex}")
    source = tmp_path / "evil.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void hit(void) {'
                      f' FILE *f = fopen("{canary}", "a"); if (f) {{ fputs("ran", f); fclose(f); }}'
                      ' }\n')
    library = tmp_path / "libevil.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    # Names relative to the working directory, which is the run's home on the host too.
    job = workload([["true"]], {"LD_PRELOAD": "libevil.so", "LD_LIBRARY_PATH": "."})
    home = prepare_home(launcher.run_dir(job), job.workdir)
    shutil.copy(library, home / "libevil.so")  # as an earlier step of the task left it
    try:
        runner = Runner(runner_spec(launcher.settings, job, home, launcher.bwrap))
        lines: list[str] = []
        outcome = runner.run(lines.append)
        assert outcome.state == "succeeded", "".join(lines)
        assert not canary.exists(), "the task's library ran outside the sandbox"
    finally:
        canary.unlink(missing_ok=True)


def test_values_arrive_byte_exact(launcher: LocalLauncher) -> None:
    outcome, text = run(launcher, workload([python(PRINT_ENV)], TRICKY_VALUES))
    assert outcome.state == "succeeded"
    [seen] = printed(text, "ENV")
    assert {n: seen[n] for n in TRICKY_VALUES} == TRICKY_VALUES


def test_a_shell_step_reads_values_as_data(launcher: LocalLauncher) -> None:
    value = "$(touch pwned) `touch pwned`; touch pwned\n数据 🚀"
    outcome, text = run(launcher, workload(
        [["/bin/sh", "-c", 'printf "VALUE=%s\\n" "$TRICKY"; ls'], ["ls"]], {"TRICKY": value}))
    assert outcome.state == "succeeded"
    assert f"VALUE={value}\n" in text and "pwned" not in text.replace(value, "")


def test_argv_is_passed_as_a_list_without_a_shell(launcher: LocalLauncher) -> None:
    args = ["$(HOME)", "`id`", "a;b", "two words", "*", "--bind", "数据"]
    outcome, text = run(launcher, workload([python(PRINT_ARGV, *args)]))
    assert outcome.state == "succeeded"
    assert printed(text, "ARGV") == [args]


def test_resolved_path_and_home_win_over_the_minimal_ones(launcher: LocalLauncher) -> None:
    env = {"PATH": "/usr/bin:/bin:/opt/tools/bin", "HOME": "/home/trainer"}
    _, text = run(launcher, workload([["/usr/bin/python3", "-c", PRINT_ENV]], env))
    assert printed(text, "ENV") == [{**env, **ONE}]


def test_steps_share_the_revision_home_and_run_in_it(launcher: LocalLauncher) -> None:
    job = workload([["sh", "-c", "echo kept > file"], ["cat", "file"], python(PRINT_CWD)],
                   revision=3)
    outcome, text = run(launcher, job)
    assert outcome.state == "succeeded"
    assert "kept\n" in text and f"CWD={TASK_HOME}\n" in text
    assert (launcher.run_dir(job) / "home" / "file").read_text() == "kept\n"


def test_steps_run_in_the_workdir_inside_the_home(launcher: LocalLauncher) -> None:
    outcome, text = run(launcher, workload([python(PRINT_CWD)], workdir="runs/exp1"))
    assert outcome.state == "succeeded"
    assert f"CWD={TASK_HOME}/runs/exp1\n" in text


def test_the_host_is_out_of_reach(launcher: LocalLauncher, tmp_path: Path) -> None:
    secret = tmp_path / "secret.key"
    secret.write_text("host-secret-value")
    other = launcher.root / "other-task" / "r1" / "home"
    other.mkdir(parents=True)
    (other / "data").write_text("other-task-data")
    steps = [["cat", str(secret)], ["cat", str(other / "data")], ["ls", "/root"],
             ["cat", "/etc/passwd"], ["ls", str(Path.cwd())],
             ["sh", "-c", "touch /usr/pwned"]]
    for step in steps:
        outcome, text = run(launcher, workload([step]))
        assert outcome.state == "failed", (step, text)
        assert "host-secret-value" not in text and "other-task-data" not in text


def test_no_network_and_runs_as_nobody(launcher: LocalLauncher,
                                       redis_server: RedisServer) -> None:
    code = ("import os, socket, sys; print('UID=' + str(os.getuid())); s = socket.socket(); "
            "s.settimeout(2); s.connect(('127.0.0.1', int(sys.argv[1]))); print('CONNECTED')")
    outcome, text = run(launcher, workload([python(code, str(redis_server.port))]))
    assert outcome.state == "failed"
    assert "UID=65534" in text and "CONNECTED" not in text and "Error" in text


def test_a_background_process_dies_with_its_step(launcher: LocalLauncher) -> None:
    marker = f"taskenv-test-{os.getpid()}-{time.monotonic_ns()}"
    step = ["sh", "-c", f"setsid sleep 1000 {marker} >/dev/null 2>&1 & echo started"]
    outcome, text = run(launcher, workload([step, ["sleep", "0.2"]]))
    assert outcome.state == "succeeded" and "started" in text
    time.sleep(0.3)
    assert not alive_with(marker)


def alive_with(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


def test_a_failing_step_stops_the_later_ones(launcher: LocalLauncher) -> None:
    job = workload([python("import sys; sys.exit(3)"), ["echo", "second-step-ran"]])
    outcome, text = run(launcher, job)
    assert (outcome.state, outcome.exit_code) == ("failed", 3)
    assert outcome.reason is not None and "step 1" in outcome.reason and "3" in outcome.reason
    assert "second-step-ran" not in text


def test_a_later_step_failure_names_that_step(launcher: LocalLauncher) -> None:
    outcome, _ = run(launcher, workload([["true"], ["false"]]))
    assert (outcome.state, outcome.exit_code) == ("failed", 1)
    assert outcome.reason is not None and "step 2" in outcome.reason


def test_a_missing_executable_fails_and_says_so(launcher: LocalLauncher) -> None:
    outcome, text = run(launcher, workload([["/no/such/program", "--flag"]]))
    assert outcome.state == "failed" and outcome.reason is not None
    assert "step 1" in outcome.reason and "/no/such/program: not found" in text


def test_output_goes_to_the_log(launcher: LocalLauncher) -> None:
    code = "import sys; print('hello 数据'); print('oops', file=sys.stderr)"
    outcome, text = run(launcher, workload([python(code), ["true"]]))
    assert outcome.state == "succeeded"
    assert "==> step 1/2: python3\n" in text and "==> step 2/2: true\n" in text
    assert "hello 数据\n" in text and "oops\n" in text


def test_a_step_over_the_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    launcher = LocalLauncher(Settings(work_dir=str(tmp_path), step_timeout_seconds=1))
    marker = f"taskenv-timeout-{os.getpid()}-{time.monotonic_ns()}"
    started = time.monotonic()
    outcome, _ = run(launcher, workload([["sh", "-c", f"sleep 30 {marker} & sleep 31"]]))
    assert time.monotonic() - started < 15
    assert outcome.state == "failed" and outcome.reason is not None and "1s" in outcome.reason
    time.sleep(0.3)
    assert not alive_with(marker)


def test_the_unsafe_mode_runs_plain_processes_in_the_home(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    launcher = LocalLauncher(Settings(work_dir=str(tmp_path / "work"), local_sandbox=UNSAFE))
    assert "UNSANDBOXED" in caplog.text
    job = workload([python(PRINT_ENV), python(PRINT_CWD)], {"A": "1"}, workdir="sub")
    outcome, text = run(launcher, job)
    home = launcher.run_dir(job) / "home"
    assert outcome.state == "succeeded"
    assert printed(text, "ENV") == [{"A": "1", **ONE, "PATH": MINIMAL_PATH,
                                     "HOME": str(home)}]
    assert f"CWD={home / 'sub'}\n" in text


def test_a_missing_bwrap_refuses_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local.shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        LocalLauncher(Settings(work_dir=str(tmp_path)))


def test_an_unknown_sandbox_setting_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="TASKENV_LOCAL_SANDBOX"):
        LocalLauncher(Settings(work_dir=str(tmp_path), local_sandbox="off"))


@pytest.mark.parametrize("workdir", ["/", "../../etc", "a/../.."])
def test_a_workdir_escape_fails_the_launch(launcher: LocalLauncher, workdir: str) -> None:
    with pytest.raises(LaunchFailed, match="workdir"):
        launcher.launch(workload([["true"]], workdir=workdir), Hooks(lambda: None, print))
    assert not (launcher.run_dir(workload([["true"]])) / "home").exists()


# --- the launch, on a real Redis -------------------------------------------------------------

@pytest.fixture
def settings(redis_server: RedisServer, tmp_path: Path) -> Settings:
    return Settings(redis_url=redis_server.url, key_prefix=f"t{time.monotonic_ns()}",
                    work_dir=str(tmp_path / "work"), secret_keys=KEY, heartbeat_seconds=1)


@pytest.fixture
def tasks(settings: Settings) -> TaskStore:
    return TaskStore(connect(settings.redis_url), settings.key_prefix, Cipher.from_setting(KEY))


def submit(tasks: TaskStore, steps: list[list[str]], env: list[dict[str, Any]]) -> Workload:
    """A task resolved by the real validation and policy stages, ready to launch."""
    doc, _ = tasks.create(records.new_task({"name": "train", "steps": steps, "env": env}, "alice"))
    policies = PolicyStore(tasks.r, f"unused-{time.monotonic_ns()}", tasks.cipher)  # none set
    assert stages.validate(tasks, Limits(), doc["id"], 1)
    assert stages.apply_policy(tasks, policies, doc["id"], 1)
    return Workload.from_doc(tasks.get(doc["id"]))


def wait_final(tasks: TaskStore, task_id: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (doc := tasks.get(task_id))["state"] not in states.FINAL:
        assert time.monotonic() < deadline, doc["state"]
        time.sleep(0.05)
    return doc


def test_launch_returns_while_the_task_runs_and_the_runner_records_the_end(
        tasks: TaskStore, settings: Settings) -> None:
    launcher = LocalLauncher(settings)
    job = submit(tasks, [["sleep", "3"], ["sh", "-c", "echo done; exit 4"]], [])
    started = time.monotonic()
    stages.launch(tasks, launcher, job.task_id, 1, settings.heartbeat_seconds)
    assert time.monotonic() - started < 1.5
    assert tasks.get(job.task_id)["state"] == states.RUNNING
    assert launcher.observe(job) == Outcome("running")
    wait_until(lambda: tasks.liveness.is_alive(job.task_id, 1))  # the runner beats once the stage
    # has let go (the stage's last act is to drop its own beat: the runner's next one
    # follows within a heartbeat interval)
    doc = wait_final(tasks, job.task_id)
    assert (doc["state"], doc["exit_code"]) == (states.FAILED, 4)
    assert "step 2 exited with 4" in doc["reason"]
    assert "==> step 2/2: sh\ndone\n" in tasks.read_log(job.task_id, 1)
    wait_until(lambda: launcher.observe(job) != Outcome("running"))
    assert launcher.observe(job) == Outcome("failed", 4, "step 2 exited with 4")
    assert not tasks.liveness.is_alive(job.task_id, 1)


def test_secret_values_are_redacted_in_the_log_and_absent_from_the_runner_s_files(
        tasks: TaskStore, settings: Settings) -> None:
    launcher = LocalLauncher(settings)
    value = "s3cr3t-value-in-clear"
    job = submit(tasks, [["sh", "-c", 'echo "token is $TOKEN"']],
                 [{"name": "TOKEN", "value": value, "secret": True}])
    stages.launch(tasks, launcher, job.task_id, 1, settings.heartbeat_seconds)
    assert wait_final(tasks, job.task_id)["state"] == states.SUCCEEDED
    wait_until(lambda: launcher.observe(job) != Outcome("running"))
    assert f"token is {REDACTED}" in tasks.read_log(job.task_id, 1)
    run_dir = launcher.run_dir(job)
    for path in run_dir.iterdir():
        if path.is_file():
            assert value not in path.read_text() and KEY not in path.read_text()


def test_a_redelivered_launch_adopts_the_live_runner(tasks: TaskStore,
                                                     settings: Settings) -> None:
    launcher = LocalLauncher(settings)
    job = submit(tasks, [["sh", "-c", "echo run; sleep 1"]], [])
    stages.launch(tasks, launcher, job.task_id, 1, settings.heartbeat_seconds)
    pid_file = (launcher.run_dir(job) / "runner.pid").read_text()
    assert launcher.launch(job, Hooks(lambda: None, lambda text: None)) == Outcome("running")
    assert (launcher.run_dir(job) / "runner.pid").read_text() == pid_file
    wait_final(tasks, job.task_id)
    assert tasks.read_log(job.task_id, 1).count("run\n") == 1
    wait_until(lambda: launcher.observe(job) == Outcome("succeeded", 0))


def test_an_outcome_redis_lost_is_recovered_from_the_runner_s_file(
        tasks: TaskStore, settings: Settings) -> None:
    launcher = LocalLauncher(settings)
    job = submit(tasks, [["sh", "-c", "exit 3"]], [])
    stages.launch(tasks, launcher, job.task_id, 1, settings.heartbeat_seconds)
    wait_final(tasks, job.task_id)
    wait_until(lambda: launcher.observe(job) != Outcome("running"))
    # Redis acknowledged the outcome, then lost it (killed within its fsync interval).
    tasks.update(job.task_id, lambda d: {**d, "state": states.RUNNING, "exit_code": None})
    reconcile_once(tasks, launcher, lambda *a: None, stuck_after=0.0)
    doc = tasks.get(job.task_id)
    assert (doc["state"], doc["exit_code"]) == (states.FAILED, 3)


def test_a_dead_or_reused_pid_is_not_a_live_runner(tmp_path: Path) -> None:
    assert not runner_alive(tmp_path)  # no pid file
    (tmp_path / "runner.pid").write_text(f"{os.getpid()} 1\n")  # a live pid, other start time
    assert not runner_alive(tmp_path)
    local.write_pid_file(tmp_path, os.getpid())
    assert runner_alive(tmp_path)


def wait_until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.05)


# --- cancel --------------------------------------------------------------------------------

def cancel_through_the_store(tasks: TaskStore, job: Workload) -> None:
    """What the API does first: the revision is cancelled, then its workload is stopped."""
    assert tasks.transition(job.task_id, job.revision, set(states.LAUNCHED),
                            states.CANCELLED, cancelled_by="alice") is not None


@pytest.mark.parametrize("sandbox", ["bwrap", "off-unsafe-dev"])
def test_cancel_stops_the_runner_and_everything_its_step_started(
        tasks: TaskStore, settings: Settings, sandbox: str) -> None:
    launcher = LocalLauncher(dataclasses.replace(settings, local_sandbox=sandbox))
    seconds = f"1000.{time.monotonic_ns() % 10**9:09d}"  # a sleep no other test runs
    marker = f"sleep {seconds}"
    step = ["sh", "-c", f"sleep {seconds} & sleep {seconds}"]
    job = submit(tasks, [step, ["sh", "-c", "echo never"]], [])
    stages.launch(tasks, launcher, job.task_id, 1, settings.heartbeat_seconds)
    wait_until(lambda: alive_with(marker))
    cancel_through_the_store(tasks, job)
    started = time.monotonic()
    launcher.cancel(job)
    assert time.monotonic() - started < local.CANCEL_GRACE  # ended by its SIGTERM handler
    assert launcher.observe(job) == Outcome("cancelled", reason="cancelled")
    wait_until(lambda: not alive_with(marker), timeout=5)
    doc = tasks.get(job.task_id)
    assert doc["state"] == states.CANCELLED and doc["cancelled_by"] == "alice"
    assert "never" not in tasks.read_log(job.task_id, 1)


def test_cancel_of_a_workload_never_started_or_gone_does_nothing(
        launcher: LocalLauncher) -> None:
    job = workload([["true"]])
    launcher.cancel(job)
    launcher.cancel(job)
    assert launcher.observe(job) is None


def test_a_runner_that_ignores_sigterm_is_killed_with_its_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = LocalLauncher(Settings(work_dir=str(tmp_path / "work")))
    job = workload([["true"]])
    run_dir = launcher.run_dir(job)
    run_dir.mkdir(parents=True)
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; echo ready; sleep 1000 & wait"],
                                stdout=subprocess.PIPE, start_new_session=True)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
    stubborn.stdout.close()  # the trap is set: SIGTERM alone would not end it
    local.write_pid_file(run_dir, stubborn.pid)
    monkeypatch.setattr(local, "CANCEL_GRACE", 0.3)
    launcher.cancel(job)
    assert stubborn.wait(timeout=5) == -9
    assert not runner_alive(run_dir)


def test_a_runner_stops_waiting_for_redis_once_its_run_directory_is_gone(
        tmp_path: Path) -> None:
    def redis_away() -> None:
        raise redis.ConnectionError("refused")

    run_dir = tmp_path / "r1"
    started = time.monotonic()
    assert not outcomes.patiently(redis_away, 3600.0, wanted=run_dir.exists)
    assert time.monotonic() - started < 5  # not an hour: nobody will read it any more


def test_write_files_places_each_file_with_its_mode_and_refuses_an_escape(tmp_path):
    from shared.errors import LaunchFailed
    from shared.task.files import TaskFile
    from workers.launchers.common.run_dir import write_files
    write_files(tmp_path, [TaskFile("run.sh", "echo hi\n", 0o755),
                           TaskFile("conf/deep/a.yaml", "x: 1\n")])
    assert (tmp_path / "run.sh").read_text() == "echo hi\n"
    assert (tmp_path / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "conf/deep/a.yaml").stat().st_mode & 0o777 == 0o644
    for bad in ("../out.txt", "/etc/x"):
        try:
            write_files(tmp_path / "conf", [TaskFile(bad, "x")])
        except LaunchFailed as exc:
            assert bad in str(exc)
        else:
            raise AssertionError(f"{bad} was written")
    assert not (tmp_path / "out.txt").exists()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    try:
        write_files(tmp_path, [TaskFile("link", "x")])
    except OSError:
        pass  # O_NOFOLLOW: a link in the way is not followed
    assert not (tmp_path / "elsewhere").exists()
