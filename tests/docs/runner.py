"""The doc runner: the documents' shell blocks, run the way a reader runs them.

How it works.  :data:`MANIFEST` names the documents in the order a reader meets them
(the README first, then the documents in the order the README links them).  The runner
goes through their fenced blocks in that order (tests/docs/parse.py says which fences
are commands and how a block is marked) as one reader would:

* **one checkout**: a copy of the working tree (its tracked and untracked, not ignored
  files) with the repository's virtualenv linked in as ``.venv``, so ``var/admin.token``,
  ``examples/…``, ``make example`` and ``deploy/…`` are where the README says.  The
  copied ``pyproject.toml`` is dated before ``.venv/.installed``: ``make`` never
  reinstalls into the shared virtualenv;
* **one stack** for the whole run, started as ``make run`` starts it
  (``python -m workers.localstack`` in the checkout, the default ``local`` launcher, its
  own Redis in ``var/``), on a free port given as ``TASKENV_PORT``.  Blocks say
  ``127.0.0.1:8080``: the runner rewrites that, and only that, to the stack's address
  before running a block (and exports ``TASKENV_PORT`` into the shell, so ``make
  example`` finds the stack as it finds it on 8080);
* **one shell state**: every statement runs in ``bash`` (tests/docs/step.sh) from the
  variables, functions and directory the statements before it left, across blocks and
  documents, with the virtualenv first on ``PATH`` (as after ``. .venv/bin/activate``)
  and a ``HOME`` of its own (``taskenv login`` writes there).  As when a block is pasted
  into a terminal, a failing statement does not stop the ones after it; each that exits
  non-zero is a failure of its block.  Standard input is empty unless a ``given`` says
  what the reader types.

Marks (``<!-- doc-test: KIND … -->`` before a fence):

* ``skip — why``: not run; counted with its reason.
* ``xfail [`TEXT`] — why``: run; expected to fail, strictly: the block fails if it
  passes, or if something fails that the mark does not cover (with ``TEXT``, only
  failures of statements containing TEXT are covered).
* ``stopped``: run with the stack stopped (the reader pressed Ctrl-C), started again after.
* ``serve``: the block's last statement is a ``make run`` the reader leaves running: the
  runner stops its own stack, starts that statement in its place, waits for ``/readyz``,
  has one task (``echo``) succeed on it, stops it as Ctrl-C does and starts its own again.
* ``slurm``: a ``serve`` block for a Slurm cluster, run against the test cluster of
  tests/support/slurm.py (with the partition the block names).  The site's paths in it,
  ``/etc/slurm/slurm.conf`` and ``/shared/taskenv``, are rewritten to the test cluster's
  ``slurm.conf`` and a directory of the run (:data:`SLURM_SITE`), as the port is.
* ``kustomize — why``: a block for a Kubernetes cluster: not run; what it applies
  (``kubectl apply -k DIR`` / ``-f FILE``) is rendered with ``kubectl kustomize`` / read
  in the checkout, and tests/deploy/doc_blocks.py's checks (Secret names and keys,
  images, objects the manifests define) on its lines must find nothing.
* ``given NAME``: tests/docs/given/NAME.sh runs first in the same shell (what the block
  takes as the reader's own: their task file, a project); tests/docs/given/NAME.stdin,
  if there is one, is each statement's standard input (what the reader types).
* ``output``: on a text fence right after a command block: what that block prints.

Outputs.  A ``# -> TEXT`` comment under a statement, or an ``output`` block, is compared
with what the statement (the block) printed, stdout and stderr together as a terminal
shows them: TEXT must occur in it, where (:data:`parse.PLACEHOLDERS`) ``…`` or ``...``
stands for any text, ``<id>`` for a task id (32 hex digits), ``<token>`` for an API
token (``tke_…``), ``<time>`` for a time (``2026-01-31T12:00:00.000Z``), ``<n>`` for a
number, and a run of spaces for any spaces or none (JSON is printed compact).

Checks (tests/docs/checks.py) are Python functions attached to a block by its document
and heading; they assert what a reader sees after it (a task succeeding, its logs).
"""

