"""The claims table: every guarantee the docs state in absolute words names its test.

The rule, as the scanner applies it (no processes, no network; well under a second):

* The documents are README.md and docs/*.md.  Their text is read outside code fences
  (lines between ````` ``` ````` or ``~~~`` fences) and outside HTML comments
  (``<!-- doc-test: … -->`` markers), and in docs/design.md before its section
  "Claims and their tests" (the index itself, which quotes the claims).
* A claim word is one of ``never``, ``always``, ``every`` (and ``everything``,
  ``everyone``, ``everywhere``), ``bounded``, ``refused``, ``cannot``, ``at most`` and
  ``ever`` (the "no … ever" form), as whole words, in any case.
* Every occurrence of a claim word must lie inside a quote of the index for its
  document: a row of the document's table under "Claims and their tests" (the quote,
  then the tests that prove it, or "expected to fail until …" and the work that will
  make it true), or a row of the table "Not taskenv's claims" (the document, the
  quote, and why it is not a guarantee of taskenv: it describes Kubernetes, Slurm,
  Redis or another product, tells the reader what to do, states a limit or a reason, a
  period ("every 2 s") or the benchmark's set-up).  A quote is compared with the
  document's text with runs of white space read as one space, so a quote may span a
  line break.  An occurrence outside every quote fails, naming ``doc:line`` and its
  sentence.
* Every quote must appear in its document exactly once (so it names one place) and
  hold a claim word; every claim names at least one test as ``tests/path.py::test_name``
  (or ``tests/path.py::Class::test_name``) unless it is expected to fail, and every test
  it names must exist: the file, and a function of that name defined in it.

Below the scanner are the tests written for claims that had none, each cited in the
index; they too run on fakeredis, a contract server's thread or the repository's files.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "docs" / "design.md"
SECTION = "## Claims and their tests"
NOT_CLAIMS = "### Not taskenv's claims"
EXPECTED = "expected to fail until"

WORDS = re.compile(r"\b(never|always|every(?:thing|one|where)?|bounded|refused|cannot|"
                   r"at\s+most|ever)\b", re.IGNORECASE)
FENCE = re.compile(r"^\s*(```|~~~)")
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
TEST_REF = re.compile(r"`(tests/[\w/.-]+\.py)::([\w:]+)`")
SPACE = re.compile(r"\s+")
DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\(", re.MULTILINE)
CLASS = re.compile(r"^class[ \t]+(\w+)\b(.*?)(?=^\S|\Z)", re.MULTILINE | re.DOTALL)
BLOCK = re.compile(r"([*+-]|\d+\.|#+|\|)\s")


def documents() -> list[str]:
    return ["README.md"] + sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))


@dataclass(frozen=True)
class Text:
    """A document's prose with white space collapsed, and the line each character is on."""

    flat: str
    lines: tuple[int, ...]

    def line_at(self, pos: int) -> int:
        return self.lines[min(pos, len(self.lines) - 1)]

    def sentence_at(self, pos: int) -> str:
        """The sentence around ``pos``: from the last end (". ", "? ", "! ", a table cell's
        " | " or a paragraph's end) before it to the first after it."""
        ends = (". ", "? ", "! ", " | ", "\0")
        start = max((i + len(e) for e in ends if (i := self.flat.rfind(e, 0, pos)) != -1),
                    default=0)
        stop = min((i + 1 for e in ends if (i := self.flat.find(e, pos)) != -1),
                   default=len(self.flat))
        return self.flat[start:stop].strip(" |\0")


