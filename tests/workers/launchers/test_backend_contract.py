"""One contract, every backend: what a launcher guarantees, proven on its real engine.

Each case runs a task the way the platform does — stored, validated and resolved by the
real stages, started by the launch stage, its end brought back by the reconciler's
passes — and reads what the task saw from its log in Redis, as a user would.  The
steps are POSIX shell with busybox-level tools (``env``, ``od``, ``stat``, ``dd``), so
the same step runs in the local sandbox (the host's ``/usr``) and in podman's runtime
image (busybox only).

A case a backend cannot meet is in :data:`NOT_MET`, with its reason; docs/launchers.md
shows the same table (``test_the_documented_table_is_this_one`` holds them equal), so
no case is ever skipped silently.  Kubernetes runs against the contract server in
``tests/workers/launchers/kubernetes/`` for what a cluster would decide: no step runs
there, so it is in the table for every case that needs one; the dry run runs nothing.
"""

from __future__ import annotations

import dataclasses
import re
import stat
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shared.config import Settings
from shared.env.envlist import Limits
from shared.env.identity import Group, replica_env
from shared.errors import TransientError
from shared.policy.store import PolicyStore
from shared.redis_conn import connect
from shared.secrets import REDACTED, Cipher, new_key
from shared.store.tasks import TaskStore
from shared.task import records, states
from shared.task.replica_logs import prefixed
from shared.task.workload import Workload
from tests.support.podman import podman
from workers import stages
from workers.launchers.base import Launcher
from workers.launchers.registry import make_launcher, traits
from workers.localstack import RedisServer
from workers.reconcile import reconcile_once

ROOT = Path(__file__).resolve().parents[3]
KEY = new_key()
DOC = ROOT / "docs" / "launchers.md"

# Small limits, so that a step can reach each of them in a moment.
MAX_OPEN_FILES, MAX_FILE_BYTES, MAX_PROCESSES = 64, 1 << 20, 48

HOSTILE = {
    "SUBSHELL": "$(id)",
    "REFERENCE": "$(HOME)",
    "DOLLARS": "a$$b $$(X) $ end$",
    "BACKTICKS": "`id`",
    "SEMICOLON": "a; rm -rf /",
    "NEWLINES": "line one\nline two\n",
    "NON_ASCII": "数据集/训练 — ünïcode ✓",
    "QUOTES": "'\"\\",
    "EMPTY": "",
    "EQUALS": "a=b=c",
}
SECRET = "hf_contract-secret-5f1c9e27"


@dataclass
class Backend:
    """One backend as the suite drives it."""

    name: str
    launcher: Launcher
    tasks: TaskStore
    settings: Settings
    # Variables the backend's runtime adds to what the task resolved (documented per
    # backend in docs/launchers.md), besides each replica's identity.
    runtime_names: frozenset[str]
    cleanup: Callable[[Workload], None]

    def submit(self, steps: list[list[str]], env: list[dict[str, Any]] | None = None,
               owner: str = "alice", **fields: Any) -> Workload:
        """A task stored and resolved by the real validation and policy stages."""
        doc, _ = self.tasks.create(records.new_task(
            {"name": "contract", "steps": steps, "env": env or [], **fields}, owner))
        policies = PolicyStore(self.tasks.r, f"none-{uuid.uuid4().hex}", self.tasks.cipher)
        assert stages.validate(self.tasks, Limits(), doc["id"], 1)
        assert stages.apply_policy(self.tasks, policies, doc["id"], 1)
        return Workload.from_doc(self.tasks.get(doc["id"]))

    def start(self, workload: Workload) -> None:
        stages.launch(self.tasks, self.launcher, workload.task_id, workload.revision,
                      self.settings.heartbeat_seconds)

    def finish(self, workload: Workload, timeout: float = 120.0) -> tuple[dict[str, Any], str]:
        """The reconciler's passes until the task is final: its record and its log."""
        deadline = time.monotonic() + timeout
        while (doc := self.tasks.get(workload.task_id))["state"] not in states.FINAL:
            assert time.monotonic() < deadline, f"still {doc['state']} after {timeout} s"
            reconcile_once(self.tasks, self.launcher, lambda *a: None, stuck_after=600.0)
            time.sleep(0.2)
        return doc, self.tasks.read_log(workload.task_id, workload.revision)

    def run(self, steps: list[list[str]], env: list[dict[str, Any]] | None = None,
            **fields: Any) -> tuple[dict[str, Any], str]:
        workload = self.submit(steps, env, **fields)
        self.start(workload)
        try:
            return self.finish(workload)
        finally:
            self.cleanup(workload)


