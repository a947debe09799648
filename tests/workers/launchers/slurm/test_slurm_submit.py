"""What the slurm launcher submits and how it reads Slurm's answers: the pure parts."""

from __future__ import annotations

import dataclasses
import resource
from pathlib import Path

import pytest

from shared.env.identity import replica_env
from shared.task.limits import Limits
from shared.task.workload import Resources
from tests.workers.conftest import build_workload
from workers.launchers.base import Outcome
from workers.launchers.slurm import job as slurm_job
from workers.launchers.slurm.submit import (
    LIST_FORMAT,
    BadResources,
    SlurmSettings,
    cpus,
    export_entries,
    identity_template,
    job_env,
    job_program,
    job_spec,
    list_argv,
    listed_outcome,
    memory_mib,
    parse_comment,
    parse_listing,
    sbatch_argv,
)

HOSTILE = {"COMMAS": "a,b=c", "NEWLINES": "one\ntwo\n", "SUBSHELL": "$(HOME)", "EQ": "=x=",
           "QUOTES": "'\"\\", "NON_ASCII": "数据 ✓", "EMPTY": ""}
SECRET = "hf_unit-secret-1234567"
RUN = Path("/shared/taskenv/abc/r1")
LIMITS = Limits(millicpu=1000, memory_bytes=2**26, gpus=0, pids=64, open_files=256,
                file_bytes=2**23, tmp_bytes=2**25, home_bytes=2**25)


def test_the_export_file_holds_each_value_exactly_nul_separated() -> None:
    raw = export_entries(HOSTILE)
    entries = raw.split(b"\0")
    assert entries[-1] == b""  # every entry ends with a NUL
    parsed = dict(e.decode().split("=", 1) for e in entries[:-1])
    assert parsed == HOSTILE


def test_sbatch_argv_carries_names_and_limits_never_a_value() -> None:
    workload = build_workload([["python3", "train.py"]], env=HOSTILE, secrets={"TOKEN": SECRET},
                              resources=Resources(cpu="1500m", memory="2Gi", gpus=2))
    config = SlurmSettings(partition="gpu", account="ml-team", sbatch="/usr/bin/sbatch")
    argv = sbatch_argv(config, workload, RUN)
    assert argv[0] == "/usr/bin/sbatch" and argv[-1] == str(RUN / "job.py")
    assert f"--job-name={workload.run_name}" in argv
    assert f"--comment=taskenv:{workload.task_id}:1" in argv
    assert not any(a.startswith(("--export", "--export-file")) for a in argv)
    assert {"--cpus-per-task=2", "--mem=2048M", "--gres=gpu:2", "--ntasks=1", "--nodes=1",
            "--partition=gpu", "--account=ml-team", "--no-requeue"} <= set(argv)
    joined = "\0".join(argv)
    for value in [*HOSTILE.values(), SECRET]:
        assert not value or value not in joined


@pytest.mark.parametrize(("quantity", "mib"), [("512Mi", 512), ("1Gi", 1024), ("1G", 954),
                                               ("1500M", 1431), ("1048576", 1), ("0.5Gi", 512)])
def test_memory_quantities_become_whole_mib(quantity: str, mib: int) -> None:
    assert memory_mib(quantity) == mib


@pytest.mark.parametrize(("quantity", "whole"), [("1", 1), ("500m", 1), ("2.5", 3), ("4", 4)])
def test_cpu_quantities_become_whole_cpus(quantity: str, whole: int) -> None:
    assert cpus(quantity) == whole


def test_a_quantity_slurm_cannot_take_is_refused_naming_the_field() -> None:
    with pytest.raises(BadResources, match=r"resources\.memory 'lots'"):
        memory_mib("lots")
    with pytest.raises(BadResources, match=r"resources\.cpu '-1'"):
        cpus("-1")


def test_the_comment_names_task_and_revision() -> None:
    assert parse_comment("taskenv:0123abcd:12") == ("0123abcd", 12)
    assert parse_comment("someone else's job") is None
    assert parse_comment("taskenv:x:notanumber") is None


def test_the_listing_is_one_squeue_of_this_users_jobs_with_the_comment_last() -> None:
    argv = list_argv("/usr/bin/squeue")
    assert "--me" in argv and "--states=all" in argv and f"--Format={LIST_FORMAT}" in argv
    assert LIST_FORMAT.endswith("Comment:")
    jobs = parse_listing("7|FAILED|NonZeroExitCode|768|100M|taskenv:t1:2\n"
                         "8|PENDING|Resources|0|400M|a|comment|with|bars\n"
                         "garbage line\n")
    assert jobs[0] == {"job_id": 7, "job_state": "FAILED", "state_reason": "NonZeroExitCode",
                       "exit_code": 768, "min_memory": "100M", "comment": "taskenv:t1:2"}
    assert jobs[1]["comment"] == "a|comment|with|bars" and len(jobs) == 2