@cache
def prose(doc: str) -> Text:
    """The document outside fences and comments (the index's own section left out),
    white space collapsed; a blank line becomes a NUL, so no sentence spans paragraphs."""
    raw = (ROOT / doc).read_text(encoding="utf-8")
    if doc == "docs/design.md" and SECTION in raw:
        raw = raw[:raw.index(SECTION)]
    raw = COMMENT.sub(lambda m: "\n" * m.group().count("\n"), raw)
    flat: list[str] = []
    lines: list[int] = []
    fenced = False
    for number, line in enumerate(raw.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            line = ""
        elif fenced:
            line = ""
        text = SPACE.sub(" ", line).strip()
        if flat and BLOCK.match(text):  # a list item, heading or table row: a new sentence
            flat.append("\0 ")
            lines.extend([number] * 2)
        piece = (text + " ") if text else "\0 "
        if flat and flat[-1] == "\0 " and piece == "\0 ":
            continue
        flat.append(piece)
        lines.extend([number] * len(piece))
    return Text("".join(flat), tuple(lines))


@dataclass(frozen=True)
class Row:
    doc: str
    quote: str
    tests: tuple[tuple[str, str], ...]  # (file, function path)
    cell: str  # the proof cell, or the reason a quote is not a claim
    claim: bool
    line: int  # in docs/design.md


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def quoted(cell: str) -> str:
    if not (len(cell) >= 2 and cell[0] == cell[-1] == '"'):
        raise ValueError(f"a quote is written between double quotes: {cell}")
    return SPACE.sub(" ", cell[1:-1]).strip()


@cache
def index() -> tuple[Row, ...]:
    """The rows of the section: per document ("### README.md") a table of quote and proof,
    then "### Not taskenv's claims": document, quote, reason."""
    text = INDEX.read_text(encoding="utf-8")
    if SECTION not in text:
        return ()
    start = text[:text.index(SECTION)].count("\n") + 1
    rows: list[Row] = []
    doc = ""
    for number, line in enumerate(text.splitlines()[start:], start + 1):
        if line.startswith("## "):
            break
        if line.startswith("### "):
            doc = line[4:].strip()
            continue
        if not line.startswith('| "') and not (doc == NOT_CLAIMS[4:] and line.startswith("| ")):
            continue
        parts = cells(line)
        if doc == NOT_CLAIMS[4:]:
            if len(parts) != 3 or parts[0] in ("Document", "---"):
                continue
            rows.append(Row(parts[0].strip("`"), quoted(parts[1]), (), parts[2], False, number))
        else:
            assert len(parts) == 2, f"docs/design.md:{number}: a claim row is | quote | tests |"
            tests = tuple(TEST_REF.findall(parts[1]))
            rows.append(Row(doc, quoted(parts[0]), tests, parts[1], True, number))
    return tuple(rows)


def spans(text: Text, quote: str) -> list[tuple[int, int]]:
    found, at = [], text.flat.find(quote)
    while at != -1:
        found.append((at, at + len(quote)))
        at = text.flat.find(quote, at + 1)
    return found


@cache
def defined(path: str) -> frozenset[str]:
    """Each function the file defines (at any depth), as ``name``, and each class's as
    ``Class::name``."""
    text = (ROOT / path).read_text(encoding="utf-8")
    names = set(DEF.findall(text))
    for cls, body in CLASS.findall(text):
        names.update(f"{cls}::{name}" for name in DEF.findall(body))
    return frozenset(names)


def uncovered(doc: str) -> list[str]:
    text = prose(doc)
    covered = [s for row in index() if row.doc == doc for s in spans(text, row.quote)]
    return [f"{doc}:{text.line_at(m.start())}: {m.group()!r} in: {text.sentence_at(m.start())}"
            for m in WORDS.finditer(text.flat)
            if not any(a <= m.start() and m.end() <= b for a, b in covered)]


@pytest.mark.parametrize("doc", documents())
def test_every_claim_word_in_the_docs_is_quoted_in_the_index(doc: str) -> None:
    """Each absolute word of a document stands in a quote of the claims table: a claim
    with its tests, or a sentence listed as not taskenv's claim, with the reason."""
    missing = uncovered(doc)
    assert not missing, (f"{len(missing)} claim word(s) not in docs/design.md's "
                         "'Claims and their tests':\n" + "\n".join(missing))


def test_every_quote_of_the_index_is_found_once_in_its_document() -> None:
    bad = []
    for row in index():
        if row.doc not in documents():
            bad.append(f"docs/design.md:{row.line}: no such document {row.doc!r}")
            continue
        found = len(spans(prose(row.doc), row.quote))
        if found != 1:
            bad.append(f"docs/design.md:{row.line}: {row.quote!r} is found {found} times "
                       f"in {row.doc}" + ("" if found else ": reword the row or the claim"))
        if not WORDS.search(row.quote):
            bad.append(f"docs/design.md:{row.line}: {row.quote!r} holds no claim word")
    assert not bad, "\n".join(bad)


def test_every_claim_names_tests_that_exist() -> None:
    bad = []
    for row in index():
        if not row.claim:
            if not row.cell:
                bad.append(f"docs/design.md:{row.line}: {row.quote!r} gives no reason")
            continue
        if not row.tests and EXPECTED not in row.cell:
            bad.append(f"docs/design.md:{row.line}: {row.quote!r} names no test")
        for path, name in row.tests:
            if not (ROOT / path).is_file():
                bad.append(f"docs/design.md:{row.line}: no file {path}")
            elif name not in defined(path):
                bad.append(f"docs/design.md:{row.line}: {path} defines no {name}")
    assert not bad, "\n".join(bad)


def test_the_index_holds_claims() -> None:
    assert sum(row.claim for row in index()) > 0


# --- Tests for claims that had none ----------------------------------------------------------
#
# Each proves one claim the index cites it for; all run on fakeredis, a contract server
# thread or the files of the repository, and start no process.

ADMIN = "tke_admin-for-the-claims-tests-0123456789abcdef"


def api(stages_run: bool = True, **config: Any) -> tuple[Any, Any]:
    """The API on fakeredis and an admin's client; the enqueue runs validation and
    policy at once, as the workers would (or nothing: ``stages_run=False``)."""
    import fakeredis

    from api import create_app
    from shared.env.envlist import Limits
    from workers import stages

    client = fakeredis.FakeRedis(decode_responses=True)
    app: Any = None

    def enqueue(task_id: str, revision: int) -> None:
        svc = app.extensions["taskenv"]
        if stages_run and stages.validate(svc.tasks, Limits(), task_id, revision):
            stages.apply_policy(svc.tasks, svc.policies, task_id, revision)

    from shared.secrets import new_key
    app = create_app({"admin_token": ADMIN, "secret_keys": new_key(), **config},
                     redis_client=client, enqueue=enqueue)
    web = app.test_client()
    web.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {ADMIN}"
    return app, web


def task_body(**fields: Any) -> dict[str, Any]:
    return {"name": "claims", "steps": [["true"]], "env": [], **fields}


def test_the_documented_default_limits_are_the_settings() -> None:
    """The numbers the README and docs/launchers.md give as defaults and maxima."""
    from api import schemas
    from api.project_actions import FINAL_CONSIDERED
    from shared.config import Settings
    from shared.doctor import scripts
    from shared.env.envlist import MAX_PROBLEMS, Limits
    from shared.store.tasks import TaskStore

    s = Settings()
    assert (s.max_vars, s.max_value_bytes, s.max_env_bytes) == (1000, 128 << 10, 1 << 20)
    assert Limits() == Limits("shell", 1000, 128 << 10, 1 << 20)
    assert (s.max_files, s.max_files_bytes) == (100, 512 << 10)
    assert (s.quota_revisions_per_task, s.max_replicas, s.local_max_running) == (500, 8, 4)
    assert s.log_max_bytes == TaskStore.LOG_LIMIT == 1 << 20 and MAX_PROBLEMS == 100
    assert schemas.MAX_STEPS_BYTES == 64 << 10 and FINAL_CONSIDERED == 1000
    assert scripts.MAX_READS == 5000 and scripts.MAX_SCRIPT_BYTES == 256 << 10
    # podman's side of TASKENV_TASK_MAX_PROCESSES: the containers' pids limit.
    conf = (ROOT / "deploy" / "podman" / "containers.conf").read_text(encoding="utf-8")
    assert f"pids_limit = {s.task_max_processes}" in conf.splitlines()
    assert s.task_max_processes == 1024


def test_a_task_name_over_200_characters_or_an_image_with_a_nul_is_refused() -> None:
    _, web = api()
    for fields, field in (({"name": "n" * 201}, "name"), ({"image": "img\0x"}, "image")):
        refused = web.post("/api/v1/tasks", json=task_body(**fields))
        assert refused.status_code == 422, refused.get_json()
        assert [e["field"] for e in refused.get_json()["errors"]] == [field]
    assert web.post("/api/v1/tasks", json=task_body(name="n" * 200)).status_code == 202


def test_the_audit_entry_of_an_env_change_names_the_variables_never_a_value() -> None:
    _, web = api()
    created = web.post("/api/v1/tasks", json=task_body(env=[
        {"name": "LR", "value": "plain-value-at-creation"}]))
    task_id = created.get_json()["id"]
    changed = web.patch(f"/api/v1/tasks/{task_id}/env", json={
        "set": [{"name": "DATA", "value": "plain-value-of-a-change"}], "unset": ["LR"]})
    assert changed.status_code == 202, changed.get_json()
    entries = web.get("/api/v1/audit").get_json()["items"]
    logged = json.dumps(entries)
    assert {"task.create", "task.env.patch"} <= {e["action"] for e in entries}, logged
    assert '"LR"' in logged and '"DATA"' in logged
    assert "plain-value" not in logged


def test_every_catalog_change_is_audited_naming_the_variable() -> None:
    _, web = api()
    assert web.put("/api/v1/catalog/entries/OUR_LR", json={
        "description": "our learning rate"}).status_code == 200
    assert web.delete("/api/v1/catalog/entries/OUR_LR").status_code == 204
    assert web.put("/api/v1/catalog/settings", json={"builtin": False}).status_code == 200
    entries = web.get("/api/v1/audit").get_json()["items"]
    by_action = {e["action"]: json.dumps(e) for e in entries}
    assert {"catalog.put", "catalog.delete", "catalog.settings"} <= set(by_action)
    assert "OUR_LR" in by_action["catalog.put"] and "OUR_LR" in by_action["catalog.delete"]


def test_the_workers_writes_pass_the_bytes_quota_so_an_accepted_task_finishes() -> None:
    import base64
    import random

    from shared.task import states

    draw = random.Random(7)
    env = [{"name": f"V{i}", "value": base64.b64encode(draw.randbytes(150)).decode()}
           for i in range(300)]

    def stored(app: Any) -> int:
        tasks = app.extensions["taskenv"].tasks
        return int(tasks.r.get(tasks.keys.quota_bytes("user:admin")) or 0)

    def made(**config: Any) -> tuple[Any, Any, str]:
        app, web = api(**config)
        created = web.post("/api/v1/tasks", json=task_body(env=env))
        assert created.status_code == 202, created.get_json()
        return app, web, created.get_json()["id"]

    accepted, resolved = stored(made(stages_run=False)[0]), stored(made()[0])
    limit = (accepted + resolved) // 2  # the creation fits; its resolution does not
    app, web, task_id = made(quota_stored_bytes=limit)
    tasks = app.extensions["taskenv"].tasks
    assert tasks.get(task_id)["state"] == states.RESOLVED  # its resolved env was written
    assert tasks.move(task_id, 1, states.RESOLVED, states.LAUNCHING)
    assert tasks.move(task_id, 1, states.LAUNCHING, states.SUCCEEDED, exit_code=0)
    assert tasks.get(task_id)["state"] == states.SUCCEEDED
    assert stored(app) > limit  # the workers' writes took the owner past the quota
    refused = web.patch(f"/api/v1/tasks/{task_id}/env", json={"set": [
        {"name": "MORE", "value": "y"}]})  # a user's change is judged, and refused
    assert refused.status_code == 409, refused.get_json()
    assert [e["rule"] for e in refused.get_json()["errors"]] == ["quota.stored_bytes"]


def test_a_replicas_identity_is_not_in_the_stored_record() -> None:
    app, web = api()
    task_id = web.post("/api/v1/tasks", json=task_body(replicas=3)).get_json()["id"]
    shown = web.get(f"/api/v1/tasks/{task_id}").get_json()
    assert shown["status"] == "resolved"
    assert "MASTER_ADDR" in json.dumps(shown)  # computed when it is read ...
    client = app.extensions["taskenv"].tasks.r
    for key in client.scan_iter():  # ... and nowhere in Redis
        kind = client.type(key)
        value = client.hgetall(key) if kind == "hash" else client.dump(key)
        for name in ("MASTER_ADDR", "PET_NODE_RANK", "TASK_REPLICA"):
            assert name not in str(value), (key, name)


def test_an_impact_reads_every_unfinished_task_and_the_most_recent_finished_ones() -> None:
    import fakeredis

    from shared.store.tasks import TaskStore
    from shared.task import records, states

    tasks = TaskStore(fakeredis.FakeRedis(decode_responses=True))
    made: dict[str, str] = {}
    order = [states.SUCCEEDED, states.PENDING, states.FAILED, states.RUNNING, states.REJECTED,
             states.SUCCEEDED, states.QUEUED, states.CANCELLED]
    for n, state in enumerate(order):
        doc = {**records.new_task({"name": f"t{n}", "steps": [["true"]], "env": []}, "u"),
               "state": state, "id": f"task{n}"}
        tasks.load_many([doc])
        made[doc["id"]] = state
    unfinished = {t for t, s in made.items() if s not in states.FINAL}
    assert set(tasks.latest_ids(None, 2)) == unfinished | {"task5", "task7"}
    assert set(tasks.latest_ids(None, 1000)) == set(made)


def test_the_doctor_reads_a_script_without_running_it(tmp_path: Path) -> None:
    from shared.doctor.scripts import read

    touched = tmp_path / "touched"
    python = read("train.py", f"import os, pathlib\npathlib.Path({str(touched)!r}).touch()\n"
                              "lr = os.environ['LR']\n")
    shell = read("prepare.sh", f"#!/bin/sh\ntouch '{touched}'\necho \"$DATA\"\n")
    assert python.names == {"LR"} and shell.names == {"DATA"}
    assert not touched.exists()


def test_the_reconciler_leaves_a_launch_younger_than_stuck_after_alone() -> None:
    import fakeredis

    from shared.store.tasks import TaskStore
    from shared.task import states
    from tests.workers.test_reconcile import STUCK, TTL, Backend, Queue, age, task_in
    from workers.reconcile import reconcile_once

    tasks = TaskStore(fakeredis.FakeRedis(decode_responses=True))
    task_id = task_in(tasks, states.LAUNCHING)  # no heartbeat at all, nobody holds it
    queue, backend, since = Queue(), Backend(), age(tasks, task_id)
    for now in (since + TTL + 1, since + 2 * TTL + 2, since + STUCK - 0.5):
        reconcile_once(tasks, backend, queue, STUCK, now=now, heartbeat_ttl=TTL)
    assert queue.sent == [] and tasks.get(task_id)["state"] == states.LAUNCHING
    reconcile_once(tasks, backend, queue, STUCK, now=since + STUCK + 1, heartbeat_ttl=TTL)
    reconcile_once(tasks, backend, queue, STUCK, now=since + STUCK + TTL + 2,
                   heartbeat_ttl=TTL)
    assert queue.sent == [("launch", task_id, 1)]  # the same launch, once it is old enough


def test_a_worker_publishes_its_liveness_four_times_per_stall_window() -> None:
    from types import SimpleNamespace

    from shared.config import Settings
    from workers.liveness import period

    assert period(SimpleNamespace(settings=Settings(consumer_stall_seconds=60))) == 15
    assert period(SimpleNamespace(settings=Settings(consumer_stall_seconds=2))) == 1.0


def test_make_run_gives_its_processes_one_emptied_metrics_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.metrics import MULTIPROC_ENV
    from workers.localstack import metrics_env

    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / "counter_1.db").write_bytes(b"an earlier run's samples")
    assert metrics_env(directory) == {MULTIPROC_ENV: str(directory.resolve())}
    assert list(directory.iterdir()) == []
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path / "chosen"))
    assert metrics_env(directory) == {}  # one set in the environment is used as it is