# --- the backends ----------------------------------------------------------------------

NOT_MET: dict[tuple[str, str], str] = {
    ("podman", "python_start_up_files_stay_inside"):
        "the runtime image has no Python; nothing outside the container runs with the "
        "task's env (podman reads the pod spec, the values are the container's alone)",
}
for _case in ("env_arrives_exactly", "secrets_are_redacted", "files_arrive_with_modes",
              "fail_fast_names_the_replica", "replicas_are_prefixed",
              "each_replica_has_a_home_of_its_own",
              "output_is_never_the_backends_words", "cancel_is_idempotent_and_leaves_nothing",
              "python_start_up_files_stay_inside", "no_setuid_file_is_left_on_the_host",
              "the_limits_hold", "tenants_see_nothing_of_each_other",
              "a_tenant_at_its_process_budget_leaves_the_other_working",
              "each_live_task_has_a_host_uid_of_its_own",
              "nothing_of_two_tenants_is_left_on_the_host"):
    NOT_MET[("kubernetes", _case)] = ("no step runs against the contract server: a "
                                      "cluster's kubelet decides (its tests check the Job "
                                      "and Secret taskenv submits)")
    NOT_MET[("dryrun", _case)] = "the dry run starts nothing"

BACKENDS = ["local", "podman", "slurm", "kubernetes", "dryrun"]
# Each backend with its engine's markers, known at collection: make check deselects them.
ENGINES = {"local": [pytest.mark.integration, pytest.mark.sandbox],
           "podman": [pytest.mark.integration, pytest.mark.podman],
           "slurm": [pytest.mark.integration, pytest.mark.slurm]}
PARAMS = [pytest.param(name, marks=ENGINES.get(name, [])) for name in BACKENDS]


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def podman_image() -> None:
    subprocess.run([str(ROOT / "deploy/image/build.sh")], check=True, timeout=300)


def _settings(redis_server: RedisServer, tmp_path: Path, launcher: str) -> Settings:
    return Settings(launcher=launcher, redis_url=redis_server.url,
                    key_prefix=f"c{uuid.uuid4().hex[:8]}", work_dir=str(tmp_path / "work"),
                    secret_keys=KEY, heartbeat_seconds=1,
                    task_max_open_files=MAX_OPEN_FILES,
                    task_max_file_size=str(MAX_FILE_BYTES),
                    task_max_processes=MAX_PROCESSES)


def _no_cleanup(workload: Workload) -> None:
    """Nothing the backend leaves for the suite to remove (Slurm forgets its jobs)."""


def _reap_runners(workload: Workload) -> None:
    """The local runners this process started, waited for once they end on their own."""
    from workers.launchers.local import launcher as local

    for proc in list(local._RUNNERS):
        proc.wait(timeout=60)


def _remove_pod(workload: Workload) -> None:
    podman("pod", "rm", "--force", "--time", "0", "--ignore", workload.run_name)


@pytest.fixture(params=PARAMS)
def backend(request: pytest.FixtureRequest, redis_server: RedisServer,
            tmp_path: Path) -> Backend:
    name = request.param
    case = request.node.originalname.removeprefix("test_")
    if (name, case) in NOT_MET:
        pytest.skip(f"{name}: {NOT_MET[(name, case)]}")
    settings = _settings(redis_server, tmp_path, name)
    tasks = TaskStore(connect(settings.redis_url), settings.key_prefix,
                      Cipher.from_setting(KEY))
    if name == "local":
        return Backend(name, make_launcher(settings), tasks, settings,
                       frozenset({"PATH", "HOME", "PWD"}), _reap_runners)
    if name == "podman":
        request.getfixturevalue("podman_image")
        return Backend(name, make_launcher(settings), tasks, settings,
                       frozenset({"PATH", "HOME", "HOSTNAME", "PWD", "SHLVL"}), _remove_pod)
    if name == "slurm":
        cluster = request.getfixturevalue("slurm_cluster")
        request.getfixturevalue("monkeypatch").setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
        settings = dataclasses.replace(settings, slurm_dir=str(tmp_path / "slurm"),
                                       step_timeout_seconds=120)
        return Backend(name, make_launcher(settings), tasks, settings,
                       frozenset({"PATH", "HOME", "PWD"}), _no_cleanup)
    raise AssertionError(f"{name}: every case is in NOT_MET")


