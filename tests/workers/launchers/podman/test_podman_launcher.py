"""The podman launcher against real podman: real pods, real containers, real env.

Needs podman with runc, /etc/containers/containers.conf from deploy/podman and the
local image (built here by deploy/image/build.sh if it is missing); .ci/run
installs all of it.  Every pod a test makes is removed after it.
"""

from __future__ import annotations

import base64
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.config import DEFAULT_IMAGE, Settings
from shared.env.identity import Group, replica_env
from shared.errors import LaunchFailed, PermanentError, TransientError
from shared.store.outputcap import RESERVED
from shared.store.tasks import TaskStore
from shared.task import manifest
from shared.task.workload import Resources, Workload
from tests.support.podman import env_dumps, podman
from tests.workers.conftest import RecordingHooks, build_workload
from workers.launchers.base import Outcome
from workers.launchers.podman.launcher import PodmanLauncher
from workers.launchers.registry import make_launcher

pytestmark = [pytest.mark.integration, pytest.mark.podman]

ROOT = Path(__file__).resolve().parents[4]
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DUMP = ("env", "-0")  # NUL-terminated NAME=value entries: newlines in values survive


def runtime_added(workload: Workload) -> dict[str, str]:
    """What a task sees besides its resolved env, and who adds it.

    Found by running the image with an empty env (test_runtime_adds_only_these): podman
    sets HOSTNAME (the pod's name) and HOME (the working directory: the step runs as the
    pod's own host uid, never root, which the image's /etc/passwd does not name, and
    podman adds it there with the working directory as its home); the image sets PATH;
    the /bin/sh that runs the steps in order exports PWD (the image's WORKDIR) and SHLVL.
    Unlike ``podman run``, ``kube play`` adds no TERM or container.
    The platform adds the replica's identity (a task of one: a world of one).
    """
    return {"HOSTNAME": workload.run_name, "HOME": "/work", "PATH": IMAGE_PATH,
            "PWD": "/work", "SHLVL": "1", **dict(replica_env(Group(), 0))}


HOSTILE = {
    "SUBSHELL": "$(HOME)",
    "REFERENCE": "$(NCCL_DEBUG)",  # a defined variable: Kubernetes would expand it
    "DOLLARS": "a$$b $$(X) $ end$",
    "BACKTICKS": "`id`",
    "SEMICOLON": "a;b",
    "NEWLINES": "line one\nline two\n",
    "NON_ASCII": "数据集/训练 — ünïcode ✓",
    "QUOTES": "'\"\\",
    "EMPTY": "",
    "EQUALS": "a=b=c",
}



@pytest.fixture(scope="module", autouse=True)
def image() -> None:
    subprocess.run([str(ROOT / "deploy/image/build.sh")], check=True, timeout=300)


@pytest.fixture
def launcher() -> PodmanLauncher:
    return PodmanLauncher(Settings())


@pytest.fixture
def make_workload(launcher: PodmanLauncher) -> Iterator[Callable[..., Workload]]:
    """Workloads whose pods, volumes and uids are removed after the test."""
    made: list[Workload] = []

    def make(steps: list[list[str]], env: dict[str, str] | None = None,
             secrets: dict[str, str] | None = None, **kwargs: Any) -> Workload:
        workload = build_workload(steps, env, secrets, name="podman-test", **kwargs)
        made.append(workload)
        return workload

    yield make
    for workload in made:
        launcher.remove(workload)


def finish(launcher: PodmanLauncher, workload: Workload, timeout: float = 60) -> Outcome:
    deadline = time.monotonic() + timeout
    while True:
        outcome = launcher.observe(workload)
        assert outcome is not None, "the launched container vanished"
        if outcome.state != "running":
            return outcome
        assert time.monotonic() < deadline, f"{workload.run_name} still running"
        time.sleep(0.2)


def run(launcher: PodmanLauncher, workload: Workload) -> tuple[Outcome, str]:
    recorder = RecordingHooks()
    assert launcher.launch(workload, recorder.hooks) == Outcome("running")
    assert recorder.started == 1
    outcome = finish(launcher, workload)
    return outcome, launcher.logs(workload) or ""