def test_every_redis_taskenv_starts_has_compact_hashes_and_a_ceiling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from workers import localstack

    started: list[list[str]] = []
    monkeypatch.setattr(localstack.subprocess, "Popen",
                        lambda args, **_: started.append(list(args)) or None)
    monkeypatch.setattr(localstack.RedisServer, "wait_ready", lambda self: None)
    localstack.RedisServer(tmp_path, binary="redis-server").start()
    (args,) = started
    joined = " ".join(args)
    assert "--hash-max-ziplist-value 1024" in joined and "--maxmemory 1gb" in joined
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    command = " ".join(compose["services"]["redis"]["command"])
    assert "--hash-max-ziplist-value 1024" in command and "--maxmemory " in command


def test_the_stylesheet_outlines_the_focus_and_never_wraps_a_name() -> None:
    css = (ROOT / "api" / "console" / "static" / "style.css").read_text(encoding="utf-8")
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.DOTALL)
    rules = dict((sel.strip(), body) for sel, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css))
    focus = next(body for sel, body in rules.items() if sel.endswith(":focus-visible"))
    assert re.search(r"outline:\s*[1-9]", focus)
    assert not re.search(r"outline:\s*(none|0)\b", css)
    names = next(body for sel, body in rules.items()
                 if "code.name" in [part.strip() for part in sel.split(",")])
    assert "white-space: nowrap" in names and "word-break: normal" in names