# --- what a step prints, and how the suite reads it back --------------------------------

def dumped(tag: str, command: str) -> list[str]:
    """A step whose output is ``command``'s bytes in hex between markers: values with
    newlines, NULs' neighbours and any byte survive the log."""
    return ["sh", "-c", f'echo "<{tag}"; {command} | od -An -v -tx1; echo "{tag}>"']


def undumped(log: str, tag: str) -> list[bytes]:
    found = re.findall(rf"^(?:\[replica \d+\] )?<{tag}\n(.*?)^(?:\[replica \d+\] )?{tag}>$",
                       log, re.S | re.M)
    return [bytes.fromhex(re.sub(r"\[replica \d+\]|\s", "", block)) for block in found]


def environ(raw: bytes) -> dict[str, str]:
    entries = [e.decode() for e in raw.split(b"\0") if e]
    return dict(e.split("=", 1) for e in entries)


def values(env: dict[str, str], secret: dict[str, str] | None = None) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    entries += [{"name": k, "value": v, "secret": True} for k, v in (secret or {}).items()]
    return entries


# --- the cases ---------------------------------------------------------------------------

def test_env_arrives_exactly(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every resolved value arrives byte for byte; the worker's own environment does not."""
    monkeypatch.setenv("TASKENV_CONTRACT_WORKER_ONLY", "must-not-arrive")
    workload = backend.submit([dumped("ENV", "env -0")], values(HOSTILE))
    backend.start(workload)
    try:
        doc, log = backend.finish(workload)
    finally:
        backend.cleanup(workload)
    assert doc["state"] == states.SUCCEEDED, log
    (seen,) = [environ(raw) for raw in undumped(log, "ENV")]
    resolved = workload.env_dict()  # the user's values and the platform's (TASK_ID...)
    assert {k: seen.get(k) for k in HOSTILE} == HOSTILE
    assert {k: seen.get(k) for k in resolved} == resolved
    identity = dict(replica_env(Group(), 0))
    assert {k: seen.get(k) for k in identity} == identity
    extra = {n for n in set(seen) - set(resolved) - set(identity)
             if not n.startswith(traits(backend.name).reserved_prefixes)}  # the scheduler's
    assert extra <= backend.runtime_names, f"{backend.name} added {extra - backend.runtime_names}"


def test_secrets_are_redacted(backend: Backend) -> None:
    """A step that prints a secret shows it masked in every log; the value reached it."""
    step = ["sh", "-c", 'echo "token=$HF_TOKEN"; [ "$HF_TOKEN" = "' + SECRET + '" ]']
    doc, log = backend.run([step], values({}, {"HF_TOKEN": SECRET}))
    assert doc["state"] == states.SUCCEEDED, log
    assert SECRET not in log and f"token={REDACTED}" in log


def test_files_arrive_with_modes(backend: Backend) -> None:
    files = [{"path": "run.sh", "content": "#!/bin/sh\necho ran-from-file\n", "mode": 0o755},
             {"path": "conf/data.txt", "content": "数据 line\n", "mode": 0o600}]
    steps = [["./run.sh"], ["sh", "-c", "stat -c 'MODE %a %n' run.sh conf/data.txt; "
                                        "cat conf/data.txt"]]
    doc, log = backend.run(steps, files=files, workdir="job")
    assert doc["state"] == states.SUCCEEDED, log
    assert "ran-from-file" in log and "MODE 755 run.sh" in log
    assert "MODE 600 conf/data.txt" in log and "数据 line" in log


def test_fail_fast_names_the_replica(backend: Backend) -> None:
    """Replica 1 fails while replica 0 would sleep for ever: the task fails now, naming
    the replica and its exit code."""
    step = ["sh", "-c", 'if [ "$RANK" = 1 ]; then exit 42; fi; sleep 600']
    started = time.monotonic()
    doc, log = backend.run([step], replicas=2)
    assert time.monotonic() - started < 120
    assert (doc["state"], doc["exit_code"]) == (states.FAILED, 42), log
    assert "replica 1" in doc["reason"] and "42" in doc["reason"]


def test_replicas_are_prefixed(backend: Backend) -> None:
    doc, log = backend.run([["sh", "-c", 'echo "hello from $RANK"']], replicas=2)
    assert doc["state"] == states.SUCCEEDED, log
    for rank in (0, 1):
        assert prefixed(rank, f"hello from {rank}\n") in log


def test_each_replica_has_a_home_of_its_own(backend: Backend) -> None:
    """What one replica writes in its home, another never sees nor overwrites."""
    step = ["sh", "-c", 'echo "$RANK" > mine; sleep 1; echo "home of $RANK holds $(cat mine)"']
    doc, log = backend.run([step], replicas=2)
    assert doc["state"] == states.SUCCEEDED, log
    for rank in (0, 1):
        assert prefixed(rank, f"home of {rank} holds {rank}\n") in log


def test_output_is_never_the_backends_words(backend: Backend) -> None:
    """What a step prints is the user's output, never read as the scheduler's messages."""
    lines = ["slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1.0",
             "srun: error: node1: task 1: Exited with exit code 42",
             "OOMKilled", "Error: container exited with 137", "local: step 1 exited with 9"]
    step = ["sh", "-c", "; ".join(f"echo '{line}'" for line in lines)]
    doc, log = backend.run([step], replicas=2)
    assert (doc["state"], doc["exit_code"]) == (states.SUCCEEDED, 0), log
    assert doc.get("reason") in (None, "")


def test_cancel_is_idempotent_and_leaves_nothing(backend: Backend) -> None:
    seconds = f"900.{time.monotonic_ns() % 10**9:09d}"  # a sleep no other test runs
    workload = backend.submit([["sh", "-c", f"sleep {seconds} & sleep {seconds}"]])
    backend.start(workload)
    try:
        deadline = time.monotonic() + 60
        while not _sleeping(backend, workload, seconds):
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.2)
        assert backend.tasks.transition(workload.task_id, 1, set(states.LAUNCHED),
                                        states.CANCELLED, cancelled_by="alice") is not None
        _cancel(backend, workload)
        _cancel(backend, workload)  # a second cancel: nothing more, no error
        observed = backend.launcher.observe(workload)
        assert observed is None or observed.state != "running"
        deadline = time.monotonic() + 30
        while _sleeping(backend, workload, seconds):
            assert time.monotonic() < deadline, "the step outlived its cancel"
            time.sleep(0.2)
    finally:
        backend.cleanup(workload)


