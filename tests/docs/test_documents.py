"""The documents, run: every shell block of the manifest's documents is a test, in order.

One reader for the module (tests/docs/runner.py) carries the checkout, the stack and the
shell state from each block to the next, so the tests must run in the order collected
(plain ``pytest``, or ``make docs-test``; not spread over xdist workers).  A block
marked ``skip`` is skipped with its reason; one marked ``xfail`` must fail, and only as
its marks say (strict: a block that passes is reported, so the mark goes).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.docs import parse, runner
from tests.docs.checks import CHECKS
from tests.docs.runner import Failure, Reader

pytestmark = pytest.mark.docs
BLOCKS = runner.documents()
RUN = [b for b in BLOCKS if b.is_command or b.mark("output")]
SUMMARY = runner.SUMMARY


def param(block: parse.Block):  # type: ignore[no-untyped-def]
    skip = block.mark("skip")
    marks = [pytest.mark.skip(reason=f"{block.where}: {skip.reason}")] if skip else []
    return pytest.param(block, marks=marks, id=f"{block.where} {block.heading}"[:90])


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    """The one reader of this module's blocks; its stack stops when they are done."""
    found = Reader(tmp_path_factory.mktemp("doc-reader"), CHECKS)
    try:
        found.stack.start()
        yield found
    finally:
        found.close()


def judge(block: parse.Block, failures: list[Failure]) -> None:
    verdict, said = runner.verdict(block, failures)
    if verdict == "fail":
        SUMMARY.failed.append(block.where)
        pytest.fail(said, pytrace=False)
    if verdict == "xfail":
        print("\n\n".join(map(str, failures)))  # what failed as expected (shown with -s)
        SUMMARY.xfailed.append(f"{block.where}: {said}")
        pytest.xfail(said)


@pytest.mark.parametrize("block", [param(b) for b in RUN])
def test_block(reader: Reader, block: parse.Block) -> None:
    try:
        failures = reader.run(block)
    except runner.Unavailable as missing:
        SUMMARY.skipped.append(f"{block.where}: {missing}")
        pytest.skip(str(missing))
    except Exception:
        SUMMARY.failed.append(f"{block.where} (the runner could not run it)")
        raise
    judge(block, failures)


def test_the_manifest_names_every_document_once() -> None:
    listed = parse.manifest(runner.MANIFEST)
    root = runner.ROOT
    docs = {str(p.relative_to(root)) for pattern in ("docs/*.md", "deploy/*/README.md",
                                                     "examples/*/README.md")
            for p in root.glob(pattern)}
    assert listed[0] == "README.md" and len(set(listed)) == len(listed)
    assert docs | {"README.md"} == set(listed), "add it to tests/docs/manifest.txt"


def test_every_check_names_a_block() -> None:
    counted: dict[tuple[str, str], int] = {}
    for block in (b for b in BLOCKS if b.is_command):
        counted[(block.doc, block.heading)] = counted.get((block.doc, block.heading), 0) + 1
    for doc, heading, n in CHECKS:
        assert counted.get((doc, heading), 0) >= n, f"no block {n} under {doc} § {heading}"


def test_every_marked_block_says_why() -> None:
    for block in BLOCKS:
        for mark in block.marks:
            assert mark.kind not in parse.NEEDS_REASON or re.search(r"\w", mark.reason)
        assert block.is_command or not block.marks or block.mark("output"), \
            f"{block.where}: only command blocks and output blocks take marks"
        for given in block.all("given"):
            assert any((runner.GIVEN / f"{given.arg}{kind}").is_file()
                       for kind in (".sh", ".stdin")), f"{block.where}: no {given}"


RUNS = [b for b in BLOCKS if b.is_command and not b.mark("skip") and not b.mark("kustomize")]
# How a block names where make run listens: as the reader's shell finds it.
PORT = re.compile(r"\$\{TASKENV_(?:API_)?PORT:-8080\}")


def test_a_block_names_the_port_as_the_readers_shell_finds_it() -> None:
    """``127.0.0.1:${TASKENV_PORT:-8080}``, never 8080 itself: the runner rewrites no
    address, so a block that pins 8080 would talk to whatever listens there, not to the
    stack the reader (and the runner) started on TASKENV_PORT."""
    pinned = [f"{b.where}: {line.strip()}" for b in BLOCKS if b.is_command
              for line in b.text.splitlines() if "8080" in PORT.sub("", line)]
    assert not pinned, "say ${TASKENV_PORT:-8080}:\n" + "\n".join(pinned)


def arguments(block: parse.Block) -> Iterator[tuple[str, str]]:
    """Each word a block passes to a command, or redirects output to (``written``), in
    the order the block says them."""
    source = block.text.encode()
    nodes = [parse.bash_parser().parse(source).root_node]
    while nodes:
        node = nodes.pop()
        nodes += reversed(node.children)
        parent = node.parent
        if node.type != "word" or parent is None:
            continue
        text = source[node.start_byte:node.end_byte].decode()
        if parent.type == "command":
            yield "read", text
        elif parent.type == "file_redirect" and OUT.match(source, parent.start_byte):
            yield "written", text


OUT = re.compile(rb"\d*&?>")  # a redirect of output (>, >>, 2>, &>)
FILE = re.compile(r"^[\w./-]+\.(?:ya?ml|json|py|env|sh|toml)$|(?:^|/)\.env$")


def test_each_file_a_block_passes_ships_in_the_repository_or_is_made_before() -> None:
    """A block pastes as written: each file it hands a command (a task file, a .env, a
    script) is in the repository, named by its path, or written by a statement before
    it; nothing the runner makes in its place (a given is what the reader types)."""
    made: set[str] = set()
    missing = []
    for block in RUNS:
        for how, word in arguments(block):
            if how == "written":
                made.add(word)
            elif FILE.search(word) and word not in made and not (runner.ROOT / word).is_file():
                missing.append(f"{block.where}: {word}")
    assert not missing, "\n".join(missing)


VENV = re.compile(r"(?:^|[\s;|&(])(taskenv|python)\s")
ACTIVATE = re.compile(r"(?:^|[\s;&])(?:\.|source)\s+\.venv/bin/activate\b")


def test_the_first_block_to_run_a_command_of_the_virtualenv_activates_it() -> None:
    """``taskenv`` and the virtualenv's ``python`` are on the PATH only after
    ``. .venv/bin/activate``: the block where the reader first meets one says so, in
    a statement before it (the runner's shell starts with a new terminal's PATH)."""
    for command in ("taskenv", "python"):
        first = next(b for b in RUNS if any(command in VENV.findall(s.text)
                                            for s in parse.statements(b.text)))
        said = [s.text for s in parse.statements(first.text)]
        using = next(i for i, text in enumerate(said) if command in VENV.findall(text))
        assert any(ACTIVATE.search(text) for text in said[:using]), \
            f"{first.where}: activate the virtualenv before the first {command}"