def test_the_import_contracts_of_make_lint_hold() -> None:
    """Two of `make lint`'s import-linter contracts (pyproject.toml), read with grimp as
    import-linter reads them: the API imports neither Celery nor a stage, the reconciler or
    a launcher (it reaches them through workers.services, which loads them inside
    functions); a launcher imports no stage, the Celery app or Celery, even indirectly."""
    import grimp

    graph = grimp.build_graph("api", "workers", "shared", include_external_packages=True,
                              cache_dir=None)
    for module in ("celery", "workers.celery_app", "workers.tasks", "workers.stages",
                   "workers.observe", "workers.liveness", "workers.launchers",
                   "workers.reconcile"):
        assert not graph.direct_import_exists(importer="api", imported=module,
                                              as_packages=True), module
    for module in ("workers.stages", "workers.tasks", "workers.celery_app",
                   "workers.reconcile", "workers.services", "celery"):
        assert not graph.chain_exists(importer="workers.launchers", imported=module,
                                      as_packages=True), module


def test_no_launcher_runs_a_command_through_a_shell() -> None:
    """No call in workers/ passes ``shell=True`` or goes through ``os.system``/``popen``:
    every program is started from an argv list."""
    found = []
    for path in sorted((ROOT / "workers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("system", "popen") and \
                    isinstance(func.value, ast.Name) and func.value.id == "os":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: os.{func.attr}")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                              and kw.value.value is False):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: shell=")
    assert not found, found