def _cancel(backend: Backend, workload: Workload) -> None:
    """As the API's cancel does: a backend that stops asynchronously says so
    (``TransientError``) until it has, and is asked again."""
    deadline = time.monotonic() + 60
    while True:
        try:
            backend.launcher.cancel(workload)
            return
        except TransientError:
            assert time.monotonic() < deadline, "the workload never stopped"
            time.sleep(0.5)


def _sleeping(backend: Backend, workload: Workload, seconds: str) -> bool:
    if backend.name == "podman":
        found = podman("pod", "exists", workload.run_name)
        if found.returncode != 0:
            return False
        top = podman("pod", "top", workload.run_name, "args")
        return seconds in top.stdout
    out = subprocess.run(["pgrep", "-f", f"sleep {seconds}"], capture_output=True, text=True)
    return out.returncode == 0


def test_python_start_up_files_stay_inside(backend: Backend) -> None:
    """A task's ``sitecustomize.py`` on its PYTHONPATH and a ``.pth`` under the HOME it
    sets run in its own Python (inside), and nowhere else: a canary file they would
    leave in the host's /tmp is never there."""
    canary = Path(f"/tmp/taskenv-canary-{uuid.uuid4().hex}")
    hook = (f"import sys; print('hook ran in', sys.argv[0] or 'python', flush=True); "
            f"open({str(canary)!r}, 'a').write('ran')\n")
    files = [{"path": "sitecustomize.py", "content": hook},
             {"path": ".local/lib/python3.11/site-packages/evil.pth", "content": hook},
             {"path": "train.py", "content": "print('training')\n"}]
    env = values({"PYTHONPATH": ".", "HOME": "."})
    try:
        doc, log = backend.run([["python3", "train.py"]], env, files=files, workdir="job")
        assert doc["state"] == states.SUCCEEDED, log
        assert "training" in log and "hook ran in" in log  # the hooks are real, and ran inside
        assert not canary.exists(), "task code ran outside the sandbox"
    finally:
        canary.unlink(missing_ok=True)


