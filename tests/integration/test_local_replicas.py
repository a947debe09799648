"""Distributed tasks on the local launcher, through the whole stack as a user drives it:
replicas are sandboxed processes sharing one network namespace private to the task."""

from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.integration.conftest import Stack

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]

ROOT = Path(__file__).resolve().parents[2]
RENDEZVOUS = (ROOT / "examples/distributed/rendezvous.py").read_text()
PROBE = """
import os, socket, sys
for host in sys.argv[1:]:
    try:
        socket.create_connection((host, int(os.environ["PROBE_PORT"])), timeout=2).close()
        print(f"replica {os.environ['RANK']}: REACHED {host}", flush=True)
    except OSError as exc:
        print(f"replica {os.environ['RANK']}: no way to {host} ({type(exc).__name__})", flush=True)
"""


def host_address() -> str:
    """An address of this machine that is not loopback (the route a packet out would take)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))  # UDP: nothing is sent
            return str(sock.getsockname()[0])
        except OSError:
            return "127.0.0.2"


def unique_seconds() -> str:
    """A sleep duration no other process has: it marks this test's processes."""
    return f"{100 + random.random() * 50:.6f}"


def processes_with(marker: str) -> list[int]:
    """Pids whose command line holds ``marker`` (a sleep's unusual duration)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return [pid for pid in found if pid != os.getpid()]


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_three_replicas_rendezvous_through_the_injected_variables(stack: Stack) -> None:
    user = stack.new_token("lena")
    task = stack.call("POST", "/api/v1/tasks", token=user, json={
        "name": "ddp", "replicas": 3, "steps": [["python3", "-c", RENDEZVOUS]]}).json()
    done = stack.wait(task["id"], timeout=60)
    assert (done["status"], done["replica_exit_codes"]) == ("succeeded", [0, 0, 0]), done
    # Each replica's first step started with the resolved env: one digest, nothing added.
    received = done["received"]
    assert (received["same"], received["added"], received["warnings"]) == (True, [], []), done
    assert [r["replica"] for r in received["replicas"]] == [0]
    for k in range(3):
        own = stack.call("GET", f"/api/v1/tasks/{task['id']}/logs?replica={k}", token=user).text
        assert f"rank {k} of 3: sum of ranks 3 (want 3)" in own, own


def test_a_replica_reaches_neither_redis_on_loopback_nor_the_host(stack: Stack) -> None:
    port = urlsplit(stack.env["TASKENV_REDIS_URL"]).port or 6379
    task = stack.create({"name": "probe", "replicas": 2, "env": [
        {"name": "PROBE_PORT", "value": str(port)}],
        "steps": [["python3", "-c", PROBE, "127.0.0.1", host_address()]]})
    done = stack.wait(task["id"], timeout=60)
    logs = stack.call("GET", f"/api/v1/tasks/{task['id']}/logs").text
    assert done["status"] == "succeeded", logs
    assert "REACHED" not in logs
    assert logs.count("no way to") == 4, logs


def test_one_failing_replica_fails_the_task_within_seconds_and_nothing_is_left(
        stack: Stack) -> None:
    marker = unique_seconds()
    step = ["sh", "-c", f'if [ "$RANK" = 1 ]; then sleep 1; exit 3; fi; exec sleep {marker}']
    task = stack.create({"name": "ddp", "replicas": 3, "steps": [step]})
    wait_for(lambda: len(processes_with(marker)) >= 2, 30, "replicas 0 and 2 sleeping")
    started = time.monotonic()
    done = stack.wait(task["id"], timeout=30)
    assert time.monotonic() - started < 10
    assert (done["status"], done["exit_code"]) == ("failed", 3)
    assert done["reason"].startswith("replica 1 of 3 failed"), done["reason"]
    assert done["replica_exit_codes"][1] == 3
    wait_for(lambda: processes_with(marker) == [], 10, "every replica gone")


def test_cancel_of_three_replicas_leaves_nothing_running(stack: Stack) -> None:
    marker = unique_seconds()
    task = stack.create({"name": "ddp", "replicas": 3, "steps": [["sleep", marker]]})
    wait_for(lambda: len(processes_with(marker)) >= 3, 30, "3 replicas sleeping")
    assert stack.call("POST", f"/api/v1/tasks/{task['id']}/cancel").status_code == 202
    wait_for(lambda: processes_with(marker) == [], 15, "every replica gone")
    assert stack.wait(task["id"])["status"] == "cancelled"


def test_a_restart_reaches_every_replica(stack: Stack) -> None:
    marker = unique_seconds()
    step = ["sh", "-c", f'echo "LR=$LR RANK=$RANK"; exec sleep {marker}']
    task = stack.create({"name": "ddp", "replicas": 2, "steps": [step],
                         "env": [{"name": "LR", "value": "0.1"}]})
    wait_for(lambda: stack.task(task["id"])["status"] == "running", 30, "running")
    wait_for(lambda: len(processes_with(marker)) >= 2, 30, "2 replicas sleeping")
    time.sleep(0.5)
    one_generation = len(processes_with(marker))  # each replica's bwrap and sleep
    answer = stack.call("PATCH", f"/api/v1/tasks/{task['id']}/env",
                        json={"set": [{"name": "LR", "value": "0.2"}]})
    assert answer.status_code == 202, answer.text

    def both_printed() -> bool:
        text = stack.call("GET", f"/api/v1/tasks/{task['id']}/logs?revision=2").text
        return all(f"[replica {k}] LR=0.2 RANK={k}" in text for k in range(2))

    wait_for(both_printed, 60, "revision 2 printed in both replicas")
    assert len(processes_with(marker)) == one_generation  # the first one is gone
    stack.call("POST", f"/api/v1/tasks/{task['id']}/cancel")
    wait_for(lambda: processes_with(marker) == [], 15, "stopped")


def test_each_replicas_output_is_redacted_in_every_log_view(stack: Stack) -> None:
    secret = "tok-" + "9f3a1c7e5b2d4068"
    step = ["sh", "-c", 'printf "rank %s has %s\\n" "$RANK" "$HF_TOKEN"']
    task = stack.create({"name": "ddp", "replicas": 2, "steps": [step], "env": [
        {"name": "HF_TOKEN", "value": secret, "secret": True}]})
    assert stack.wait(task["id"], timeout=60)["status"] == "succeeded"
    views = [stack.call("GET", f"/api/v1/tasks/{task['id']}/logs{q}").text
             for q in ("", "?replica=0", "?replica=1")]
    assert "[replica 1] rank 1 has [secret]" in views[0]
    # The platform's own line keeps its mark (shared/task/replica_logs.py).
    assert views[1:] == [f"\x1f==> step 1/1: sh\nrank {k} has [secret]\n" for k in range(2)]
    assert all(secret not in view for view in views)


def test_every_replica_is_held_like_any_step_as_an_unprivileged_user(stack: Stack) -> None:
    step = ["sh", "-c", 'echo "uid=$(id -u)"']
    task = stack.create({"name": "ddp", "replicas": 2, "steps": [step]})
    assert stack.wait(task["id"], timeout=60)["status"] == "succeeded"
    for k in range(2):
        own = stack.call("GET", f"/api/v1/tasks/{task['id']}/logs?replica={k}").text
        assert "uid=" in own and "uid=0\n" not in own, own


def test_the_distributed_example_runs_through_the_cli_on_the_default_launcher(
        stack: Stack) -> None:
    from tests.integration.test_cli import taskenv
    user = stack.new_token("rhea")
    example = str(ROOT / "examples/distributed/task.yaml")
    submitted = taskenv(stack, user, "submit", example, "--replicas", "3", "--follow")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    for k in range(3):
        assert f"[replica {k}] rank {k} of 3: sum of ranks 3 (want 3)" in submitted.stdout
    task_id = submitted.stderr.split("task ", 1)[1].split()[0]
    one = taskenv(stack, user, "logs", task_id, "--replica", "1")
    assert "rank 1 of 3: sum of ranks 3 (want 3)\n" in one.stdout, one
    assert "rank 0" not in one.stdout and "rank 2" not in one.stdout, one
