"""PyTorch's own rendezvous on the local launcher, through the whole stack: DDP (gloo, CPU)
and torchrun with no flags, from the variables taskenv sets and nothing else.  The tasks
are examples/distributed's ddp.yaml and torchrun.yaml, submitted by the CLI once and
otherwise as the request body it makes of them.

The steps run the host's python3 in their sandboxes, so torch must be installed for it
(make test does); without it these tests fail (the ``host_torch`` fixture says how to
install it), they never skip.  A task whose image names a runtime directory runs that
tree's python3 instead: the tree `make pytorch-image` leaves, and one built from the host.
examples/distributed/ddp.py checks the gradients itself and exits 3 on a mismatch; the
tests read what each process printed.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli import taskfile
from tests.integration.conftest import Stack, running_stack
from tests.support.runtimes import MARKER, host_overlay_runtime, public_dir
from workers.localstack import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.torch,
              pytest.mark.usefixtures("host_torch")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/distributed"
# What ddp.py prints once it has joined, and once its checks have passed.
JOINED = re.compile(r"rank (\d+) of (\d+): RANK=(\d+) WORLD_SIZE=(\d+) LOCAL_RANK=(\S+) "
                    r"LEARNING_RATE=(\S+) DATA_DIR=(\S+)")
PASSED = re.compile(r"rank (\d+) of (\d+): OK 5 steps, .* gradients averaged over (\d+) ranks, "
                    r"weights equal on every rank \(checksum (\S+)\)")
TIMEOUT = 240  # torch's import takes seconds per process on a busy machine
# The image ddp-image.yaml names, registered as a runtime directory: the tree
# `make pytorch-image` leaves (Debian's python3 and torch of its own, marked with its name).
RUNTIME = "localhost/taskenv-pytorch:2.13"
RUNTIME_TREE = ROOT / "var/image/taskenv-pytorch-2.13"
# The host's /usr (its torch) under an overlay that marks it: a runtime built from the host.
HOST_RUNTIME = "host-usr"
# What a step prints of the Python that runs it: the runtime's marker at its prefix.
WHERE = ("import sys, torch; print('RUNTIME', open(sys.prefix + '/"
         + MARKER.removeprefix("usr/") + "').read().strip(), sys.executable, torch.__version__)")


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Stack]:
    """The stack, with both runtime directories registered (a task naming no image runs
    the host's own /usr, as before).  The PyTorch tree is built when missing (minutes the
    first time, as make test does; a label check after)."""
    subprocess.run([str(ROOT / "deploy/image/build-pytorch.sh")], check=True, timeout=1800)
    with public_dir("taskenv-rt-") as base, \
            host_overlay_runtime(base / "host", HOST_RUNTIME) as host, \
            running_stack(redis_server, tmp_path_factory.mktemp("stack"),
                          TASKENV_RUNTIMES=f"{RUNTIME}={RUNTIME_TREE},{HOST_RUNTIME}={host}"
                          ) as running:
        yield running


def example(name: str, **change: object) -> dict[str, Any]:
    """The example task file's request body, its files read, as ``taskenv submit`` sends it."""
    return {**taskfile.body(EXAMPLE / name, None), **change}


def replica_log(stack: Stack, task_id: str, replica: int | None = None) -> str:
    query = "" if replica is None else f"?replica={replica}"
    return stack.call("GET", f"/api/v1/tasks/{task_id}/logs{query}").text


def joined(text: str) -> list[tuple[str, ...]]:
    """(rank, world, RANK, WORLD_SIZE, LOCAL_RANK, LEARNING_RATE, DATA_DIR) per process."""
    return [m.groups() for m in JOINED.finditer(text)]


def checksums(text: str, world: int) -> set[str]:
    """The weights' checksum each process printed once its checks passed."""
    found = [m.groups() for m in PASSED.finditer(text)]
    assert all(g[1] == g[2] == str(world) for g in found), found
    return {g[3] for g in found}