def test_no_setuid_file_is_left_on_the_host(backend: Backend) -> None:
    step = ["sh", "-c", "cp /bin/sh ./suid-sh && chmod 4755 ./suid-sh; "
                        "ls -l suid-sh; echo wrote"]
    doc, log = backend.run([step])
    assert "wrote" in log, log
    work = Path(backend.settings.work_dir)
    left = [p for p in work.rglob("*") if p.is_file() and p.stat().st_mode & stat.S_ISUID] \
        if work.exists() else []
    assert left == []


def test_the_limits_hold(backend: Backend) -> None:
    """Open files, file size and processes stop at the limits the task was given."""
    files_step = ["sh", "-c", "echo OPEN_FILES $(ulimit -Sn) $(ulimit -Hn)"]
    size_step = ["sh", "-c", f"dd if=/dev/zero of=big bs=4096 count={MAX_FILE_BYTES // 2048}"
                             " 2>/dev/null; echo SIZE $(wc -c < big)"]
    procs_step = ["sh", "-c", f"n=0; while [ $n -lt {MAX_PROCESSES * 2} ]; do "
                              "(sleep 3) 2>/dev/null & n=$((n+1)); done; "
                              "echo STARTED $(ps -o pid= 2>/dev/null | wc -l); wait; true"]
    doc, log = backend.run([files_step, size_step, procs_step])
    soft, hard = re.search(r"OPEN_FILES (\d+) (\d+)", log).groups()  # type: ignore[union-attr]
    assert int(soft) <= MAX_OPEN_FILES and int(hard) <= MAX_OPEN_FILES, log  # the kernel's own
    size = int(re.search(r"SIZE (\d+)", log).group(1))  # type: ignore[union-attr]
    assert size <= MAX_FILE_BYTES, log
    # The forks beyond the limit are refused: the step goes on with fewer, or it fails
    # (the local launcher's reason names the limit it reached) — never a host that runs
    # them all.
    started = re.search(r"STARTED (\d+)", log)
    if started is None:
        assert doc["state"] == states.FAILED, log
        if backend.name == "local":
            assert f"{MAX_PROCESSES} processes" in doc["reason"]
    else:
        assert int(started.group(1)) <= MAX_PROCESSES, log


# --- two tenants at once ------------------------------------------------------------------
#
# Each case runs alice's task and bob's side by side: alice's step does its part, then
# holds (a ``sleep`` of a length no other test uses) until bob's task has ended; the
# suite then ends alice's sleep from the host and her step reports what it sees.


@dataclass
class Held:
    """Alice's task, holding in a sleep while bob's runs."""

    workload: Workload
    seconds: str


def hold(backend: Backend, command: str, env: list[dict[str, Any]] | None = None,
         after: str = "true", owner: str = "alice") -> Held:
    """Alice's task runs ``command``, then holds, then runs ``after``; returned once it
    holds."""
    seconds = f"900.{time.monotonic_ns() % 10**9:09d}"
    step = ["sh", "-c", f"{command}; sleep {seconds}; echo RELEASED; {after}"]
    workload = backend.submit([step], env, owner=owner)
    backend.start(workload)
    deadline = time.monotonic() + 90
    while not _count(f"^sleep {seconds}"):
        assert time.monotonic() < deadline, "alice's step never reached its hold"
        assert backend.tasks.get(workload.task_id)["state"] not in states.FINAL, \
            backend.tasks.read_log(workload.task_id, 1)
        time.sleep(0.2)
    return Held(workload, seconds)


def beside(backend: Backend, held: Held, steps: list[list[str]],
           **fields: Any) -> tuple[dict[str, Any], str]:
    """Bob's task, run to its end while alice's holds; then alice's hold is ended from
    the host, as if her sleep were over.  Bob's record and log."""
    bob = backend.submit(steps, owner="bob", **fields)
    try:
        backend.start(bob)
        return backend.finish(bob)
    finally:
        subprocess.run(["pkill", "-f", f"^sleep {held.seconds}"], check=False)


def release(backend: Backend, held: Held) -> tuple[dict[str, Any], str]:
    """Alice's record and log once her task has ended; then what both tasks left is
    collected as every case does."""
    try:
        return backend.finish(held.workload)
    finally:
        backend.cleanup(held.workload)


def host_uid(held: Held) -> int:
    """The host uid a holding task's kernel budgets are charged to: its sleeping
    process's, as the host sees it (whatever user namespaces lie between)."""
    found = subprocess.run(["pgrep", "-f", f"^sleep {held.seconds}"], capture_output=True,
                           text=True)
    (pid,) = found.stdout.split()
    return Path(f"/proc/{pid}").stat().st_uid