def test_no_module_of_taskenv_names_munges_key() -> None:
    """Slurm's commands authenticate through munged: no module of taskenv opens its key."""
    named = [str(p.relative_to(ROOT)) for package in ("api", "workers", "shared", "cli")
             for p in (ROOT / package).rglob("*.py")
             if "munge.key" in p.read_text(encoding="utf-8")]
    assert named == []


def test_the_local_runner_gets_its_workload_on_stdin_and_nothing_on_its_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner a launch hands its revision to, and the spare it starts for the next:
    neither has a value of the task on its command line or in its environment."""
    import io
    import sys
    from types import SimpleNamespace

    from workers.launchers.local import launcher as local
    from workers.launchers.local import spare

    class Proc:
        pid = 4242

        def __init__(self, args: list[str], **kw: Any) -> None:
            self.args, self.env = list(args), dict(kw["env"])
            self.stdin = Sent()
            calls.append(self)

        def poll(self) -> None:
            return None

        def wait(self) -> int:  # what the launcher's reaping thread waits on
            return 0

    class Sent(io.BytesIO):
        def close(self) -> None:
            self.kept = self.getvalue()
            super().close()

    calls: list[Proc] = []
    monkeypatch.setattr(spare.subprocess, "Popen", Proc)
    # The launcher keeps the runners it starts, to reap them later, and its spare: these
    # stand-ins must not stay there for the tests after this one.
    monkeypatch.setattr(local, "_RUNNERS", [])
    monkeypatch.setattr(spare, "SPARE", spare.Spare())
    spec = {"env": {"TOKEN": "s3cret-value-on-stdin"}, "redis_url": "redis://:pw@host/0"}
    local.LocalLauncher._start_runner(SimpleNamespace(reap=lambda: None), tmp_path, spec,
                                      "single")
    taken, next_one = calls
    assert taken.args == [sys.executable, "-m", spare.ENTRY]
    assert next_one.args == [sys.executable, "-m", spare.ENTRY, spare.SPARE_FLAG]
    for proc in calls:
        assert set(proc.env) <= {"PATH", "PYTHONPATH", *spare.RUNNER_PASSES}
        assert "s3cret" not in json.dumps([proc.args, proc.env])
    assert json.loads(taken.stdin.kept) == {**spec, "run_dir": str(tmp_path),
                                            "runner": "single"}
    assert next_one.stdin.getvalue() == b""  # it waits for the next launch's spec


def test_a_slurm_job_that_can_never_run_is_failed_once_stuck() -> None:
    """A pending job's reason Slurm says waiting will not cure is one the reconciler fails
    once stuck (as for a container that can never start)."""
    from workers.launchers.slurm.launcher import SlurmLauncher
    from workers.launchers.slurm.submit import listed_outcome

    for reason in ("BadConstraints", "PartitionNodeLimit", "InvalidAccount"):
        seen = listed_outcome({"job_state": "PENDING", "state_reason": reason,
                               "exit_code": 0, "min_memory": "100M"})
        assert seen.state == "running" and seen.reason in SlurmLauncher.never_starts
    waiting = listed_outcome({"job_state": "PENDING", "state_reason": "Resources",
                              "exit_code": 0, "min_memory": "100M"})
    assert waiting.reason not in SlurmLauncher.never_starts


def test_the_kubernetes_launcher_leaves_the_kubeconfig_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.config import Settings
    from tests.contract.k8s_api import FakeKubeApi
    from tests.workers.conftest import RecordingHooks
    from tests.workers.launchers.kubernetes.test_kubernetes_launcher import NS, workload
    from workers.launchers.registry import make_launcher

    with FakeKubeApi() as server:
        kubeconfig = tmp_path / "config"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
            "users": [{"name": "fake", "user": {"token": "t0ken"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
        before = kubeconfig.read_bytes(), kubeconfig.stat().st_mtime_ns
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        launcher = make_launcher(Settings(launcher="kubernetes", kube_namespace=NS))
        try:
            assert launcher.launch(workload(), RecordingHooks().hooks).state == "running"
        finally:
            launcher.api.close()
        assert (kubeconfig.read_bytes(), kubeconfig.stat().st_mtime_ns) == before


def test_a_refused_owner_patch_leaves_the_task_running_with_a_warning() -> None:
    from shared.task.manifest import secret_name
    from tests.contract.k8s_api import FakeKubeApi
    from tests.workers.conftest import RecordingHooks
    from tests.workers.launchers.kubernetes.test_kubernetes_launcher import (
        NS,
        SECRETS,
        make,
        workload,
    )

    with FakeKubeApi() as server:
        launcher = make(server)
        w, hooks = workload(), RecordingHooks()
        server.script("PATCH", f"{SECRETS}/{secret_name(w)}", 403, times=None)
        try:
            assert launcher.launch(w, hooks.hooks).state == "running"
        finally:
            launcher.api.close()
        assert hooks.started == 1 and len(server.stored("job", NS)) == 1
        assert "warning" in hooks.text and "outlive its job" in hooks.text


def test_a_form_sent_back_with_a_mistake_shows_the_uploaded_files_too() -> None:
    import io

    from tests.api.conftest import FORM_ID, Browser

    app, _ = api()
    b = Browser(app.test_client())
    assert b.login(ADMIN).status_code == 302
    form_id = FORM_ID.search(b.get("/ui/tasks/new").text).group(1)
    resp = b.client.post("/ui/tasks/new", content_type="multipart/form-data", data={
        "csrf": b.csrf(), "form_id": form_id, "name": "with-files", "steps": "true\n",
        "file-0-path": "../escape.sh", "file-0-content": "echo typed-content\n",
        "files_upload": (io.BytesIO(b"print('uploaded-content')\n"), "train.py")})
    assert resp.status_code == 422
    assert "typed-content" in resp.text and "uploaded-content" in resp.text
    assert 'value="train.py"' in resp.text and 'value="../escape.sh"' in resp.text
    assert app.extensions["taskenv"].tasks.page().items == []
