"""What the slurm launcher submits and how it reads Slurm's answers: the pure parts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from shared.env.identity import replica_env
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
    argv = sbatch_argv(config, workload, RUN, Path("/tmp/export"))  # noqa: S108
    assert argv[0] == "/usr/bin/sbatch" and argv[-1] == str(RUN / "job.py")
    assert f"--job-name={workload.run_name}" in argv
    assert f"--comment=taskenv:{workload.task_id}:1" in argv
    assert "--export-file=/tmp/export" in argv and not any(a.startswith("--export=") for a in argv)
    assert {"--cpus-per-task=2", "--mem=2048M", "--gres=gpu:2", "--ntasks=1",
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
    text = job_program(config, job_spec(config, workload, RUN, list(env)))
    assert text.startswith("#!/usr/bin/python3\n")
    compile(text, "job.py", "exec")
    assert SECRET not in text and "a,b=c" not in text and "$(HOME)" not in text
    spec_line = next(line for line in text.splitlines() if line.startswith("SPEC = "))
    assert '"COMMAS"' in spec_line and '"TOKEN"' in spec_line  # names only
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin" and env["TOKEN"] == SECRET


def test_a_step_sees_the_task_variables_slurms_own_and_its_identity_only() -> None:
    environ = {"A": "1", "HOME": "/home/task", "SLURM_PROCID": "1", "SRUN_DEBUG": "3",
               "ENVIRONMENT": "BATCH", "HOSTNAME": "node1", "TMPDIR": "/tmp", "PWD": "/x"}
    env = slurm_job.step_env(environ, ["A", "HOME", "MISSING"], {"RANK": "1"})
    assert env == {"A": "1", "HOME": "/home/task", "SLURM_PROCID": "1", "SRUN_DEBUG": "3",
                   "RANK": "1"}


@pytest.mark.parametrize(("nodelist", "first"), [
    ("vm", "vm"), ("node[03-05,7],gpu1", "node03"), ("gpu1,node[1-2]", "gpu1"),
    ("a[1-2]-ib,b", "a1-ib"), ("n[010,2]", "n010")])
def test_the_first_host_of_a_slurm_host_list(nodelist: str, first: str) -> None:
    assert slurm_job.first_host(nodelist) == first


def test_a_task_of_one_replica_gets_the_identity_of_a_world_of_one() -> None:
    workload = build_workload([["true"]])
    template = identity_template(workload)
    found = slurm_job.identity({"SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "n1"}, template)
    assert found == dict(replica_env(workload.group(), 0))


def test_a_replica_knows_its_rank_and_where_to_meet_the_others() -> None:
    environ = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1",
               "SLURM_JOB_NODELIST": "node[3-4]", "SLURM_STEP_RESV_PORTS": "12007-12008",
               "SLURM_JOB_ID": "42"}
    workload = dataclasses.replace(build_workload([["true"]]), replicas=2)
    template = identity_template(workload)
    found = slurm_job.identity(environ, template)
    assert found["RANK"] == found["PET_NODE_RANK"] == found["TASK_REPLICA"] == "1"
    assert found["WORLD_SIZE"] == found["PET_NNODES"] == found["TASK_REPLICAS"] == "2"
    assert found["MASTER_ADDR"] == found["PET_MASTER_ADDR"] == "node3"
    assert found["MASTER_PORT"] == found["PET_MASTER_PORT"] == "12007"
    assert set(found) == set(dict(replica_env(workload.group(), 1)))  # the same names
    handed = slurm_job.identity({**environ, slurm_job.MASTER_ADDR_HANDOVER: "10.0.0.3"},
                                template)
    assert handed["MASTER_ADDR"] == "10.0.0.3"
    without_reserved = {k: v for k, v in environ.items() if k != "SLURM_STEP_RESV_PORTS"}
    assert slurm_job.master_port(without_reserved) == "20042"


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


def test_the_failing_replica_is_named_from_sruns_words(tmp_path: Path) -> None:
    out = tmp_path / "output.log"
    out.write_text("rank 0 ok\nsrun: error: node1: task 1: Exited with exit code 3\n"
                   "srun: launch/slurm: _step_signal: Terminating StepId=7.0\n")
    assert slurm_job.failed_replica(str(out)) == (1, 3)
    out.write_text("nothing said\n")
    assert slurm_job.failed_replica(str(out)) is None
