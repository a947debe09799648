"""Run a workload as a Slurm job: one ``sbatch`` per revision.

Slurm's command line tools are the stable interface (``pyslurm`` is built against
one Slurm release and breaks with the next; ``sbatch``/``squeue``/``scancel`` and
their fixed output formats keep their meaning across releases), so the launcher calls
them, always with an argv list and an environment of ``SLURM_CONF`` alone.

* **Submit.** ``launch`` claims the revision (``r<rev>.job`` beside its directory,
  created with ``O_EXCL``), writes the batch program (``job.py`` with the revision's
  spec, no value in it) into the revision's directory and the env into ``env`` there
  (0600; the batch program reads it into memory and removes it as it starts), and
  submits with an environment of ``SLURM_CONF`` alone; the job id goes into the claim.
  A second launch of the revision (a redelivery, a retry) finds the claim — or, if the
  first launch died between claiming and recording, the job by name — and adopts the
  job instead of submitting twice.  The claim outlives the directory.
* **Status.** ``changes`` makes one ``squeue --me --states=all`` call per pass
  (fixed fields: 22.05's ``--json`` ignores filters and lists the whole cluster),
  for every job of this user, however many, and keys taskenv's jobs by their
  comment.  The job leaves its outcome in ``outcome.json`` (the failing step, its
  exit code, an out-of-memory kill): a finished job is reported from it, and a job
  Slurm has forgotten (``MinJobAge``) is still reported once from it.
* **Output.** The job's output file grows on the shared filesystem, kept by the job
  program within the log's cap (its start, a line saying how much was dropped, its end;
  the task's secrets hidden); ``new_output`` hands the reconciler the complete lines
  added since the last pass, a chunk of each job at a time, ``logs`` the rest once the
  job has ended, and the file is then removed.  Neither reads more than a chunk, or the
  cap, whatever the length of a line.
* **Cancel.** ``scancel``; until Slurm no longer runs the job, ``TransientError``.
* **Clean-up.** A revision's directory is removed by the pass after its outcome and
  log were recorded (``logs``), or after Slurm forgot the job (``MinJobAge``), whichever
  comes first; a ``collected`` mark in it lets a reconciler that restarts finish the job.

The revision directory (``TASKENV_SLURM_DIR``) must be on a filesystem the
workers and the nodes share, as a Slurm cluster's home or scratch is.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from shared.config import Settings
from shared.env.received import Look, Looks
from shared.errors import LaunchFailed, TransientError
from shared.policy.model import PLATFORM_SCOPE, Resolved
from shared.secrets import redact_cut
from shared.store.logtail import MAX_CHUNK, head_only_note, whole_characters
from shared.task.limits import Limits, Maxima, limits_for
from shared.task.workload import Workload
from workers.launchers.base import Change, Hooks, Outcome
from workers.launchers.common import containment
from workers.launchers.common.containment import seccomp
from workers.launchers.common.containment.uids import ClaimedUids, NoFreeUid
from workers.launchers.common.run_dir import prepare_home, write_files
from workers.launchers.common.sandbox import TASK_HOME, BadWorkdir, workdir_inside
from workers.launchers.slurm import job as slurm_job
from workers.launchers.slurm.setup import setup_problems
from workers.launchers.slurm.submit import (
    OUTPUT,
    PROGRAM,
    BadResources,
    SlurmSettings,
    comment,
    export_entries,
    job_env,
    job_program,
    job_spec,
    list_argv,
    listed_outcome,
    parse_comment,
    parse_listing,
    runtime_root,
    sbatch_argv,
)

log = logging.getLogger(__name__)

Key = tuple[str, int]
CLAIM = ".job"  # r<rev>.job beside the revision's directory: the job id, once submitted
COLLECTED = "collected"  # the outcome and the log were read: remove at the next pass
SECCOMP = "seccomp.bpf"
LOOK_KEY = "received.key"  # the key of this launch's hashes of what each replica got
OFFSET = "output.offset"
TRANSIENT = re.compile(r"unable to contact|timed? ?out|connection refused|try again|"
                       r"temporarily|socket|slurm_load|communications? (connection )?failure|"
                       r"resource temporarily unavailable|busy", re.I)
NO_SUCH_JOB = re.compile(r"invalid job id", re.I)
SLURM_OWN = ("SLURM_", "SRUN_")
CLAIM_STALE_SECONDS = 60.0  # a claim with no job id this old: its launch died before sbatch
GONE = ("Slurm no longer knows the job (MinJobAge passed, or the controller lost it) "
        "and it left no outcome")
READ_CHUNK = MAX_CHUNK  # of one job's output file, read at once (and one append to Redis)
PASS_BYTES = 8 * READ_CHUNK  # of all jobs' output, read in one pass (about)


# A pending job's reason when waiting will not help (the request exceeds the partition, an
# account or QOS it may not use): the reconciler fails the task once it has been stuck.
NEVER_RUNS = frozenset({"BadConstraints", "PartitionNodeLimit", "PartitionConfig",
                        "PartitionTimeLimit", "InvalidAccount", "InvalidQOS",
                        "AccountNotAllowed", "QOSNotAllowed", "DependencyNeverSatisfied"})


class SlurmLauncher:
    name = "slurm"
    sweep_every_pass = False  # changes() reports every job's end
    never_starts: frozenset[str] = NEVER_RUNS

    def __init__(self, settings: Settings, timeout: float = 60.0) -> None:
        self.root = Path(settings.slurm_dir).resolve()
        # Each job's own host uid, claimed at submission, given back once it has ended.
        self.uids = ClaimedUids(self.root, settings.task_uid_first, settings.task_uid_count)
        self.uids_recovered = False  # the reconciler's first pass gives back lost claims
        self.config = SlurmSettings.from_settings(settings, _which("sbatch"))
        self.squeue, self.scancel = _which("squeue"), _which("scancel")
        self.timeout = timeout
        # Client commands see the cluster's SLURM_CONF and nothing else of the worker's env.
        self.env = {k: os.environ[k] for k in ("SLURM_CONF",) if k in os.environ}
        self.seccomp = seccomp_filter(settings.local_containment)
        self.maxima = Maxima.from_settings(settings)
        self.listed: dict[Key, tuple[int, Outcome]] = {}  # the last listing's view
        self.calls = 0  # Slurm commands run, for the cost benchmark
        self.turn = 0  # where the next new_output() begins among the listed jobs
        # Directories whose outcome and log were read: removed at the next pass.  Those a
        # reconciler that stopped left marked are found once, here.
        self.collected: list[Path] = list(self.root.glob(f"*/r*/{COLLECTED}"))

    @classmethod
    def setup_problems(cls, settings: Settings) -> list[str]:
        """What this host lacks to submit any job (``make run`` refuses to start)."""
        return setup_problems(settings)

    # -- the Launcher interface ------------------------------------------------------

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        run_dir = self.run_dir(workload)
        run_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        job = self._adopt(workload, run_dir)
        if job is None:
            job = self._submit(workload, run_dir)
            hooks.log(f"slurm: submitted job {job}\n")
        hooks.started()
        return Outcome("running")

    def observe(self, workload: Workload) -> Outcome | None:
        job = self.job_id(workload)
        if job is None:
            return None
        result = self.slurm(*list_argv(self.squeue, f"--jobs={job}"))
        if result.returncode != 0 and not NO_SUCH_JOB.search(result.stderr):
            raise self._error("squeue", result)
        jobs = [j for j in parse_listing(result.stdout) if j["job_id"] == job]
        run_dir = self.run_dir(workload)
        if not jobs:
            return read_outcome(run_dir)
        return self._outcome(jobs[0], run_dir)

    def changes(self) -> list[Change]:
        """What differs between this listing of taskenv's jobs and the last one."""
        self._remove_collected()
        if not self.uids_recovered:  # uids of jobs collected by a reconciler that stopped
            self.uids.release_orphans(self.root)
            self.uids_recovered = True
        before, now = self.listed, self.listing()
        self.listed = now
        changes: list[Change] = []
        for key in before.keys() - now.keys():
            left = read_outcome(self._dir(*key))
            changes.append(Change(*key, left, None if left else GONE))
            self._collect(self._dir(*key))  # Slurm forgot it: its directory goes next pass
        for key, (_, outcome) in now.items():
            previous = before.get(key)
            if previous is None or previous[1] != outcome:
                changes.append(Change(*key, outcome))
        return changes

    def seen(self, workload: Workload) -> Outcome | None:
        listed = self.listed.get((workload.task_id, workload.revision))
        if listed is not None:
            return listed[1]
        return read_outcome(self.run_dir(workload))  # a job Slurm has forgotten

    def as_stored(self, text: str) -> str:
        """The job program marks the platform's lines and shows a step's mark as text
        (``job.JobOutput``): its output is stored as it is."""
        return text

    def logs(self, workload: Workload) -> str | None:
        """The output not yet streamed, read up to the log's budget and no further: the job
        program keeps its file within it (``job.JobOutput``), so this is the rest of it
        whole; past it (a file no such program wrote) the start is kept, redacted, and a
        line says the rest was not read.  The output file is removed once read."""
        run_dir = self.run_dir(workload)
        budget = self.config.output_cap()
        data = self._read_from_offset(run_dir, budget + 1, whole_lines=False)
        for name in (OUTPUT, OFFSET):
            (run_dir / name).unlink(missing_ok=True)
        self._collect(run_dir)
        if data is None or len(data) <= budget:
            return None if data is None else data.decode(errors="replace")
        head = whole_characters(data[:budget])[0]
        return redact_cut(head, [v.value for v in workload.env if v.secret]) \
            + head_only_note(budget)

    def received(self, workload: Workload) -> Looks | None:
        """Each replica's env as its first step was started with it (``job.record_received``,
        outside the sandbox); None once the revision's directory is gone."""
        run_dir = self.run_dir(workload)
        try:
            key = (run_dir / LOOK_KEY).read_bytes()
        except OSError:
            return None
        looks = []
        for path in sorted((run_dir / slurm_job.RECEIVED).glob("*.json")):
            try:
                found = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            looks.append(Look(int(path.stem), found["hashes"], str(found.get("node") or ""),
                              found.get("node_values") or {}))
        if not looks:
            return None
        # The launcher's own PATH and HOME (when the env sets none), and Slurm's SLURM_*.
        return Looks(key, tuple(looks), backend_names=("PATH", "HOME"),
                     backend_prefixes=SLURM_OWN)

    def _collect(self, run_dir: Path) -> None:
        """Mark a revision's directory for removal at the next pass (after this pass has
        recorded its outcome and log)."""
        self.uids.release(run_dir, uid_member(run_dir))  # the job has ended
        if run_dir.is_dir():
            (run_dir / COLLECTED).touch()
            self.collected.append(run_dir / COLLECTED)

    def _remove_collected(self) -> None:
        for mark in self.collected:
            shutil.rmtree(mark.parent, ignore_errors=True)
        self.collected = []

    def new_output(self) -> list[tuple[str, int, str]]:
        """The complete lines each listed job's output gained since the last call: at most
        :data:`READ_CHUNK` bytes of each (a line longer than that in pieces), and about
        :data:`PASS_BYTES` in all, the jobs taken in turn from where the last call stopped.
        So a pass holds a bounded amount whatever the jobs print; the rest waits in the
        files for the next.

        Reads files on the shared filesystem: no Slurm call.  The offset reached is kept
        beside the output, so a restarted reconciler goes on where the last one stopped.
        """
        keys = list(self.listed)
        first = self.turn % len(keys) if keys else 0
        out, read, looked = [], 0, 0
        for key in keys[first:] + keys[:first]:
            if read >= PASS_BYTES:
                break
            looked += 1
            data = self._read_from_offset(self._dir(*key), READ_CHUNK, whole_lines=True)
            if data:
                out.append((*key, data.decode(errors="replace")))
                read += len(data)
        self.turn = first + looked
        return out

    def cancel(self, workload: Workload) -> None:
        job = self.job_id(workload) or self._find_by_name(workload)
        if job is None:
            return
        result = self.slurm(self.scancel, str(job))
        if result.returncode != 0 and not NO_SUCH_JOB.search(result.stderr):
            raise self._error("scancel", result)
        # A job cancelled while pending never takes its values: they go now, not when its
        # directory does.
        (self.run_dir(workload) / slurm_job.ENV_FILE).unlink(missing_ok=True)
        seen = self.observe(workload)
        if seen is not None and seen.state == "running":
            raise TransientError(f"Slurm job {job} is still stopping")

    # -- listing ---------------------------------------------------------------------

    def listing(self) -> dict[Key, tuple[int, Outcome]]:
        """Every taskenv job of this user Slurm still knows, from one ``squeue``."""
        result = self.slurm(*list_argv(self.squeue))
        if result.returncode != 0:
            raise self._error("squeue", result)
        out: dict[Key, tuple[int, Outcome]] = {}
        for job in parse_listing(result.stdout):
            key = parse_comment(str(job.get("comment") or ""))
            if key is None:
                continue
            known = self.listed.get(key)
            if known is not None and known[0] == job["job_id"] and known[1].state != "running":
                out[key] = known  # ended already: its outcome file was read once
                continue
            out[key] = (int(job["job_id"]), self._outcome(job, self._dir(*key)))
        return out

    def _outcome(self, job: dict[str, Any], run_dir: Path) -> Outcome:
        """Slurm's view; for an ended job, the job's own account when it left one."""
        listed = listed_outcome(job)
        if listed.state == "running":
            return listed
        left = read_outcome(run_dir)
        if left is None or left.reason == slurm_job.STOPPED:
            return listed  # ended from outside (scancel, time limit, node): Slurm knows why
        if listed.reason and listed.reason.startswith("out of memory"):
            return listed  # Slurm ended the whole job for memory, naming its limit
        return left  # the failing step and its code, or a step's out-of-memory kill

    # -- submitting ------------------------------------------------------------------

    def _adopt(self, workload: Workload, run_dir: Path) -> int | None:
        """The job an earlier launch of this revision submitted; None: submit (claimed)."""
        claim = claim_path(run_dir)
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            os.close(fd)
            return None
        job = self.job_id(workload)
        if job is not None:
            return job
        found = self._find_by_name(workload)
        if found is not None:
            _write_job_id(claim, found)
            return found
        if time.time() - claim.stat().st_mtime < CLAIM_STALE_SECONDS:
            raise TransientError(f"another launch of {workload.run_name} is submitting it")
        claim.touch()  # the launch that claimed it died before sbatch: take over
        return None

    def _submit(self, workload: Workload, run_dir: Path) -> int:
        claim = claim_path(run_dir)
        try:
            self._check(workload)
            shutil.rmtree(run_dir, ignore_errors=True)  # a launch that died left it half-made
            run_dir.mkdir(mode=0o700)
            uid = self._take_uid(run_dir)
            home = prepare_home(run_dir, workload.workdir)
            # On the shared filesystem: the files reach the node with the job, which copies
            # them into each replica's home and removes these.
            write_files(home / (workload.workdir or ""), workload.files)
            env = job_env(workload, TASK_HOME)
            spec = job_spec(self.config, workload, run_dir, list(env), self.limits(workload),
                            uid)
            # Replicas to compare, or per-node values to record: otherwise nothing to pay.
            if workload.replicas > 1 or workload.per_node:
                look_key = secrets.token_bytes(32)  # this launch's, for what each got
                spec["look_key"] = look_key.hex()
                write_private(run_dir / LOOK_KEY, look_key)
            if self.seccomp is not None:  # bwrap loads it on the node, right before the step
                spec["seccomp"] = str(run_dir / SECCOMP)
                (run_dir / SECCOMP).write_bytes(self.seccomp)
            program = run_dir / PROGRAM
            program.write_text(job_program(self.config, spec), encoding="utf-8")
            program.chmod(0o700)
            write_private(run_dir / slurm_job.ENV_FILE, export_entries(env))
            result = self.slurm(*sbatch_argv(self.config, workload, run_dir))
        except BaseException:
            self.uids.release(run_dir, uid_member(run_dir))  # no job runs as it
            claim.unlink(missing_ok=True)  # a retry may submit
            raise
        if result.returncode != 0:
            self.uids.release(run_dir, uid_member(run_dir))
            claim.unlink(missing_ok=True)
            (run_dir / slurm_job.ENV_FILE).unlink(missing_ok=True)
            raise self._error("sbatch", result)
        job = int(result.stdout.strip().split(";", 1)[0])
        _write_job_id(claim, job)
        return job

    def _take_uid(self, run_dir: Path) -> int:
        """The job's own host uid; with every uid held, the launch waits (is retried)."""
        try:
            return self.uids.take(uid_member(run_dir), run_dir)
        except NoFreeUid as exc:
            raise TransientError(f"{exc}: the launch waits for a job to end") from None

    def limits(self, workload: Workload) -> Limits:
        res = workload.resources
        return limits_for({"cpu": res.cpu, "memory": res.memory, "gpus": res.gpus},
                          self.maxima)

    def _check(self, workload: Workload) -> None:
        """Refuse what Slurm could not be given, naming it."""
        problems = [f"{v.name} is read by Slurm itself (SLURM_*/SRUN_*): only the platform's "
                    f"policy may set it, not the {v.scope or v.source}" for v in workload.env
                    if v.name.startswith(SLURM_OWN) and not platform_set(v)]
        try:
            workdir_inside(workload.workdir)
            sbatch_argv(self.config, workload, Path("/"))
            job_program(self.config, {})
            runtime_root(self.config, workload)
        except (BadWorkdir, BadResources) as exc:
            problems.append(str(exc))
        if problems:
            raise LaunchFailed("; ".join(problems))

    def _find_by_name(self, workload: Workload) -> int | None:
        result = self.slurm(*list_argv(self.squeue, f"--name={workload.run_name}"))
        if result.returncode != 0:
            raise self._error("squeue", result)
        for job in parse_listing(result.stdout):
            if job["comment"] == comment(workload):
                return int(job["job_id"])
        return None

    # -- files -----------------------------------------------------------------------

    def run_dir(self, workload: Workload) -> Path:
        return self._dir(workload.task_id, workload.revision)

    def _dir(self, task_id: str, revision: int) -> Path:
        return self.root / task_id / f"r{revision}"

    def job_id(self, workload: Workload) -> int | None:
        try:
            text = claim_path(self.run_dir(workload)).read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def _read_from_offset(self, run_dir: Path, most: int, whole_lines: bool) -> bytes | None:
        """At most ``most`` bytes of the output after the offset reached last; with
        ``whole_lines``, up to the end of the last line in them (a line longer than
        ``most`` goes in pieces, each ending on a character's end).  The offset moves past
        what is returned."""
        try:
            offset = int((run_dir / OFFSET).read_text() or 0)
        except (OSError, ValueError):
            offset = 0
        try:
            with open(run_dir / OUTPUT, "rb") as out:
                out.seek(offset)
                data = out.read(most)
        except OSError:
            return None
        if whole_lines:
            end = data.rfind(b"\n") + 1
            if not end and len(data) == most:
                end = whole_characters(data)[1]
            data = data[:end]
        if not data:
            return None
        tmp = run_dir / f"{OFFSET}.tmp"
        tmp.write_text(str(offset + len(data)))
        tmp.replace(run_dir / OFFSET)
        return data

    # -- Slurm -----------------------------------------------------------------------

    def slurm(self, *argv: str) -> subprocess.CompletedProcess[str]:
        self.calls += 1
        try:
            return subprocess.run(argv, env=self.env, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise TransientError(f"{Path(argv[0]).name} did not answer in "
                                 f"{self.timeout:g}s") from None

    def _error(self, what: str, result: subprocess.CompletedProcess[str]) -> Exception:
        message = result.stderr.strip()[-2000:] or f"exit status {result.returncode}"
        if TRANSIENT.search(message):
            return TransientError(f"{what}: {message}")
        return LaunchFailed(f"{what}: {message}")


def seccomp_filter(mode: str) -> bytes | None:
    """The local launcher's seccomp filter, compiled here for the nodes' bwrap (the nodes
    share this host's architecture); None, with a warning, where libseccomp is missing
    and containment is only ``warn``."""
    try:
        return seccomp.compiled_filter()
    except seccomp.SeccompUnavailable as exc:
        if mode == containment.ENFORCE:
            raise LaunchFailed(f"the slurm launcher loads the steps' seccomp filter and "
                               f"cannot compile it here: {exc} (TASKENV_LOCAL_CONTAINMENT="
                               f"{containment.WARN} runs without it)") from exc
        log.warning("slurm steps run WITHOUT the seccomp filter: %s", exc)
        return None


def platform_set(var: Resolved) -> bool:
    """Set by the platform itself or by the platform's policy (records from before project
    layers carry no scope: the platform's was the only policy then)."""
    return var.source != "user" and (var.scope is None or var.scope == PLATFORM_SCOPE)


def read_outcome(run_dir: Path) -> Outcome | None:
    """What the job left in its directory; None if it left nothing (yet)."""
    try:
        found = json.loads((run_dir / slurm_job.OUTCOME).read_text())
    except (OSError, ValueError):
        return None
    return Outcome(found["state"], found.get("exit_code"), found.get("reason"))


def uid_member(run_dir: Path) -> str:
    """How a revision's uid claim names it: ``task/rN``."""
    return f"{run_dir.parent.name}/{run_dir.name}"


def claim_path(run_dir: Path) -> Path:
    """``<task>/r<rev>.job``: beside the revision's directory, so it outlives it."""
    return run_dir.with_name(run_dir.name + CLAIM)


def _write_job_id(claim: Path, job: int) -> None:
    tmp = claim.with_name(claim.name + ".tmp")
    tmp.write_text(f"{job}\n")
    tmp.replace(claim)


def _which(binary: str) -> str:
    found = shutil.which(binary)
    if found is None:
        raise LaunchFailed(f"{binary} is not installed on this worker: the slurm launcher "
                           "needs Slurm's client commands (Debian: slurm-client)")
    return found


def write_private(path: Path, data: bytes) -> None:
    """A file only this account can read (0600, created anew, never through a link)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
