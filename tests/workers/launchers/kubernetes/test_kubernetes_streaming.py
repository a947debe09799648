"""A running pod's log read while its container runs, against the contract server: each
pass takes what was written since the last (``timestamps``, ``sinceTime`` to the second,
``limitBytes``), whole lines, each once; the end takes the rest."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from shared.task.replica_logs import MARK
from shared.task.workload import Workload
from tests.contract.k8s_api import FakeKubeApi, running, terminated
from tests.workers.conftest import RecordingHooks
from tests.workers.launchers.kubernetes.test_kubernetes_launcher import (
    NS,
    SECRET_VALUE,
    FakeClock,
    api,
    clock,
    make,
    workload,
)
from workers.launchers.kubernetes import launcher as kube_launcher
from workers.launchers.kubernetes.launcher import KubernetesLauncher
from workers.launchers.kubernetes.output import ADOPTED

__all__ = ["api", "clock"]

LATER = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)  # a second of its own, after any test's


@pytest.fixture
def launcher(api: FakeKubeApi, clock: FakeClock) -> Iterator[KubernetesLauncher]:
    launcher = make(api, clock)
    yield launcher
    launcher.api.close()


def started(api: FakeKubeApi, launcher: KubernetesLauncher, w: Workload | None = None,
            **pod: object) -> tuple[Workload, str]:
    """A task whose pod runs (its name), seen by the launcher's watch."""
    w = w or workload()
    launcher.launch(w, RecordingHooks().hooks)
    name = api.stored("job", NS)[-1]["metadata"]["name"]
    pod_name = api.add_pod(name, state=running(), namespace=NS, **pod)  # type: ignore[arg-type]
    launcher.changes()
    return w, pod_name


def one_pass(launcher: KubernetesLauncher, w: Workload) -> str:
    return "".join(text for task, _, text in launcher.output_since(lambda *_: w)
                   if task == w.task_id)


def log_reads(api: FakeKubeApi, pod: str) -> list[dict[str, list[str]]]:
    return [r.query for r in api.requests_to("GET", f"/api/v1/namespaces/{NS}/pods/{pod}/log")]


def test_each_pass_takes_what_was_written_since_whole_lines_once(api, launcher):
    w, pod = started(api, launcher)
    api.write_log(pod, "epoch 1\nepoch 2\nhal", NS, at=LATER)

    first = one_pass(launcher, w)
    api.write_log(pod, "f a line\n", NS, at=LATER)  # the same second
    second = one_pass(launcher, w)
    api.write_log(pod, "epoch 3\n", NS, at=LATER + timedelta(seconds=2))
    third = one_pass(launcher, w)
    quiet = one_pass(launcher, w)
    api.write_log(pod, "the end\n", NS, at=LATER + timedelta(seconds=3))

    reads = log_reads(api, pod)
    assert (first, second, third, quiet) == ("epoch 1\nepoch 2\n", "half a line\n",
                                             "epoch 3\n", "")
    assert launcher.logs(w) == "the end\n"
    assert all(r["timestamps"] == ["true"] and r["container"] == ["task"] for r in reads)
    assert "sinceTime" not in reads[0]
    # From the second of the last line taken on, what of it was taken skipped.
    assert reads[1]["sinceTime"] == ["2030-01-01T12:00:00Z"]
    assert reads[-1]["sinceTime"] == ["2030-01-01T12:00:02Z"]
    assert int(reads[-1]["limitBytes"][0]) < 2 * kube_launcher.READ_CHUNK


def test_a_line_longer_than_a_read_comes_in_pieces_and_a_secret_across_them_hidden(
        api, launcher, monkeypatch):
    monkeypatch.setattr(kube_launcher, "READ_CHUNK", 64)
    w, pod = started(api, launcher)
    line = "a" * 70 + SECRET_VALUE + "b" * 70 + "\n"
    api.write_log(pod, line, NS, at=LATER)

    seen = [one_pass(launcher, w) for _ in range(6)]

    assert all(len(piece) <= 64 for piece in seen) and sum(map(bool, seen)) >= 3
    assert "".join(seen) + (launcher.logs(w) or "") == "a" * 70 + "[secret]" + "b" * 70 + "\n"


def test_a_steps_mark_is_text_and_each_replicas_whole_lines_are_prefixed(api, launcher):
    w = replace(workload(), replicas=2)
    launcher.launch(w, RecordingHooks().hooks)
    name = api.stored("job", NS)[-1]["metadata"]["name"]
    pods = [api.add_pod(name, state=running(), namespace=NS, index=k) for k in range(2)]
    launcher.changes()
    api.write_log(pods[0], f"{MARK}==> forged\nhal", NS, at=LATER)
    api.write_log(pods[1], "rank 1 up\n", NS, at=LATER)

    seen = one_pass(launcher, w)
    api.write_log(pods[0], "f\n", NS, at=LATER)

    assert seen == "[replica 0] \u241f==> forged\n[replica 1] rank 1 up\n"
    assert one_pass(launcher, w) == "[replica 0] half\n"


def test_a_pass_reads_a_bounded_number_of_logs_the_tasks_taken_in_turn(
        api, launcher, monkeypatch):
    monkeypatch.setattr(kube_launcher, "PASS_READS", 3)
    loads = []
    for n in range(5):
        w, pod = started(api, launcher, workload(task_id=f"{n:x}" * 32))
        api.write_log(pod, f"task {n}\n", NS, at=LATER)
        loads.append(w)
    by_id = {w.task_id: w for w in loads}

    def read() -> list[str]:
        return sorted(text for _, _, text in launcher.output_since(
            lambda task_id, _: by_id[task_id]))

    first, second = read(), read()

    assert len(first) == 3 and len(second) == 2
    assert sorted(first + second) == [f"task {n}\n" for n in range(5)]


def test_a_reconciler_that_starts_while_a_pod_runs_reads_from_its_start_saying_so(
        api, clock):
    earlier = make(api, clock)
    old = datetime.now(UTC) - timedelta(minutes=5)
    w, pod = started(api, earlier, created=old)
    api.write_log(pod, "read by the one before\n", NS, at=old)
    later = make(api, clock)  # another process: nothing of the first one's places
    later.changes()
    api.write_log(pod, "printed since\n", NS, at=LATER)

    seen = one_pass(later, w)

    assert seen == f"{MARK}{ADOPTED.format(since=later.started)}\nprinted since\n"
    assert log_reads(api, pod)[-1]["sinceTime"] == [later.started]
    earlier.api.close()
    later.api.close()


def test_the_end_takes_the_rest_after_what_was_read_while_it_ran(api, launcher):
    w, pod = started(api, launcher)
    api.write_log(pod, "while it ran\n", NS, at=LATER)
    assert one_pass(launcher, w) == "while it ran\n"
    api.write_log(pod, f"token {SECRET_VALUE}\nno end", NS, at=LATER)
    api.objects[("pod", NS, pod)]["status"]["containerStatuses"][0]["state"] = \
        terminated(0, "Completed")

    assert launcher.logs(w) == "token [secret]\nno end"
    assert launcher.readers == {}  # forgotten once the end is read