def test_the_ddp_example_at_two_replicas_through_the_cli_averages_the_gradients(
        stack: Stack) -> None:
    from tests.integration.test_cli import taskenv
    user = stack.new_token("torch-cli")
    submitted = taskenv(stack, user, "submit", str(EXAMPLE / "ddp.yaml"), "--replicas", "2",
                        "--follow")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    out = submitted.stdout
    assert sorted(joined(out)) == [
        (str(k), "2", str(k), "2", "unset", "0.1", "/data/regression") for k in range(2)], out
    assert len(checksums(out, 2)) == 1, out  # one set of weights on both replicas
    for k in range(2):
        assert f"[replica {k}] rank {k} of 2: OK 5 steps" in out, out
    assert "MISMATCH" not in out, out


def test_a_world_of_one_runs_the_same_script_unchanged(stack: Stack) -> None:
    task = stack.create(example("ddp.yaml", replicas=1))
    done = stack.wait(task["id"], timeout=TIMEOUT)
    logs = replica_log(stack, task["id"])
    assert done["status"] == "succeeded", (done, logs)
    assert joined(logs) == [("0", "1", "0", "1", "unset", "0.1", "/data/regression")], logs
    assert len(checksums(logs, 1)) == 1, logs


def test_torchrun_with_no_flags_makes_a_world_of_four_from_the_pet_variables(
        stack: Stack) -> None:
    task = stack.create(example("torchrun.yaml"))
    done = stack.wait(task["id"], timeout=TIMEOUT)
    assert (done.get("replicas"), done.get("procs_per_replica")) == (2, 2), done
    logs = replica_log(stack, task["id"])
    assert (done["status"], done["replica_exit_codes"]) == ("succeeded", [0, 0]), (done, logs)
    ranks = []
    for k in range(2):
        text = replica_log(stack, task["id"], k)
        own = joined(text)
        assert sorted(p[4] for p in own) == ["0", "1"], (text, logs)  # LOCAL_RANK 0, 1 in each
        assert all(p[1] == p[3] == "4" and p[0] == p[2] for p in own), own
        assert all(p[5:] == ("0.1", "/data/regression") for p in own), own
        ranks += [int(p[0]) for p in own]
    assert sorted(ranks) == [0, 1, 2, 3], logs
    assert len(checksums(logs, 4)) == 1 and len(PASSED.findall(logs)) == 4, logs


def test_the_ddp_example_runs_in_the_runtime_its_image_names(stack: Stack) -> None:
    """ddp-image.yaml, whose ``image`` names the registered PyTorch tree: each replica's
    python3 and torch are the tree's (its marker is at the python's prefix), DDP as above."""
    body = example("ddp-image.yaml")
    assert body["image"] == RUNTIME
    body["steps"] = [["python3", "-c", WHERE], *body["steps"]]
    task = stack.create(body)
    done = stack.wait(task["id"], timeout=TIMEOUT)
    logs = replica_log(stack, task["id"])
    assert done["status"] == "succeeded", (done, logs)
    for k in range(2):
        assert f"RUNTIME {RUNTIME} /usr/bin/python3 2.13.0" in replica_log(stack, task["id"], k)
    assert len(checksums(logs, 2)) == 1 and len(PASSED.findall(logs)) == 2, logs


def test_a_runtime_built_from_the_host_is_the_one_a_step_runs(stack: Stack) -> None:
    """The host's /usr under a marking overlay: the step's python3 reads that runtime's
    marker, and a task naming no image reads none (the host's own /usr)."""
    named = stack.create(example("ddp.yaml", image=HOST_RUNTIME, replicas=1,
                                 steps=[["python3", "-c", WHERE]]))
    plain = stack.create(example("ddp.yaml", replicas=1, steps=[["python3", "-c", WHERE]]))
    done = stack.wait(named["id"], timeout=TIMEOUT)
    assert done["status"] == "succeeded", (done, replica_log(stack, named["id"]))
    assert f"RUNTIME {HOST_RUNTIME} /usr/bin/python3 2.13.0" in replica_log(stack, named["id"])
    failed = stack.wait(plain["id"], timeout=TIMEOUT)
    assert failed["status"] == "failed", failed
    assert "FileNotFoundError" in replica_log(stack, plain["id"])
