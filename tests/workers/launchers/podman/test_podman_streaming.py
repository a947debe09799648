"""A running container's output, read by the launcher from its log file while the step runs:
real pods whose steps print, then wait for a file the test creates (``podman exec``), so
what was read before the step could go on is known to have been read while it ran."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from shared.config import Settings
from shared.task.workload import Workload
from tests.support.podman import podman
from tests.workers.conftest import RecordingHooks
from tests.workers.launchers.podman.test_podman_launcher import image, launcher, make_workload
from tests.workers.launchers.podman.test_podman_replicas import until_final
from workers.launchers.base import Outcome
from workers.launchers.podman.launcher import PodmanLauncher

pytestmark = [pytest.mark.integration, pytest.mark.podman]
__all__ = ["image", "launcher", "make_workload"]

WAIT = "while [ ! -e /tmp/release ]; do sleep 0.1; done"
SECRET = "hunter2-xyz"


def read_until(launcher: PodmanLauncher, workload: Workload, *wanted: str,
               timeout: float = 60) -> str:
    """Passes of the reconciler's (a listing, then the output read) until each of ``wanted``
    came."""
    seen = ""
    deadline = time.monotonic() + timeout
    while not all(w in seen for w in wanted):
        assert time.monotonic() < deadline, f"{wanted!r} never came: {seen!r}"
        launcher.changes()
        seen += "".join(text for task, _, text in launcher.output_since(lambda *_: workload)
                        if task == workload.task_id)
        time.sleep(0.2)
    return seen


def release(launcher: PodmanLauncher, workload: Workload) -> None:
    """The file the steps wait for, made in the pod's /tmp (every replica's)."""
    done = podman("exec", launcher.container_name(workload), "touch", "/tmp/release")
    assert done.returncode == 0, done.stderr


def test_a_running_steps_output_is_read_while_it_runs_once_and_redacted_across_reads(
        launcher: PodmanLauncher, make_workload: Callable[..., Workload]) -> None:
    workload = make_workload(
        [["sh", "-c", f"echo first line; printf 'token=hunter'; {WAIT}; echo '2-xyz'; "
                      "echo last line"]], secrets={"TOKEN": SECRET})
    launcher.launch(workload, RecordingHooks().hooks)

    while_running = read_until(launcher, workload, "first line\n")
    assert launcher.observe(workload) == Outcome("running")  # the step waits for the file
    release(launcher, workload)
    assert until_final(launcher)[-1] == Outcome("succeeded", exit_code=0)
    rest = launcher.logs(workload) or ""

    assert while_running.startswith("first line\n") and "hunter" not in while_running
    assert while_running + rest == "first line\ntoken=[secret]\nlast line\n"


def test_a_reconciler_that_restarts_goes_on_where_the_last_one_stopped(
        make_workload: Callable[..., Workload]) -> None:
    workload = make_workload([["sh", "-c", f"echo one; {WAIT}; echo two"]])
    first = PodmanLauncher(Settings())
    first.launch(workload, RecordingHooks().hooks)
    assert read_until(first, workload, "one\n") == "one\n"

    again = PodmanLauncher(Settings())  # another process: only what the files kept
    again.changes()
    assert again.output_since(lambda *_: workload) == []
    release(again, workload)
    until_final(again)

    assert again.logs(workload) == "two\n"  # what it read at the end: the rest alone
    assert not list(again.places.root.glob(f"{workload.run_name}-*"))  # forgotten at the end


def test_each_replicas_whole_lines_are_read_while_they_run_prefixed(
        launcher: PodmanLauncher, make_workload: Callable[..., Workload]) -> None:
    workload = make_workload([["sh", "-c", f'echo "rank $RANK up"; printf part; {WAIT}; '
                                           'echo " done"']], replicas=2)
    launcher.launch(workload, RecordingHooks().hooks)

    while_running = read_until(launcher, workload, "[replica 0] rank 0 up\n",
                               "[replica 1] rank 1 up\n")
    release(launcher, workload)  # /tmp is the pod's: both replicas go on
    assert until_final(launcher)[-1].state == "succeeded"
    seen = while_running + (launcher.logs(workload) or "")

    assert "part" not in while_running  # a line is read whole, never half
    assert sorted(seen.splitlines()) == ["[replica 0] part done", "[replica 0] rank 0 up",
                                         "[replica 1] part done", "[replica 1] rank 1 up"]