from __future__ import annotations

import inspect
import os
import re
import signal
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.docs import parse
from workers.localstack import free_port

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.txt"
GIVEN = HERE / "given"
DOC_ADDRESS = "127.0.0.1:8080"
SLURM_SITE = ("/etc/slurm/slurm.conf", "/shared/taskenv")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STATEMENT_TIMEOUT = 240
READY_TIMEOUT = 120


def documents() -> list[parse.Block]:
    """Every block of the manifest's documents, in reading order."""
    return [block for doc in parse.manifest(MANIFEST)
            for block in parse.blocks(doc, (ROOT / doc).read_text())]


@dataclass
class Failure:
    where: str  # document:line
    text: str  # the statement (or what was checked), as written
    detail: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text.splitlines()[0] if self.text else ''}\n{self.detail}"


@dataclass
class Summary:
    """What the run did, printed at its end."""

    run: int = 0
    statements: int = 0
    compared: int = 0
    kubernetes: int = 0
    rendered: int = 0
    skipped: list[str] = field(default_factory=list)
    xfailed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def lines(self, blocks: list[parse.Block]) -> list[str]:
        text = sum(1 for b in blocks if not b.is_command and not b.mark("output"))
        return [f"doc runner: {len(parse.manifest(MANIFEST))} documents, "
                f"{len(blocks) - text} blocks to run or check, {text} text blocks (not commands)",
                f"  run {self.run} blocks ({self.statements} statements), compared "
                f"{self.compared} outputs; checked {self.kubernetes} Kubernetes blocks "
                f"({self.rendered} applies rendered)",
                f"  skipped {len(self.skipped)}:", *(f"    {s}" for s in self.skipped),
                f"  expected failures {len(self.xfailed)}:", *(f"    {s}" for s in self.xfailed),
                f"  failed {len(self.failed)}:", *(f"    {s}" for s in self.failed)]


SUMMARY = Summary()  # the run's, one per process: the tests fill it, conftest prints it