def pods_and_containers(workload: Workload) -> tuple[list[str], list[str]]:
    label = f"label={manifest.LABEL_TASK_ID}={workload.task_id}"
    pods = podman("pod", "ps", "--filter", label, "--format", "{{.Name}}").stdout.split()
    ctrs = podman("ps", "-a", "--filter", label, "--format", "{{.Names}}").stdout.split()
    return pods, ctrs


def test_runtime_adds_only_these(launcher: PodmanLauncher, make_workload):
    workload = make_workload([list(DUMP)])

    outcome, logs = run(launcher, workload)

    assert outcome == Outcome("succeeded", exit_code=0)
    [seen] = env_dumps(logs, 1)
    assert seen == runtime_added(workload)


def test_both_steps_see_exactly_the_resolved_env(launcher: PodmanLauncher, make_workload):
    env = {"TASK_ID": "t-1", "NCCL_DEBUG": "INFO", "LR": "0.1", **HOSTILE,
           "BIG": "x" * 100_000}
    workload = make_workload([list(DUMP), list(DUMP)], env=env)

    outcome, logs = run(launcher, workload)

    assert outcome == Outcome("succeeded", exit_code=0)
    for seen in env_dumps(logs, 2):
        assert seen == {**runtime_added(workload), **workload.env_dict()}
        for name, value in HOSTILE.items():
            assert seen[name] == value


def test_step_arguments_arrive_as_typed(launcher: PodmanLauncher, make_workload):
    args = ["$(HOME)", "$$(HOME)", "a;b", "`id`", "it's", "two words", "ünï"]
    workload = make_workload([["printf", "%s|", *args], ["printf", "%s|", "second"]],
                             env={"HOME": "/home/task"})

    outcome, logs = run(launcher, workload)

    assert outcome.state == "succeeded"
    assert logs == "|".join(args) + "|second|"


def test_failing_step_fails_with_its_exit_code(launcher: PodmanLauncher, make_workload):
    workload = make_workload([["sh", "-c", "echo before; echo oops >&2; exit 3"],
                              ["echo", "never"]])

    outcome, logs = run(launcher, workload)

    assert outcome.state == "failed" and outcome.exit_code == 3
    assert "3" in (outcome.reason or "")
    assert logs == "before\noops\n"


def test_launching_twice_leaves_one_pod_and_one_container(launcher: PodmanLauncher,
                                                          make_workload):
    workload = make_workload([["sleep", "2"]])
    first, second = RecordingHooks(), RecordingHooks()

    assert launcher.launch(workload, first.hooks).state == "running"
    assert launcher.launch(workload, second.hooks).state == "running"

    assert (first.started, second.started) == (1, 1)
    assert pods_and_containers(workload) == ([workload.run_name],
                                             [launcher.container_name(workload)])
    assert finish(launcher, workload).state == "succeeded"


def test_a_pod_left_unstarted_is_adopted_and_started(launcher: PodmanLauncher, make_workload,
                                                      tmp_path: Path):
    workload = make_workload([["echo", "hello"]])
    played = tmp_path / "pod.yaml"  # as if an earlier launch died between create and start
    played.write_text(launcher.render(workload, None))
    assert podman("kube", "play", "--start=false", str(played)).returncode == 0

    outcome, logs = run(launcher, workload)

    assert outcome.state == "succeeded" and logs == "hello\n"
    assert pods_and_containers(workload) == ([workload.run_name],
                                             [launcher.container_name(workload)])


