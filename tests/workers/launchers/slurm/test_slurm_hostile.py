"""The Slurm launcher tried as a hostile tenant would, on the real one-node test cluster
(tests/support/slurm.py): no code of a task runs outside its sandbox, nothing of it is left
on the host, its replicas meet on a network no other task shares, its limits hold whatever
the cluster's cgroups, and its output is never read as Slurm's own words."""

from __future__ import annotations

import base64
import dataclasses
import os
import socket
import stat
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.config import Settings
from shared.policy.model import Resolved
from shared.task.files import TaskFile
from shared.task.workload import Workload
from tests.support.slurm import SlurmCluster
from tests.workers.conftest import RecordingHooks, build_workload
from tests.workers.launchers.slurm.test_slurm_launcher import STREAMED, output
from tests.workers.launchers.slurm.test_slurm_launcher import finish as finish_job
from workers.launchers.base import Outcome
from workers.launchers.slurm.launcher import SlurmLauncher

pytestmark = pytest.mark.slurm


@pytest.fixture
def launcher(slurm_cluster: SlurmCluster, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> SlurmLauncher:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    return SlurmLauncher(Settings(slurm_dir=str(tmp_path / "slurm"), step_timeout_seconds=120,
                                  task_max_processes=64, task_max_open_files=256,
                                  task_max_file_size="8Mi"))


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """A host path only code running outside the sandbox can write (the sandbox has no such
    directory): its existence after a job is code of the task run on the host."""
    return tmp_path / "outside" / "PWNED"


def finish(launcher: SlurmLauncher, workload: Workload, timeout: float = 90.0) -> Outcome:
    """As the launcher's own tests wait, a little longer: these jobs start more."""
    return finish_job(launcher, workload, timeout)


def run(launcher: SlurmLauncher, workload: Workload) -> tuple[Outcome, str]:
    launcher.launch(workload, RecordingHooks().hooks)
    ended = finish(launcher, workload)
    return ended, output(launcher, workload)


def printed(launcher: SlurmLauncher, workload: Workload, text: str,
            timeout: float = 60.0) -> None:
    """Wait until a running job has printed ``text`` (what it streamed stays for
    :func:`output`)."""
    key = (workload.task_id, workload.revision)
    deadline = time.monotonic() + timeout
    while True:
        launcher.changes()  # a pass lists the jobs whose output it reads
        for task_id, revision, chunk in launcher.new_output():
            STREAMED[(task_id, revision)] = STREAMED.get((task_id, revision), "") + chunk
        if text in STREAMED.get(key, ""):
            return
        assert time.monotonic() < deadline, f"{workload.run_name} never printed {text!r}"
        time.sleep(0.2)


def writer(marker: Path) -> str:
    """Python that, wherever it runs, leaves the marker if it can reach its directory."""
    return (f"import os\ntry:\n    os.makedirs({str(marker.parent)!r}, exist_ok=True)\n"
            f"    open({str(marker)!r}, 'a').write('ran as %d in %s\\n' % (os.getpid(), "
            "os.getcwd()))\nexcept OSError:\n    pass\n")


PROBE = ["python3", "-c", "import os; print('HOME in step', os.environ.get('HOME'))"]


def test_pythonpath_and_sitecustomize_run_no_code_outside_the_sandbox(
        launcher: SlurmLauncher, marker: Path) -> None:
    files = (TaskFile("sitecustomize.py", writer(marker)),)
    workload = build_workload([PROBE], env={"PYTHONPATH": "home"}, files=files)
    ended, text = run(launcher, workload)
    assert ended == Outcome("succeeded", exit_code=0), text
    assert not marker.exists(), marker.read_text()


def test_home_with_a_pth_file_runs_no_code_outside_the_sandbox(
        launcher: SlurmLauncher, marker: Path) -> None:
    pth = "import os; exec(" + repr(writer(marker)) + ")\n"
    files = (TaskFile(".local/lib/python3.11/site-packages/evil.pth", pth),)
    workload = build_workload([PROBE], env={"HOME": "home"}, files=files)
    ended, text = run(launcher, workload)
    assert ended == Outcome("succeeded", exit_code=0), text
    assert not marker.exists(), marker.read_text()


def test_a_project_default_home_the_maintainer_can_write_is_harmless(
        launcher: SlurmLauncher, tmp_path: Path, marker: Path) -> None:
    """A maintainer's project default HOME at a directory they can write, holding a .pth
    that prints what it can read: nothing outside the sandbox reads it, and inside the
    sandbox that directory is not there (only the task's own home is)."""
    planted = tmp_path / "maintainer"
    site = planted / ".local/lib/python3.11/site-packages"
    site.mkdir(parents=True)
    secret = "hf_member-secret-0b7f3e"
    leak = writer(marker) + "print('LEAK', os.environ.get('HF_TOKEN'))\n"
    (site / "evil.pth").write_text("import os; exec(" + repr(leak) + ")\n")
    planted.chmod(0o777)
    workload = build_workload([PROBE, ["sh", "-c", f"ls {planted} && echo SEEN || true"]],
                              secrets={"HF_TOKEN": secret})
    workload = dataclasses.replace(workload, env=(*workload.env, Resolved(
        "HOME", str(planted), "default", scope="project:ml", policy_version=1)))
    ended, text = run(launcher, workload)
    assert ended == Outcome("succeeded", exit_code=0), text
    assert f"HOME in step {planted}" in text
    assert "LEAK" not in text and "SEEN" not in text and secret not in text
    assert not marker.exists(), marker.read_text()


EVIL_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) {
    int fd = open(MARKER, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) { dprintf(fd, "preloaded into pid %d\n", getpid()); close(fd); }
}
"""


def test_ld_preload_of_a_library_an_earlier_step_wrote_reaches_no_process_outside(
        launcher: SlurmLauncher, marker: Path, tmp_path: Path) -> None:
    marker.parent.mkdir(parents=True)
    source = tmp_path / "evil.c"
    source.write_text(EVIL_C)
    library = tmp_path / "libevil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(library),
                    str(source)], check=True)
    encoded = base64.b64encode(library.read_bytes()).decode()
    write_lib = ["python3", "-c", "import base64, sys; open('libevil.so', 'wb')"
                 f".write(base64.b64decode('{encoded}'))"]
    # Step 1 writes the library into the home; steps 2 and 3 have it preloaded, by a path
    # relative to wherever a process starts and through LD_LIBRARY_PATH.
    workload = build_workload([write_lib, ["true"], ["true"]],
                              env={"LD_PRELOAD": "libevil.so home/libevil.so",
                                   "LD_LIBRARY_PATH": "home:."})
    ended, text = run(launcher, workload)
    assert ended.state == "succeeded", (ended, text)
    assert not marker.exists(), marker.read_text()


def test_a_setuid_file_a_step_makes_is_never_left_on_the_host(launcher: SlurmLauncher) -> None:
    step = ["sh", "-c", "cp /bin/sh rootshell && chmod 4755 rootshell; ls -l rootshell; "
            "dd if=/dev/zero of=big bs=1M count=4 2>/dev/null; echo made"]
    workload = build_workload([step, ["sh", "-c", "ls -l rootshell big && sleep 3"]])
    launcher.launch(workload, RecordingHooks().hooks)
    seen_setuid: list[Path] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        seen_setuid += setuid_files(launcher.root)  # while it runs, too
        launcher.changes()
        seen = launcher.seen(workload)
        if seen is not None and seen.state != "running":
            break
        time.sleep(0.2)
    text = output(launcher, workload)
    assert "made" in text and "rootshell" in text, text
    assert not seen_setuid, seen_setuid
    assert not setuid_files(launcher.root)


def setuid_files(root: Path) -> list[Path]:
    found = []
    for path in root.rglob("*") if root.exists() else []:
        try:
            if path.is_file() and path.stat().st_mode & (stat.S_ISUID | stat.S_ISGID):
                found.append(path)
        except OSError:
            continue
    return found


def test_the_revision_directory_goes_once_applied_and_the_claim_stays(
        launcher: SlurmLauncher, slurm_cluster: SlurmCluster) -> None:
    workload = build_workload([["sh", "-c", "echo kept > output.txt; echo done"]])
    ended, text = run(launcher, workload)
    assert ended == Outcome("succeeded", exit_code=0) and "done" in text
    launcher.changes()  # the pass after the outcome and the log were recorded
    run_dir = launcher.run_dir(workload)
    assert not run_dir.exists(), sorted(run_dir.rglob("*"))
    again = RecordingHooks()
    launcher.launch(workload, again.hooks)  # a redelivered launch of the same revision
    assert "submitted" not in again.text
    named = [j for j in slurm_cluster.jobs() if j["name"] == workload.run_name]
    assert len(named) == 1


HIJACKER = textwrap.dedent("""
    import os, socket, threading, time
    rank = int(os.environ["RANK"])
    ports = [int(os.environ["MASTER_PORT"]), *range(12000, 13000), 29500]
    got = []
    def serve(server):
        while True:
            conn, _ = server.accept()
            got.append(conn.recv(100))
            print("ACCEPTED a foreign connection", got[-1], flush=True)
    if rank == 0:
        for port in sorted(set(ports)):
            try:
                server = socket.create_server(("", port))
            except OSError:
                continue
            threading.Thread(target=serve, args=(server,), daemon=True).start()
    print("listening", flush=True)
    time.sleep(20)
    print("hijacker got", len(got), flush=True)
