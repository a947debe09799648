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
  own Redis in ``var/``), on a free port given as ``TASKENV_PORT``, exported into the
  shell as a reader who set it for ``make run`` has it.  A block names the address as
  the reader's shell finds it, ``127.0.0.1:${TASKENV_PORT:-8080}`` (tests/docs/
  test_documents.py refuses a block naming ``:8080`` itself), so the block runs as
  written: the runner changes no text of a block but a Slurm block's site paths
  (below);
* **one shell state**: a block is cut into statements by bash's grammar, and each runs
  in ``bash`` (tests/docs/step.sh) from the variables, functions and directory the
  statements before it left, across blocks and documents, with the ``PATH`` of a new
  terminal (the virtualenv is on it once a block sources ``.venv/bin/activate``, as
  the reader does) and a ``HOME`` of its own (``taskenv login`` writes there).  As
  when a block is pasted into a terminal, a failing statement does not stop the ones
  after it; each that exits non-zero is a failure of its block.  Standard input is
  empty unless a ``given`` says what the reader types.
  Each statement and what it printed stay in the run's directory (``statement-N.sh``,
  ``.out``); tests/docs/processes.py holds the checkout, the shell and the stack.

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
  ``slurm.conf`` and a directory of the run (:data:`SLURM_SITE`).
* ``kustomize — why``: a block for a Kubernetes cluster: not run; what it applies
  (``kubectl apply -k DIR`` / ``-f FILE``) is rendered with ``kubectl kustomize`` / read
  in the checkout, and tests/deploy/doc_blocks.py's checks (Secret names and keys,
  images, objects the manifests define) on its lines must find nothing.