def test_tenants_see_nothing_of_each_other(backend: Backend) -> None:
    """Neither tenant sees, reads, lists or writes the other's home, ``/tmp``, shared
    memory, files, processes or environment, while both run."""
    alice, bob = uuid.uuid4().hex, uuid.uuid4().hex
    mine = ('for d in "$HOME" "$PWD" /tmp /dev/shm; do echo "{t}" > "$d/mark-$$" 2>/dev/null; '
            'done')
    look = ('echo "SEES $(ls -a "$HOME" "$PWD" /tmp /dev/shm 2>&1 | tr "\\n" " ")"; '
            'cat "$HOME"/* "$PWD"/* /tmp/* /dev/shm/* 2>/dev/null; '
            'for p in /proc/[0-9]*; do tr "\\0" " " < "$p/cmdline"; echo; '
            'tr "\\0" " " < "$p/environ"; echo; done 2>/dev/null')
    secret = f"hf_{alice}"
    held = hold(backend, mine.format(t=alice), values({}, {"HF_TOKEN": secret}), after=look)
    try:
        bob_doc, bob_log = beside(
            backend, held, [["sh", "-c", f"{look}; {mine.format(t=bob)}; echo BOB DONE"]],
            files=[{"path": "bob.txt", "content": bob}])
    finally:
        alice_doc, alice_log = release(backend, held)
    assert bob_doc["state"] == states.SUCCEEDED and "BOB DONE" in bob_log, bob_log
    assert alice not in bob_log and secret not in bob_log and held.seconds not in bob_log
    look_step = ["sh", "-c", look]
    after = backend.submit([look_step], owner="alice")  # the tenant's next task, the same
    backend.start(after)
    try:
        _, later_log = backend.finish(after)
    finally:
        backend.cleanup(after)
    assert "RELEASED" in alice_log and alice_doc["state"] == states.SUCCEEDED, alice_log
    assert bob not in alice_log and bob not in later_log and alice not in later_log


def test_a_tenant_at_its_process_budget_leaves_the_other_working(backend: Backend) -> None:
    """Alice holds nearly all the processes her limits allow; bob, beside her, still
    starts as many as he asks.  A budget charged per host user (``RLIMIT_NPROC`` counts a
    uid's processes across the host) would be shared between them."""
    held_count = MAX_PROCESSES - 12
    seconds = f"700.{time.monotonic_ns() % 10**9:09d}"
    fill = (f"n=0; while [ $n -lt {held_count} ]; do sleep {seconds} & n=$((n+1)); done; "
            "echo FILLED")
    held = hold(backend, fill)
    try:
        deadline = time.monotonic() + 60
        while _count(f"^sleep {seconds}") < held_count:
            assert time.monotonic() < deadline, f"alice holds {_count(f'^sleep {seconds}')}"
            time.sleep(0.2)
        forks = MAX_PROCESSES // 2
        # A fork refused ends the shell (or prints an error): only a step that started
        # every one reaches its last line with the full count.
        bob_doc, bob_log = beside(backend, held, [["sh", "-c", (
            f"n=0; while [ $n -lt {forks} ]; do sleep 3 & n=$((n+1)); done; "
            "echo BOB STARTED $n; wait")]])
    finally:
        subprocess.run(["pkill", "-f", f"^sleep {seconds}"], check=False)
        alice_doc, alice_log = release(backend, held)
    assert bob_doc["state"] == states.SUCCEEDED, bob_log
    assert f"BOB STARTED {forks}" in bob_log and "fork" not in bob_log, bob_log
    assert "FILLED" in alice_log and "RELEASED" in alice_log, alice_log


def _count(pattern: str) -> int:
    """Processes of the host whose command line matches ``pattern`` (a container's too:
    the host sees every process)."""
    found = subprocess.run(["pgrep", "-c", "-f", pattern], capture_output=True, text=True)
    return int(found.stdout.strip() or 0)