def checkout(into: Path) -> Path:
    """A copy of the working tree, the repository's virtualenv linked in."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, target = ROOT / name, into / name
        if source.is_file() and not source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode & 0o777)
    installed = (ROOT / ".venv" / ".installed").stat().st_mtime
    os.utime(into / "pyproject.toml", (installed - 60, installed - 60))
    (into / ".venv").symlink_to(ROOT / ".venv")
    return into


class Shell:
    """A reader's shell: each statement in bash, in the state the ones before it left."""

    def __init__(self, cwd: Path, env: dict[str, str], work: Path) -> None:
        self.env, self.work = env, work
        self.state = work / "state.sh"
        self.state.write_text(f"cd -- '{cwd}'\n")
        self.count = 0

    def argv(self, text: str) -> list[str]:
        self.count += 1
        statement = self.work / f"statement-{self.count}.sh"
        statement.write_text(text + "\n")
        return ["bash", "--noprofile", "--norc", str(HERE / "step.sh"), str(self.state),
                str(statement)]

    def run(self, text: str, stdin: Path | None = None) -> tuple[int, str]:
        with open(stdin or os.devnull, "rb") as given:
            done = subprocess.run(self.argv(text), env=self.env, stdin=given,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=STATEMENT_TIMEOUT, check=False)
        out = done.stdout.decode(errors="replace")
        (self.work / f"statement-{self.count}.out").write_text(out)  # to look at afterwards
        return done.returncode, out

    def start(self, text: str, log: Path) -> subprocess.Popen[bytes]:
        """The statement in the background, in a process group of its own (a terminal's)."""
        with open(log, "ab") as out:
            return subprocess.Popen(self.argv(text), env=self.env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def var(self, name: str) -> str:
        done = subprocess.run(["bash", "--norc", "-c", 'source "$1"; printf %s "${!2-}"', "_",
                               str(self.state), name], env=self.env, capture_output=True,
                              text=True, check=True)
        return done.stdout


class Server:
    """What serves the API: a process group, stopped as Ctrl-C stops a terminal's."""

    def __init__(self, proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
        self.proc, self.base, self.log = proc, base, log

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the stack is not ready at {self.base}/readyz (exit "
                                   f"{self.proc.poll()}):\n{self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def ready(self) -> bool:
        try:
            return requests.get(self.base + "/readyz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        """SIGINT to the group, then wait until every process of it is gone."""
        group = self.proc.pid
        signal_group(group, signal.SIGINT)
        deadline = time.monotonic() + 60
        self.proc.wait(timeout=60)
        while group_alive(group):
            if time.monotonic() > deadline:
                signal_group(group, signal.SIGKILL)
            time.sleep(0.2)


def signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


class Stack:
    """The run's own stack: ``python -m workers.localstack`` in the checkout."""

    def __init__(self, cwd: Path, env: dict[str, str], base: str, log: Path) -> None:
        self.cwd, self.env, self.base, self.log = cwd, env, base, log
        self.server: Server | None = None

    def start(self) -> None:
        if self.server is not None:
            return  # already up (a block that would have stopped it did not get so far)
        with open(self.log, "ab") as out:
            proc = subprocess.Popen([str(self.cwd / ".venv" / "bin" / "python"), "-m",
                                     "workers.localstack"], cwd=self.cwd, env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.server = Server(proc, self.base, self.log)
        self.server.wait_ready()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


@dataclass
class Run:
    """One block's run, as its check sees it."""

    reader: Reader
    block: parse.Block
    outputs: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(self.outputs)

    def var(self, name: str) -> str:
        return self.reader.shell.var(name)

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        token = (self.reader.cwd / "var" / "admin.token").read_text().strip()
        return requests.request(method, self.reader.base + path, timeout=10,
                                headers={"Authorization": f"Bearer {token}"}, **kwargs)

    def wait(self, task: str, revision: int = 1, timeout: float = 120) -> dict[str, Any]:
        """The task once its ``revision`` is final."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            doc: dict[str, Any] = self.api("GET", f"/api/v1/tasks/{task}").json()
            if doc.get("revision") == revision and doc.get("status") in FINAL:
                return doc
            time.sleep(0.3)
        raise AssertionError(f"task {task} revision {revision} not final: {doc}")


FINAL = {"succeeded", "failed", "rejected", "cancelled"}
Check = Callable[[Run], Iterator[None] | None]


class Reader:
    """One reader going through the documents: a checkout, a stack, a shell."""

    def __init__(self, work: Path, checks: dict[tuple[str, str, int], Check]) -> None:
        self.work, self.checks, self.summary = work, checks, SUMMARY
        self.cwd = checkout(work / "checkout")
        (work / "home").mkdir()
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {"PATH": f"{self.cwd / '.venv' / 'bin'}:{SYSTEM_PATH}",
                    "HOME": str(work / "home"), "LANG": "C.UTF-8", "TERM": "dumb",
                    "COLUMNS": "120", "TASKENV_PORT": str(self.port)}
        self.shell = Shell(self.cwd, self.env, work)
        self.stack = Stack(self.cwd, self.env, self.base, work / "stack.log")
        self.seen: dict[tuple[str, str], int] = {}
        self.slurm: Any = None  # the test cluster, while a Slurm block runs
        self.last: Run | None = None  # the last command block's run (for an output block)
        self.walk: list[Any] | None = None  # doc_blocks' mismatches, once asked for

    def close(self) -> None:
        self.stack.stop()
        if self.slurm is not None:
            self.slurm.stop()

    def check_of(self, block: parse.Block) -> Check | None:
        """The check attached to the block: by document, heading and place under it."""
        key = (block.doc, block.heading)
        self.seen[key] = self.seen.get(key, 0) + 1
        return self.checks.get((*key, self.seen[key]))

    def run(self, block: parse.Block) -> list[Failure]:
        """Run (or check) one block; what failed in it."""
        check = self.check_of(block)
        if block.mark("kustomize"):
            return self.kustomize(block)
        if block.mark("output"):
            return self.compare_block(block)
        if block.mark("stopped"):
            self.stack.stop()
        try:
            return self.commands(block, check)
        finally:
            if block.mark("stopped") or block.mark("serve") or block.mark("slurm"):
                self.stack.start()

    def commands(self, block: parse.Block, check: Check | None) -> list[Failure]:
        run, failures = Run(self, block), []
        site = self.slurm_site(block) if block.mark("slurm") else ()
        self.summary.run += 1
        statements = parse.statements(self.rewrite(block, site), block.where)
        served = statements.pop() if block.mark("serve") or block.mark("slurm") else None
        with checked(run, check, failures):
            failures += self.given(block)
            for statement in statements:
                failures += self.statement(run, statement)
            if served is not None:
                failures += self.serve(block, served)
        self.last = run
        return failures

    def rewrite(self, block: parse.Block, site: tuple[str, ...] = ()) -> str:
        """The block with the documents' address as the stack's (and a Slurm site's paths
        as the test cluster's): the only text the runner changes."""
        text = block.text.replace(DOC_ADDRESS, f"127.0.0.1:{self.port}")
        for path, here in zip(SLURM_SITE, site, strict=False):
            text = text.replace(path, here)
        return text

    def stdin(self, block: parse.Block) -> Path | None:
        given = block.mark("given")
        typed = GIVEN / f"{given.arg}.stdin" if given else None
        return typed if typed is not None and typed.exists() else None

    def given(self, block: parse.Block) -> list[Failure]:
        mark = block.mark("given")
        if mark is None:
            return []
        status, out = self.shell.run(f"source '{GIVEN / mark.arg}.sh'")
        return [] if status == 0 else [Failure(block.where, f"given {mark.arg}",
                                               f"exit {status}\n{out[-2000:]}")]

    def statement(self, run: Run, statement: parse.Statement) -> list[Failure]:
        status, out = self.shell.run(statement.text, self.stdin(run.block))
        run.outputs.append(out)
        self.summary.statements += 1
        where = f"{run.block.doc}:{run.block.line + 1 + statement.line}"
        found = [] if status == 0 else [Failure(where, statement.text,
                                                f"exit {status}\n{out[-2000:]}")]
        return found + self.compare(where, statement.text, statement.expected, out)

    def compare(self, where: str, text: str, expected: list[str], out: str) -> list[Failure]:
        """Each expected output in turn, found in ``out`` after the one before it."""
        at = 0
        for shown in expected:
            self.summary.compared += 1
            found = parse.pattern(shown).search(out, at)
            if found is None:
                return [Failure(where, text, f"printed no {shown!r}:\n{out[-2000:]}")]
            at = found.end()
        return []

    def compare_block(self, block: parse.Block) -> list[Failure]:
        out = self.last.output if self.last else ""
        return self.compare(block.where, "(output block)", [block.text.strip()], out)

    def serve(self, block: parse.Block, statement: parse.Statement) -> list[Failure]:
        """The reader's ``make run`` in place of the run's stack, until one task ran on it."""
        where = f"{block.doc}:{block.line + 1 + statement.line}"
        self.stack.stop()
        log = self.work / "served.log"
        server = Server(self.shell.start(statement.text, log), self.base, log)
        try:
            server.wait_ready()
            return self.one_task(where, statement.text)
        except RuntimeError as error:
            return [Failure(where, statement.text, str(error))]
        finally:
            server.stop()
            self.stop_slurm()

    def one_task(self, where: str, text: str) -> list[Failure]:
        run = Run(self, parse.Block("", 0, "", "", ""))
        made = run.api("POST", "/api/v1/tasks", json={
            "name": "doc-served", "steps": [["sh", "-c", "echo served by this stack"]]})
        if made.status_code != 202:
            return [Failure(where, text, f"a task is refused: {made.status_code} {made.text}")]
        doc = run.wait(made.json()["id"])
        logs = run.api("GET", f"/api/v1/tasks/{doc['id']}/logs").text
        if doc["status"] == "succeeded" and "served by this stack" in logs:
            return []
        return [Failure(where, text, f"a task on it ends {doc['status']}: {doc.get('reason')}"
                                     f"\n{logs[-1500:]}")]

    def slurm_site(self, block: parse.Block) -> tuple[str, str]:
        """The test cluster (started here, with the partition the block names) and a
        directory shared with its node: what the block's site paths stand for."""
        from tests.support.slurm import SlurmCluster, slurm_available

        if not slurm_available():
            raise Unavailable("slurm-wlm and munge (and root) are needed for the Slurm blocks")
        self.slurm = SlurmCluster(self.work / "slurm").start()
        for partition in re.findall(r"TASKENV_SLURM_PARTITION=(\w+)", block.text):
            self.slurm.run("scontrol", "create", f"PartitionName={partition}",
                           f"Nodes={self.slurm.node}", "State=UP")
        (self.work / "slurm-shared").mkdir(exist_ok=True)
        return str(self.slurm.conf), str(self.work / "slurm-shared")

    def stop_slurm(self) -> None:
        if self.slurm is not None:
            self.slurm.stop()
            self.slurm = None

    def kustomize(self, block: parse.Block) -> list[Failure]:
        """What a Kubernetes block applies, rendered, and doc_blocks' checks of its lines."""
        failures, self.summary.kubernetes = [], self.summary.kubernetes + 1
        for flag, target in re.findall(r"kubectl\s+apply\s+(-k|-f)\s+(\S+)", block.text):
            self.summary.rendered += 1
            failures += self.render(block, flag, target)
        return failures + [Failure(m.where, m.text, m.problem) for m in self.k8s(block)]

    def render(self, block: parse.Block, flag: str, target: str) -> list[Failure]:
        if flag == "-f":
            objects = list(yaml.safe_load_all((self.cwd / target).read_text()))
            bad = [o for o in objects if not (o and o.get("kind") and o["metadata"]["name"])]
            return [Failure(block.where, target, f"not manifests: {bad}")] if bad else []
        done = subprocess.run(["kubectl", "kustomize", target], cwd=self.cwd, timeout=120,
                              capture_output=True, text=True, check=False)
        return [] if done.returncode == 0 else [
            Failure(block.where, f"kubectl kustomize {target}", done.stderr[-2000:])]

    def k8s(self, block: parse.Block) -> list[Any]:
        """doc_blocks' mismatches on the block's lines (none if that module is not there)."""
        if self.walk is None:
            self.walk = k8s_mismatches(self.work / "k8s-walk")
        end = block.line + block.text.count("\n") + 1
        return [m for m in self.walk if m.where.rsplit(":", 1)[0] == block.doc
                and block.line <= int(m.where.rsplit(":", 1)[1]) <= end]


class Unavailable(Exception):
    """What a block needs is not on this machine: the block is skipped, saying so."""


def k8s_mismatches(work: Path) -> list[Any]:
    """Every mismatch tests/deploy/doc_blocks.py finds in the Kubernetes docs."""
    try:
        from tests.deploy import doc_blocks
        from tests.deploy.test_k8s_manifests import setting_names
    except ImportError:
        return []
    walk = doc_blocks.walk_docs(ROOT, doc_blocks.kubernetes_docs(ROOT), work)
    return walk.mismatches + doc_blocks.check(walk, ROOT, settings=setting_names())


class checked:  # noqa: N801 - used as a ``with`` statement
    """A block's check around it: a generator check's part before ``yield`` runs before the
    block; the rest (or a plain function) after.  An assertion is a failure of the block."""

    def __init__(self, run: Run, check: Check | None, failures: list[Failure]) -> None:
        self.run, self.check, self.failures = run, check, failures
        self.steps = None

    def __enter__(self) -> None:
        if self.check is not None and inspect.isgeneratorfunction(self.check):
            self.steps = self.check(self.run)
            self.guard(lambda: next(self.steps))

    def __exit__(self, *exc: object) -> None:
        if self.check is None or exc[0] is not None:
            return
        self.guard(lambda: next(self.steps, None) if self.steps else self.check(self.run))

    def guard(self, step: Callable[[], object]) -> None:
        try:
            step()
        except AssertionError as error:
            said = str(error) or traceback.format_tb(error.__traceback__)[-1]
            self.failures.append(Failure(self.run.block.where, f"check {self.check.__name__}",
                                         said[-3000:]))