@pytest.mark.parametrize(("state", "reason", "status", "outcome"), [
    ("RUNNING", "None", 0, Outcome("running")),
    ("PENDING", "Resources", 0, Outcome("running", reason="Resources")),
    ("COMPLETING", "None", 0, Outcome("running", reason="completing")),
    ("COMPLETED", "None", 0, Outcome("succeeded", exit_code=0)),
    ("FAILED", "NonZeroExitCode", 3 << 8, Outcome("failed", 3, "a step failed (NonZeroExitCode)")),
    ("TIMEOUT", "TimeLimit", 15, Outcome("failed", 143, "the job ran over its time limit "
                                                        "(TimeLimit)")),
    ("NODE_FAIL", "None", 0, Outcome("failed", 0, "the node running the job failed")),
    ("CANCELLED", "None", 15, Outcome("failed", 143, "the job was cancelled in Slurm")),
    ("OUT_OF_MEMORY", "OutOfMemory", 9, Outcome(
        "failed", 137, "out of memory: a step went over its memory limit (--mem=100M)")),
])
def test_slurm_states_map_onto_taskenvs_with_the_reason(state: str, reason: str, status: int,
                                                        outcome: Outcome) -> None:
    job = {"job_state": state, "state_reason": reason, "exit_code": status, "min_memory": "100M"}
    assert listed_outcome(job) == outcome


def test_the_batch_program_holds_names_and_argv_but_no_value() -> None:
    workload = build_workload([["python3", "-c", "print(1)"], ["sh", "-c", "exit 0"]],
                              env=HOSTILE, secrets={"TOKEN": SECRET}, workdir="runs/1")
    config = SlurmSettings(python="/usr/bin/python3")
    env = job_env(workload, "/home/task")
    text = job_program(config, job_spec(config, workload, RUN, list(env), LIMITS))
    assert text.startswith("#!/usr/bin/python3 -I\n")  # isolated mode: one argument
    compile(text, "job.py", "exec")
    assert SECRET not in text and "a,b=c" not in text and "$(HOME)" not in text
    spec_line = next(line for line in text.splitlines() if line.startswith("SPEC = "))
    assert '"COMMAS"' in spec_line and '"TOKEN"' in spec_line  # names only
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin" and env["TOKEN"] == SECRET


def test_a_step_sees_the_task_variables_slurms_own_and_its_identity_only() -> None:
    environ = {"A": "outer", "HOME": "/root", "SLURM_PROCID": "1", "SRUN_DEBUG": "3",
               "ENVIRONMENT": "BATCH", "HOSTNAME": "node1", "TMPDIR": "/tmp", "PWD": "/x"}
    env = slurm_job.step_env(environ, {"A": "1", "HOME": "/home/task"}, {"RANK": "1"})
    assert env == {"A": "1", "HOME": "/home/task", "SLURM_PROCID": "1", "SRUN_DEBUG": "3",
                   "RANK": "1"}


def test_the_values_travel_as_nul_separated_data_and_become_setenv_arguments() -> None:
    raw = export_entries(HOSTILE)
    assert slurm_job.parse_env(raw) == HOSTILE
    args = slurm_job.setenv_args(HOSTILE).split(b"\0")
    assert args[-1] == b"" and args[0::3][:-1] == [b"--setenv"] * len(HOSTILE)
    assert dict(zip((a.decode() for a in args[1::3]), (a.decode() for a in args[2::3]),
                    strict=True)) == HOSTILE