* ``given NAME``: tests/docs/given/NAME.sh, if there is one, runs first in the same
  shell (what the block takes as the reader's own); tests/docs/given/NAME.stdin, if
  there is one, is each statement's standard input (what the reader types).  A given
  holds only what a reader brings that no document can: files a block uses ship in the
  repository (``examples/…``) and the block names them by path.
* ``output``: on a text fence right after a command block: what that block prints.

Outputs.  A ``# -> TEXT`` comment under a statement, or an ``output`` block, is compared
with what the statement (the block) printed, stdout and stderr together as a terminal
shows them: TEXT must occur in it, where (:data:`parse.PLACEHOLDERS`) ``…`` or ``...``
stands for any text, ``<id>`` for a task id (32 hex digits), ``<token>`` for an API
token (``tke_…``), ``<time>`` for a time (``2026-01-31T12:00:00.000Z``), ``<n>`` for a
number, and a run of spaces for any spaces or none (JSON is printed compact).

Checks (tests/docs/checks.py) are Python functions attached to a block by its document,
heading and place under it; they assert what a reader sees after it (a task succeeding,
its logs).
"""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.docs import parse
from tests.docs.processes import HERE, ROOT, SYSTEM_PATH, Server, Shell, Stack, checkout
from workers.localstack import free_port

MANIFEST = HERE / "manifest.txt"
GIVEN = HERE / "given"
SLURM_SITE = ("/etc/slurm/slurm.conf", "/shared/taskenv")


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
        return self.reader.api(method, path, **kwargs)

    def wait(self, task: str, revision: int = 1) -> dict[str, Any]:
        return self.reader.wait(task, revision)


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
        self.env = {"PATH": SYSTEM_PATH,
                    "HOME": str(work / "home"), "LANG": "C.UTF-8", "TERM": "dumb",
                    "COLUMNS": "120", "TASKENV_PORT": str(self.port)}
        self.shell = Shell(self.cwd, self.env, work)
        self.stack = Stack(self.cwd, self.env, self.base, work / "stack.log")
        self.slurm: Any = None  # the test cluster, while a Slurm block runs
        self.last: Run | None = None  # the last command block's run (for an output block)
        self.walk: list[Any] | None = None  # doc_blocks' mismatches, once asked for

    def close(self) -> None:
        self.stack.stop()
        self.stop_slurm()

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """The API as the admin of ``make run`` (var/admin.token) calls it."""
        token = (self.cwd / "var" / "admin.token").read_text().strip()
        return requests.request(method, self.base + path, timeout=10,
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

    def run(self, block: parse.Block) -> list[Failure]:
        """Run (or check) one block; what failed in it."""
        check = self.checks.get((block.doc, block.heading, block.place))
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
        run, failures = Run(self, block), list[Failure]()
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
        """The block with a Slurm site's paths as the test cluster's: the only text the
        runner changes."""
        text = block.text
        for path, here in zip(SLURM_SITE, site, strict=False):
            text = text.replace(path, here)
        return text

    def stdin(self, block: parse.Block) -> Path | None:
        given = block.mark("given")
        typed = GIVEN / f"{given.arg}.stdin" if given else None
        return typed if typed is not None and typed.exists() else None

    def given(self, block: parse.Block) -> list[Failure]:
        mark = block.mark("given")
        if mark is None or not (GIVEN / f"{mark.arg}.sh").exists():
            return []
        status, out = self.shell.source(GIVEN / f"{mark.arg}.sh")
        return [] if status == 0 else [Failure(block.where, f"given {mark.arg}",
                                               f"exit {status}\n{out[-2000:]}")]

    def statement(self, run: Run, statement: parse.Statement) -> list[Failure]:
        status, out = self.shell.run(statement.text, self.stdin(run.block))
        run.outputs.append(out)
        self.summary.statements += 1
        where = located(run.block, statement)
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
        where = located(block, statement)
        self.stack.stop()
        log = self.work / "served.log"
        server = Server(self.shell.start(statement.text, log), self.base, log)
        try:
            server.wait_ready()
            return self.one_task(where, statement.text)
        except (RuntimeError, AssertionError) as error:
            return [Failure(where, statement.text, str(error))]
        finally:
            server.stop()
            self.stop_slurm()

    def one_task(self, where: str, text: str) -> list[Failure]:
        """One task of one step through the stack a ``serve`` block started."""
        made = self.api("POST", "/api/v1/tasks", json={
            "name": "doc-served", "steps": [["sh", "-c", "echo served by this stack"]]})
        if made.status_code != 202:
            return [Failure(where, text, f"a task is refused: {made.status_code} {made.text}")]
        doc = self.wait(made.json()["id"])
        logs = self.api("GET", f"/api/v1/tasks/{doc['id']}/logs").text
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
        if shutil.which("kubectl") is None:
            raise Unavailable("kubectl 1.32+ (its kustomize) is needed for the Kubernetes blocks")
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


def verdict(block: parse.Block, failures: list[Failure]) -> tuple[str, str]:
    """``pass``, ``fail`` or ``xfail``, and what to say: every failure must be covered by
    one of the block's xfail marks, and every mark by a failure (strict)."""
    marks = block.all("xfail")
    covers = [(m, f) for m in marks for f in failures if not m.arg or m.arg in f.text]
    unexpected = [f for f in failures if f not in [f for _, f in covers]]
    if unexpected:
        return "fail", "\n\n".join(map(str, unexpected))
    unmet = [m for m in marks if m not in [m for m, _ in covers]]
    if unmet:
        return "fail", f"{block.where}: XPASS(strict), remove the mark: " + "; ".join(
            m.reason for m in unmet)
    return ("xfail", "; ".join(m.reason for m in marks)) if failures else ("pass", "")


def located(block: parse.Block, statement: parse.Statement) -> str:
    """Where a statement starts in its document (``README.md:63``)."""
    return f"{block.doc}:{block.line + 1 + statement.line}"


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


@contextmanager
def checked(run: Run, check: Check | None, failures: list[Failure]) -> Iterator[None]:
    """A block's check around it: a generator check's part before ``yield`` runs before
    the block, the rest (or a plain function) after it, unless the runner itself failed.
    A failed assertion is a failure of the block."""
    if check is None:
        yield
        return
    steps = check(run) if inspect.isgeneratorfunction(check) else None
    if steps is not None:
        failures += guarded(run, check, lambda: next(steps))
    yield
    failures += guarded(run, check, (lambda: next(steps, None)) if steps else lambda: check(run))


def guarded(run: Run, check: Check, step: Callable[[], object]) -> list[Failure]:
    try:
        step()
    except AssertionError as error:
        said = str(error) or traceback.format_tb(error.__traceback__)[-1]
        return [Failure(run.block.where, f"check {check.__name__}", said[-3000:])]
    return []
