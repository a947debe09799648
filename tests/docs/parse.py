"""The documents as the doc runner reads them: fenced blocks, their marks, their commands.

A fence whose language is ``sh``, ``bash`` or ``shell`` holds commands; every other
fence (``json``, ``yaml``, a listing with no language) is text and is never run, unless
it is marked ``output`` (then it is what the command block before it prints).

A block is marked by HTML comments on the lines right before its fence, one mark a line::

    <!-- doc-test: KIND [`ARG` | ARG] [— REASON] -->

Kinds (:data:`KINDS`): ``skip``, ``xfail``, ``kustomize`` (each with its reason),
``stopped``, ``serve``, ``slurm``, ``given NAME``, ``output``.  An unknown kind, a
``skip``/``xfail``/``kustomize`` without a reason and a mark that stands before no
fence are errors: nothing is left out without saying so.

A command block is cut into statements by bash's own grammar (tree-sitter-bash), so a
command spread over lines with quotes and ``\\`` is one statement.  A comment
``# -> TEXT`` under a statement (or after it, on its line) is what that statement prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

COMMANDS = {"sh", "bash", "shell"}
KINDS = {"skip", "xfail", "kustomize", "stopped", "serve", "slurm", "given", "output"}
NEEDS_REASON = {"skip", "xfail", "kustomize"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```|~~~)(?P<lang>[\w+-]*)\s*$")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*$")
MARK = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<kind>[a-z]+)"
                  r"(?:\s+(?:`(?P<quoted>[^`]*)`|(?P<word>[^\s`—]+)))?"
                  r"\s*(?:—\s*(?P<reason>.*?))?\s*-->\s*$")
MARKED = re.compile(r"^\s*<!--\s*doc-test:")
EXPECTED = re.compile(r"^#\s*->\s?(?P<text>.*)$")


class DocError(ValueError):
    """A document the runner cannot read as it is: say where and why."""


@dataclass(frozen=True)
class Mark:
    kind: str
    arg: str = ""
    reason: str = ""


@dataclass
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    heading: str
    marks: list[Mark] = field(default_factory=list)
    place: int = 0  # 1 for the first command block under its heading, 2 for the next, ...

    @property
    def is_command(self) -> bool:
        return self.lang in COMMANDS

    def mark(self, kind: str) -> Mark | None:
        return next((m for m in self.marks if m.kind == kind), None)

    def all(self, kind: str) -> list[Mark]:
        return [m for m in self.marks if m.kind == kind]

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass
class Statement:
    line: int  # within the block, 0-based
    text: str
    expected: list[str] = field(default_factory=list)


def parse_mark(line: str, where: str) -> Mark:
    found = MARK.match(line)
    if not found or found["kind"] not in KINDS:
        raise DocError(f"{where}: not a doc-test mark of a known kind ({sorted(KINDS)}): {line}")
    mark = Mark(found["kind"], found["quoted"] or found["word"] or "", found["reason"] or "")
    if mark.kind in NEEDS_REASON and not mark.reason:
        raise DocError(f"{where}: a {mark.kind} mark says why, after an em dash: {line}")
    return mark


def blocks(doc: str, text: str) -> list[Block]:
    """Every fenced block of a document, with its marks and the heading it is under."""
    found: list[Block] = []
    lines, heading, marks, i = text.splitlines(), "", [], 0
    while i < len(lines):
        line, where = lines[i], f"{doc}:{i + 1}"
        if MARKED.match(line):
            marks.append(parse_mark(line, where))
        elif fence := FENCE.match(line):
            start, (i, body) = i + 1, closing(lines, i, fence)
            found.append(Block(doc, start, fence["lang"], body, heading, marks))
            found[-1].place = sum(b.heading == heading and b.is_command for b in found)
            marks = []
        elif marks:
            raise DocError(f"{where}: a doc-test mark must stand right before a fence")
        elif title := HEADING.match(line):
            heading = title["title"]
        i += 1
    return found


def closing(lines: list[str], start: int, fence: re.Match[str]) -> tuple[int, str]:
    """The index of the fence closing the one at ``start``, and the body (dedented)."""
    indent = len(fence["indent"])
    for end in range(start + 1, len(lines)):
        if lines[end].strip() == fence["fence"]:
            body = [line[indent:] if line[:indent].isspace() else line.lstrip()
                    for line in lines[start + 1:end]]
            return end, "\n".join(body) + "\n"
    raise DocError(f"line {start + 1}: a fence that never closes")


@cache
def bash_parser():  # type: ignore[no-untyped-def]
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def statements(text: str, where: str = "") -> list[Statement]:
    """The block's top-level commands, each with the outputs its ``# ->`` comments show
    (commands on one line, ``a; b``, are two; ``a &`` stays one, run in the background)."""
    source = text.encode()
    tree = bash_parser().parse(source)
    if tree.root_node.has_error:
        raise DocError(f"{where}: bash cannot parse this block")
    found: list[Statement] = []
    for node in tree.root_node.children:
        body = source[node.start_byte:node.end_byte].decode()
        if not node.is_named:  # a separator between commands on one line: `a; b`, `a & b`
            if body == "&" and found:
                found[-1].text += " &"
        elif node.type != "comment":
            found.append(Statement(node.start_point.row, body))
        elif (expected := EXPECTED.match(body)) and found:
            found[-1].expected.append(expected["text"])
    return found


# Placeholders of an expected output: what they stand for in what a command prints.
PLACEHOLDERS = {
    "…": r".*?",
    "...": r".*?",
    "<id>": r"[0-9a-f]{32}",
    "<token>": r"tke_[A-Za-z0-9_-]+",
    "<time>": r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?Z?",
    "<n>": r"\d+",
}
PIECES = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS) + r"|\s+")


def pattern(expected: str) -> re.Pattern[str]:
    """An expected output as a regular expression: placeholders stand for what they name,
    a run of spaces for any spaces or none, every other character for itself."""
    out, at = [], 0
    for piece in PIECES.finditer(expected):
        out.append(re.escape(expected[at:piece.start()]))
        out.append(PLACEHOLDERS.get(piece[0], r"\s*"))
        at = piece.end()
    out.append(re.escape(expected[at:]))
    return re.compile("".join(out), re.S)


def manifest(path: Path) -> list[str]:
    """The documents in reading order: one path a line, ``#`` starts a comment."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]