def test_each_live_task_has_a_host_uid_of_its_own(backend: Backend) -> None:
    """The host user each task's kernel budgets are charged to (processes, inotify
    instances, message queues, keyrings) is its own while both run, and never root."""
    alice = hold(backend, "true")
    try:
        bob = hold(backend, "true", owner="bob")
    except BaseException:
        subprocess.run(["pkill", "-f", f"^sleep {alice.seconds}"], check=False)
        release(backend, alice)
        raise
    try:
        uids = host_uid(alice), host_uid(bob)
    finally:
        for held in (alice, bob):
            subprocess.run(["pkill", "-f", f"^sleep {held.seconds}"], check=False)
        ends = [backend.finish(held.workload) for held in (alice, bob)]
        for held in (alice, bob):
            backend.cleanup(held.workload)
    assert [doc["state"] for doc, _ in ends] == [states.SUCCEEDED] * 2, ends
    assert uids[0] != uids[1]
    assert 0 not in uids, "a task charged to the host's root"


def test_nothing_of_two_tenants_is_left_on_the_host(backend: Backend) -> None:
    """Once both tasks have ended (and the reconciler passed), no process, directory,
    pod or volume of either is left."""
    held = hold(backend, 'echo kept > "$HOME/kept"; echo kept > /tmp/kept')
    used = _held_by(backend, held.workload)
    bob_task: list[Workload] = []
    original = backend.submit

    def submit(*args: Any, **fields: Any) -> Workload:
        bob_task.append(original(*args, **fields))
        return bob_task[-1]

    backend.submit = submit  # type: ignore[method-assign]
    try:
        bob_doc, bob_log = beside(
            backend, held, [["sh", "-c", 'echo kept > "$HOME/kept"; echo kept > /tmp/kept']])
    finally:
        backend.submit = original  # type: ignore[method-assign]
        release(backend, held)
    assert bob_doc["state"] == states.SUCCEEDED, bob_log
    deadline = time.monotonic() + 30
    while left := _left_of(backend, [held.workload, *bob_task], used):
        assert time.monotonic() < deadline, f"left on the host: {left}"
        reconcile_once(backend.tasks, backend.launcher, lambda *a: None, stuck_after=600.0)
        time.sleep(0.2)


def _held_by(backend: Backend, workload: Workload) -> set[str]:
    """The podman volumes a running task's containers mount (none for other backends)."""
    if backend.name != "podman":
        return set()
    listed = podman("ps", "--filter", f"pod={workload.run_name}", "--format", "{{.ID}}")
    found: set[str] = set()
    for container in listed.stdout.split():
        mounts = podman("inspect", "--format", "{{range .Mounts}}{{.Name}} {{end}}", container)
        found |= set(mounts.stdout.split())
    return found


# What the platform itself keeps of a finished run for a while (how it ended, the
# runner's own log for an operator, Slurm's job id), never anything of the task's.
RUN_RECORDS = re.compile(r"outcome\.json|runner\.(pid|log)|made_at|r\d+\.job")


def _left_of(backend: Backend, workloads: list[Workload], volumes: set[str]) -> list[str]:
    left: list[str] = []
    for workload in workloads:
        if _count(workload.task_id):
            left.append(f"a process naming {workload.task_id}")
        if backend.name == "podman":
            if podman("pod", "exists", workload.run_name).returncode == 0:
                left.append(f"pod {workload.run_name}")
        else:
            root = Path(backend.settings.slurm_dir if backend.name == "slurm"
                        else backend.settings.work_dir) / workload.task_id
            found = root.rglob("*") if root.exists() else iter(())
            left += [str(p) for p in found
                     if not p.is_dir() and not RUN_RECORDS.fullmatch(p.name)]
    if volumes:
        names = set(podman("volume", "ls", "--format", "{{.Name}}").stdout.split())
        left += [f"volume {name}" for name in sorted(volumes & names)]
    return left


# --- the table -----------------------------------------------------------------------------

CASES = sorted(name.removeprefix("test_") for name in dir() if name.startswith("test_"))


def test_the_documented_table_is_this_one() -> None:
    """docs/launchers.md's contract table lists every case and, per backend, whether it
    is met; each "not met" row gives the reason NOT_MET gives."""
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("<!-- contract-table -->"):text.index("<!-- /contract-table -->")]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 1 + len(BACKENDS) and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = dict(zip(BACKENDS, cells[1:], strict=True))
    assert sorted(rows) == CASES
    for case, cells in rows.items():
        for name, cell in cells.items():
            met = (name, case) not in NOT_MET
            assert cell.startswith("met") == met, (case, name, cell)


def test_every_case_runs_on_some_backend_that_has_an_engine_here() -> None:
    assert all(any((b, c) not in NOT_MET for b in ("local", "podman")) for c in CASES)