def test_a_task_of_one_replica_gets_the_identity_of_a_world_of_one() -> None:
    workload = build_workload([["true"]])
    template = identity_template(workload)
    found = slurm_job.identity({"SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "n1"}, template)
    assert found == dict(replica_env(workload.group(), 0))


def test_a_replica_knows_its_rank_and_meets_the_others_in_the_jobs_own_network() -> None:
    """Replica 0 listens on 127.0.0.1 at the default port, in the job's own network
    namespace: no port is reserved from Slurm (no MpiParams=ports needed), and two jobs on
    one node cannot collide, each having its own loopback."""
    environ = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1",
               "SLURM_JOB_NODELIST": "node[3-4]", "SLURM_JOB_ID": "42"}
    workload = dataclasses.replace(build_workload([["true"]]), replicas=2)
    template = identity_template(workload)
    found = slurm_job.identity(environ, template)
    assert found == dict(replica_env(workload.group(), 1))
    assert found["RANK"] == found["PET_NODE_RANK"] == found["TASK_REPLICA"] == "1"
    assert found["MASTER_ADDR"] == "127.0.0.1" and found["MASTER_PORT"] == "29500"
    spec = job_spec(SlurmSettings(), workload, RUN, ["A"], LIMITS)
    assert all("--share-net" in argv for argv in spec["argv"])  # the job's network, not bwrap's
    assert "--resv-ports" not in Path(slurm_job.__file__).read_text()


def test_the_sandbox_limits_come_from_the_tasks_resources() -> None:
    workload = dataclasses.replace(build_workload([["true"]], resources=Resources(
        memory="64Mi")), replicas=2)
    spec = job_spec(SlurmSettings(), workload, RUN, [], LIMITS)
    assert spec["limits"] == {"open_files": 256, "file_bytes": 2**23, "pids": 128,
                              "memory_bytes": LIMITS.memory_bytes}
    assert spec["home_bytes"] == LIMITS.home_bytes
    limits = dict(slurm_job.rlimits(spec))
    assert limits[resource.RLIMIT_NPROC] == 128 and limits[resource.RLIMIT_CORE] == 0
    assert "--size" in spec["argv"][0]  # /tmp capped too


def test_the_image_names_a_runtime_directory_on_the_nodes_or_the_job_is_refused() -> None:
    config = SlurmSettings(runtimes="pytorch-2.13=/shared/runtimes/pt")
    workload = dataclasses.replace(build_workload([["true"]]), image="pytorch-2.13")
    [argv] = job_spec(config, workload, RUN, [], LIMITS)["argv"]
    assert argv[argv.index("/shared/runtimes/pt/usr") + 1] == "/usr"
    [host] = job_spec(config, build_workload([["true"]]), RUN, [], LIMITS)["argv"]
    assert host[host.index("/usr") - 1] == "--ro-bind" and "/shared/runtimes/pt/usr" not in host
    with pytest.raises(BadResources, match="'jax' is no runtime"):
        job_spec(config, dataclasses.replace(workload, image="jax"), RUN, [], LIMITS)


def test_the_proc_masks_are_the_nodes_own_and_the_step_is_untouched(tmp_path: Path) -> None:
    (tmp_path / "kallsyms").write_text("")
    (tmp_path / "acpi").mkdir()
    argv = ["bwrap", "--unshare-all", "--proc", "/proc", "--ro-bind", "/dev/null",
            "/proc/modules", "--tmpfs", "/proc/scsi", "--dev", "/dev", "--tmpfs", "/tmp", "--",
            "sh", "-c", "x", "--tmpfs", "/proc/kept"]
    fitted = slurm_job.fit_proc_masks(argv, ["kallsyms", "modules"], ["acpi", "scsi"],
                                      proc=str(tmp_path))
    assert fitted == ["bwrap", "--unshare-all", "--proc", "/proc",
                      "--ro-bind", "/dev/null", "/proc/kallsyms", "--tmpfs", "/proc/acpi",
                      "--dev", "/dev", "--tmpfs", "/tmp", "--",
                      "sh", "-c", "x", "--tmpfs", "/proc/kept"]


def test_the_failing_replica_is_named_from_its_own_record_never_from_output(
        tmp_path: Path) -> None:
    (tmp_path / "exits").mkdir()
    (tmp_path / "output.log").write_text(
        "srun: error: node1: task 0: Exited with exit code 42\n"
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=7.0\n")
    for rank, code, at in ((0, 137, 20), (1, 3, 10)):
        (tmp_path / "exits" / f"0-{rank}").write_text(
            f'{{"code": {code}, "at": {at}, "oom": false}}')
    spec = {"run_dir": str(tmp_path), "replicas": 2, "memory_limit": "x"}
    assert slurm_job.step_failure(spec, 1, 1) == {
        "state": "failed", "exit_code": 3, "reason": "step 1: replica 1 exited with 3"}
    (tmp_path / "exits" / "0-0").write_text('{"code": 137, "at": 5, "oom": true}')
    assert slurm_job.step_failure(spec, 1, 1)["reason"] == \
        "step 1 was killed: out of memory (over its memory limit, x)"