""")

RENDEZVOUS = textwrap.dedent("""
    import os, socket, time
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    time.sleep(3)
    if rank == 0:
        server = socket.create_server(("", port))
        server.settimeout(20)
        print("rank 0 met", server.accept()[0].recv(100), flush=True)
    else:
        for _ in range(150):
            try:
                socket.create_connection((addr, port), 1).sendall(b"alice-rendezvous-hello")
                break
            except OSError:
                time.sleep(0.1)
""")


def test_a_tasks_rendezvous_cannot_be_intercepted_by_another_task_on_the_node(
        launcher: SlurmLauncher) -> None:
    mallory = build_workload([["python3", "-c", HIJACKER]], replicas=2)
    launcher.launch(mallory, RecordingHooks().hooks)
    printed(launcher, mallory, "listening")  # rank 0's servers are up
    alice = build_workload([["python3", "-c", RENDEZVOUS]], replicas=2)
    ended, text = run(launcher, alice)
    finish(launcher, mallory)
    got = output(launcher, mallory)
    assert ended == Outcome("succeeded", exit_code=0), text
    assert "rank 0 met b'alice-rendezvous-hello'" in text, text
    assert "alice-rendezvous" not in got and "ACCEPTED" not in got, got


def test_a_replica_reaches_nothing_on_the_nodes_loopback(launcher: SlurmLauncher) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = ("import socket\ntry:\n"
                 f"    socket.create_connection(('127.0.0.1', {port}), 2)\n"
                 "    print('REACHED the host')\nexcept OSError as exc:\n"
                 "    print('refused', exc)\n")
        workload = build_workload([["python3", "-c", probe]], replicas=2)
        ended, text = run(launcher, workload)
    assert ended.state == "succeeded", (ended, text)
    assert "REACHED" not in text, text
    assert "[replica 0] refused" in text and "[replica 1] refused" in text, text


def test_each_replicas_lines_are_prefixed(launcher: SlurmLauncher) -> None:
    step = ["sh", "-c", 'echo "hello from $RANK"; echo "to stderr $RANK" >&2']
    workload = build_workload([step], replicas=2)
    ended, text = run(launcher, workload)
    assert ended.state == "succeeded", (ended, text)
    for k in (0, 1):
        assert f"[replica {k}] hello from {k}\n" in text, text
        assert f"[replica {k}] to stderr {k}\n" in text, text


def test_output_that_mimics_srun_is_not_read_as_sruns_words(launcher: SlurmLauncher) -> None:
    step = ["sh", "-c", 'if [ "$RANK" = 0 ]; then '
            'echo "srun: error: node1: task 1: Exited with exit code 42" >&2; exit 3; fi; '
            "sleep 20"]
    workload = build_workload([step], replicas=2)
    ended, text = run(launcher, workload)
    assert ended == Outcome("failed", exit_code=3, reason="step 1: replica 0 exited with 3"), \
        (ended, text)


def test_output_that_mimics_slurmstepd_is_not_read_as_an_oom_kill(
        launcher: SlurmLauncher) -> None:
    step = ["sh", "-c", 'echo "slurmstepd: error: Detected 1 oom-kill event(s) in '
            'StepId=1.0. Some of your processes may have been killed." >&2; exit 1']
    ended, text = run(launcher, build_workload([step]))
    assert ended == Outcome("failed", exit_code=1, reason="step 1 exited with 1"), (ended, text)


LIMITS = textwrap.dedent("""
    import os, resource, subprocess
    for name in ("NPROC", "NOFILE", "FSIZE"):
        print(name, resource.getrlimit(getattr(resource, "RLIMIT_" + name)), flush=True)
    started = []
    try:
        for _ in range(200):
            started.append(subprocess.Popen(["sleep", "5"]))
    except OSError as exc:
        print("fork refused", exc.errno, flush=True)
    print("started", len(started), flush=True)
    for p in started:
        p.kill()
    opened = []
    try:
        for _ in range(1000):
            opened.append(open("/dev/null"))
    except OSError as exc:
        print("open refused", exc.errno, flush=True)
    print("opened", len(opened), flush=True)
    for f in opened:
        f.close()
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        with open("big", "wb") as out:
            out.write(b"x" * (16 * 2**20))
    except OSError as exc:
        print("write refused", exc.errno, flush=True)
    print("big", os.path.getsize("big"), flush=True)