def test_concurrent_launches_leave_one_container(launcher: PodmanLauncher, make_workload):
    workload = make_workload([["true"]])
    outcomes: list[Outcome | Exception] = []

    def launch() -> None:
        try:
            outcomes.append(launcher.launch(workload, RecordingHooks().hooks))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcomes.append(exc)

    threads = [threading.Thread(target=launch) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert outcomes == [Outcome("running")] * 3
    assert pods_and_containers(workload) == ([workload.run_name],
                                             [launcher.container_name(workload)])


class CountingLauncher(PodmanLauncher):
    """Real podman, noting each podman process it runs by its first two words."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.calls: list[str] = []

    def podman(self, *args: str, stdin: bytes | None = None,
               stderr: int = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
        self.calls.append(" ".join(args[:2]))
        return super().podman(*args, stdin=stdin, stderr=stderr)


def test_a_first_launch_plays_caps_and_starts_the_pod(make_workload):
    launcher = CountingLauncher(Settings())
    first, second = make_workload([["true"]]), make_workload([["true"]])

    launcher.launch(first, RecordingHooks().hooks)
    # The image: once per process.  The pod is played stopped, capped and started (kube
    # play takes no pids limit from a manifest); its cgroup is found by the id kube play
    # printed, without a podman process.
    assert launcher.calls == ["image exists", "kube play", "pod start"]
    launcher.calls.clear()
    launcher.launch(second, RecordingHooks().hooks)

    assert launcher.calls == ["kube play", "pod start"]
    assert finish(launcher, second).state == "succeeded"


def test_a_redelivered_launch_with_a_secret_adopts_the_pod_and_leaves_no_secret(
        make_workload):
    launcher = CountingLauncher(Settings())
    workload = make_workload([["sleep", "2"]], secrets={"API_TOKEN": "s3cr3t"})
    launcher.launch(workload, RecordingHooks().hooks)
    launcher.calls.clear()
    again = RecordingHooks()

    assert launcher.launch(workload, again.hooks) == Outcome("running")

    assert again.started == 1
    assert launcher.calls == ["secret create", "kube play", "secret rm", "pod exists",
                              "container inspect"]  # refused, found, running: left alone
    assert pods_and_containers(workload) == ([workload.run_name],
                                             [launcher.container_name(workload)])
    left = podman("secret", "ls", "--format", "{{.Name}}").stdout.split()
    assert not [s for s in left if s.startswith(manifest.secret_name(workload))]
    assert finish(launcher, workload).state == "succeeded"


@pytest.fixture
def doomed_image() -> Iterator[str]:
    """A second name for the runtime image, for a test to remove."""
    name = f"localhost/taskenv-doomed:{uuid.uuid4().hex[:8]}"
    assert podman("tag", DEFAULT_IMAGE, name).returncode == 0
    yield name
    podman("untag", DEFAULT_IMAGE, name)


def test_an_image_removed_after_it_was_found_still_fails_plainly(launcher: PodmanLauncher,
                                                                 make_workload,
                                                                 doomed_image: str):
    before = make_workload([["true"]], image=doomed_image)
    assert run(launcher, before)[0].state == "succeeded"
    assert podman("untag", DEFAULT_IMAGE, doomed_image).returncode == 0
    after = make_workload([["true"]], image=doomed_image)

    with pytest.raises(LaunchFailed, match="taskenv-doomed.* is not in podman's local store"):
        launcher.launch(after, RecordingHooks().hooks)

    assert pods_and_containers(after) == ([], [])


HEX_OF_TOKEN = "printf 'hex %s\\n' \"$(printf %s \"$API_TOKEN\" | od -An -tx1 | tr -d ' \\n')\""


class CapturingLauncher(PodmanLauncher):
    """Keeps what was on disk and in podman's secret store while ``kube play`` ran."""

    def play_file(self, path: Path) -> subprocess.CompletedProcess[str]:
        self.path = path
        self.mode = stat.S_IMODE(path.stat().st_mode)
        self.yaml = path.read_text()
        self.secrets_during_play = podman("secret", "ls", "--format", "{{.Name}}").stdout.split()
        return super().play_file(path)


def test_secret_reaches_the_container_but_no_file_or_pod_inspect(make_workload):
    value = "s3cr3t-$(HOME)-ü"
    workload = make_workload([list(DUMP), ["sh", "-c", HEX_OF_TOKEN]], env={"LR": "0.1"},
                             secrets={"API_TOKEN": value})
    launcher = CapturingLauncher(Settings())

    outcome, logs = run(launcher, workload)

    assert outcome.state == "succeeded"
    [seen] = env_dumps(logs.rsplit("\0", 1)[0] + "\0", 1)
    # The value as typed reached the step (its bytes in hex), and the log hides it.
    assert logs.rsplit("\0", 1)[1] == f"hex {value.encode().hex()}\n"
    assert seen == {**runtime_added(workload), "LR": "0.1", "API_TOKEN": "[secret]"}
    # The YAML handed to podman: private, gone afterwards, and only a reference.
    assert launcher.mode == 0o600 and not launcher.path.exists()
    assert value not in launcher.yaml
    assert base64.b64encode(value.encode()).decode() not in launcher.yaml
    assert "secretKeyRef" in launcher.yaml
    # The podman secret existed for the play only.
    prefix = manifest.secret_name(workload)
    assert [s for s in launcher.secrets_during_play if s.startswith(prefix)]
    left = podman("secret", "ls", "--format", "{{.Name}}").stdout.split()
    assert not [s for s in left if s.startswith(prefix)]
    # `podman pod inspect` shows no env.  (`podman inspect` of the container does, as
    # for every env value: the runtime's config holds it; see docs/launchers.md.)
    assert value not in podman("pod", "inspect", workload.run_name).stdout


def test_unknown_local_image_fails_permanently_and_leaves_nothing(launcher: PodmanLauncher,
                                                                  make_workload):
    workload = make_workload([["true"]], image="localhost/no-such-image:latest")

    with pytest.raises(LaunchFailed, match="no-such-image"):
        launcher.launch(workload, RecordingHooks().hooks)

    assert pods_and_containers(workload) == ([], [])
    assert launcher.observe(workload) is None and launcher.logs(workload) is None


def test_bad_manifest_fails_permanently_and_leaves_nothing(launcher: PodmanLauncher,
                                                           make_workload):
    workload = make_workload([["true"]], resources=Resources(memory="lots"))

    with pytest.raises(PermanentError, match="resources") as refused:
        launcher.launch(workload, RecordingHooks().hooks)
    assert [p.field for p in refused.value.problems] == ["resources.memory"]

    assert pods_and_containers(workload) == ([], [])


def test_container_that_cannot_start_is_removed(launcher: PodmanLauncher, make_workload):
    workload = make_workload([["true"]], workdir="/etc/passwd")  # not a directory

    with pytest.raises(LaunchFailed):
        launcher.launch(workload, RecordingHooks().hooks)

    assert pods_and_containers(workload) == ([], [])


def test_unknown_workload_has_no_outcome_and_no_logs(launcher: PodmanLauncher, make_workload):
    workload = make_workload([["true"]])

    assert launcher.observe(workload) is None
    assert launcher.logs(workload) is None


def fake_podman(tmp_path: Path, body: str) -> str:
    script = tmp_path / "podman"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_podman_not_answering_is_transient(tmp_path: Path, make_workload):
    launcher = PodmanLauncher(Settings(), binary=fake_podman(tmp_path, "exec sleep 10"),
                              timeout=0.3)

    with pytest.raises(TransientError, match="did not answer"):
        launcher.launch(make_workload([["true"]]), RecordingHooks().hooks)


def test_podman_busy_is_transient(tmp_path: Path, make_workload):
    body = 'echo "Error: database is locked" >&2; exit 125'
    launcher = PodmanLauncher(Settings(), binary=fake_podman(tmp_path, body))

    with pytest.raises(TransientError, match="database is locked"):
        launcher.observe(make_workload([["true"]]))


def test_podman_missing_fails_permanently(tmp_path: Path, make_workload):
    launcher = PodmanLauncher(Settings(), binary=str(tmp_path / "no-podman"))

    with pytest.raises(LaunchFailed, match="not installed"):
        launcher.launch(make_workload([["true"]]), RecordingHooks().hooks)


def test_settings_pick_the_podman_launcher_and_its_image(make_workload):
    launcher = make_launcher(Settings(launcher="podman", podman_image="localhost/other:1"))
    assert isinstance(launcher, PodmanLauncher)
    assert launcher.with_image(make_workload([["true"]])).image == "localhost/other:1"
    own = make_workload([["true"]], image="localhost/mine:2")
    assert launcher.with_image(own).image == "localhost/mine:2"
    assert DEFAULT_IMAGE == "localhost/taskenv-runtime:latest"


@pytest.mark.parametrize("value", ["$(A)", "$$(A)", "a$$b", "$", "x$", "$(", "$(A", "$x",
                                   "$$$(A)", "", "no dollars"])
def test_expand_inverts_the_manifest_escape(value: str):
    assert manifest.kube_expand(manifest.escape(value), {"A": "expanded"}.get) == value


def test_expand_follows_kubernetes():
    known = {"A": "1"}.get
    assert manifest.kube_expand("$(A)-$(B)-$$(A)-$$-$x-$", known) == "1-$(B)-$(A)-$-$x-$"


# --- cancel ------------------------------------------------------------------------------

def test_cancel_stops_and_removes_the_pod(launcher: PodmanLauncher, make_workload):
    workload = make_workload([["sleep", "60"]])
    assert launcher.launch(workload, RecordingHooks().hooks) == Outcome("running")
    assert launcher.observe(workload) == Outcome("running")
    started = time.monotonic()
    launcher.cancel(workload)
    assert time.monotonic() - started < 30
    assert pods_and_containers(workload) == ([], [])
    assert launcher.observe(workload) is None
    launcher.cancel(workload)  # nothing left: quietly nothing


def test_the_step_runs_unprivileged_within_its_limits(launcher: PodmanLauncher, make_workload):
    probe = ("id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; "
             "cat /sys/fs/cgroup/memory.max 2>/dev/null || "
             "cat /sys/fs/cgroup/memory/memory.limit_in_bytes; "
             "echo x > /work/written && echo WORK-WRITABLE")
    workload = make_workload([["sh", "-c", probe]],
                             resources=Resources(cpu="500m", memory="64Mi"))
    outcome, logs = run(launcher, workload)
    lines = logs.splitlines()
    # Never root, whatever the image says: the pod's own uid from the host's pool.
    assert lines[0] == str(launcher.uids.held()[workload.run_name])
    first, count = Settings().task_uid_first, Settings().task_uid_count
    assert first <= int(lines[0]) < first + count  # the deployment's task uid range
    assert "CapEff:\t0000000000000000" in lines and "NoNewPrivs:\t1" in lines
    assert str(64 << 20) in lines  # resources.memory is the container's limit
    assert "WORK-WRITABLE" in lines and outcome.state == "succeeded"
    # (Podman 4.3 plays an emptyDir as a volume on disk, whatever its medium and
    # sizeLimit: /work and /tmp are not size-capped here, as they are on Kubernetes.)


def test_a_container_s_log_file_on_the_host_stays_within_its_cap(make_workload):
    """A step printing far more than the log keeps fills no disk: conmon truncates the
    container's log file past ``log_file_max`` (64 times the budget read of it)."""
    launcher = PodmanLauncher(Settings(log_max_bytes=RESERVED + 1024))
    assert launcher.log_file_max == 64 * 1024
    printed = 6 * launcher.log_file_max
    workload = make_workload([["sh", "-c", f"head -c {printed} /dev/zero | tr '\\0' y; "
                                           "echo; echo THE-END"]])
    outcome, logs = run(launcher, workload)
    assert outcome.state == "succeeded"
    path = podman("inspect", "--format", "{{.LogPath}}",
                  launcher.container_name(workload, 0)).stdout.strip()
    assert 0 < Path(path).stat().st_size <= launcher.log_file_max, path
    assert "output cut" in logs and len(logs) < 4096  # the budget of what the file kept


def test_a_huge_log_is_read_up_to_the_budget_and_says_so(launcher: PodmanLauncher,
                                                         make_workload):
    workload = make_workload([["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x; echo END"]])
    outcome, logs = run(launcher, workload)
    assert outcome.state == "succeeded"
    assert len(logs.encode()) < TaskStore.LOG_LIMIT
    assert logs.startswith("x" * 1000) and "output cut" in logs and "END" not in logs
