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
            assert (runner.GIVEN / f"{given.arg}.sh").is_file(), f"{block.where}: no {given}"