""")


def test_processes_open_files_and_file_size_are_limited_inside_the_sandbox(
        launcher: SlurmLauncher) -> None:
    ended, text = run(launcher, build_workload([["python3", "-c", LIMITS]]))
    assert ended.state == "succeeded", (ended, text[-3000:])
    assert "NPROC (64, 64)" in text and "NOFILE (256, 256)" in text, text
    assert f"FSIZE ({8 * 2**20}, {8 * 2**20})" in text, text
    started = int(text.split("started ")[1].split()[0])
    assert "fork refused 11" in text and started < 64, text  # EAGAIN
    assert "open refused 24" in text, text  # EMFILE
    assert f"big {8 * 2**20}" in text, text


def test_memory_is_limited_inside_the_sandbox_whatever_the_cgroups(
        launcher: SlurmLauncher) -> None:
    step = ["python3", "-c", "import resource; print('DATA', resource.getrlimit("
            "resource.RLIMIT_DATA)); x = bytearray(400 * 2**20); print('ALLOCATED')"]
    from shared.task.workload import Resources
    ended, text = run(launcher, build_workload([step], resources=Resources(memory="64Mi")))
    assert ended.state == "failed", (ended, text)
    assert f"DATA ({64 * 2**20}, {64 * 2**20})" in text and "ALLOCATED" not in text, text


@pytest.fixture(autouse=True)
def _no_leftover_jobs(slurm_cluster: SlurmCluster) -> Iterator[None]:
    yield
    slurm_cluster.run("scancel", "--me", check=False)


def test_the_marker_helper_writes_where_it_can(marker: Path) -> None:
    """The marker's writer itself works (a test of the tests: a hostile test that never
    could write its marker would prove nothing)."""
    subprocess.run(["python3", "-c", writer(marker)], check=True, env={})
    assert marker.exists()
    os.unlink(marker)


@pytest.fixture(scope="module")
def cluster_without_mpi_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A second private cluster in Slurm's default configuration: no ``MpiParams=ports``."""
    from tests.support import slurm as support

    plain = support.slurm_conf

    def without_ports(*args: object, **kwargs: object) -> str:
        conf = plain(*args, **kwargs)  # type: ignore[arg-type]
        return "\n".join(line for line in conf.splitlines()
                         if not line.startswith("MpiParams=")) + "\n"

    support.slurm_conf = without_ports  # type: ignore[assignment]
    try:
        cluster = SlurmCluster(tmp_path_factory.mktemp("slurm-no-ports")).start()
    finally:
        support.slurm_conf = plain
    assert "MpiParams" not in cluster.conf.read_text()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_replicas_meet_on_a_cluster_without_mpi_ports(
        cluster_without_mpi_ports: SlurmCluster, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm's default (no MpiParams=ports) refuses any step that reserves ports; the
    launcher reserves none, so two 2-replica jobs on the one node both meet at once."""
    monkeypatch.setenv("SLURM_CONF", cluster_without_mpi_ports.env["SLURM_CONF"])
    launcher = SlurmLauncher(Settings(slurm_dir=str(tmp_path / "slurm"),
                                      step_timeout_seconds=120))
    pairs = [build_workload([["python3", "-c", RENDEZVOUS]], replicas=2) for _ in range(2)]
    for workload in pairs:
        launcher.launch(workload, RecordingHooks().hooks)
    for workload in pairs:
        ended = finish(launcher, workload)
        text = output(launcher, workload)
        assert ended == Outcome("succeeded", exit_code=0), text
        assert "rank 0 met b'alice-rendezvous-hello'" in text, text


def test_another_tasks_revision_directory_is_out_of_reach(launcher: SlurmLauncher) -> None:
    other = build_workload([["sh", "-c", "echo started; sleep 8"]],
                           files=(TaskFile("mine.txt", "alice's\n"),))
    launcher.launch(other, RecordingHooks().hooks)
    theirs = launcher.run_dir(other)
    probe = ["sh", "-c", f"ls {launcher.root} {theirs} 2>&1; cat {theirs}/job.py 2>&1; "
             f"cat {theirs}/home/mine.txt 2>&1; echo probed"]
    printed(launcher, other, "started")  # its files are in place while it runs
    ended, text = run(launcher, build_workload([probe]))
    assert ended.state == "succeeded" and "probed" in text, (ended, text)
    assert "alice's" not in text and "SPEC" not in text and "No such file" in text, text


def test_a_job_cancelled_while_pending_leaves_no_values_behind(
        launcher: SlurmLauncher, slurm_cluster: SlurmCluster) -> None:
    pending = build_workload([["true"]], secrets={"HF_TOKEN": "hf_pending-secret-42a1"})
    down = ("scontrol", "update", "PartitionName=debug")
    slurm_cluster.run(*down, "State=DOWN")  # the job waits (PartitionDown) until cancelled
    try:
        launcher.launch(pending, RecordingHooks().hooks)
        assert (launcher.run_dir(pending) / "env").exists()
        try:
            launcher.cancel(pending)
        except Exception:  # noqa: BLE001, S110 - still stopping: the values went all the same
            pass
        assert not (launcher.run_dir(pending) / "env").exists()
    finally:
        slurm_cluster.run(*down, "State=UP")
