"""How the doc runner reads a document and judges a block (no processes)."""

from __future__ import annotations

import pytest

from tests.docs import parse
from tests.docs.runner import Failure, verdict

DOC = """# Title

<!-- doc-test: skip — needs a cluster -->
```sh
kubectl apply -k x
```

## Steps

1. First:

   <!-- doc-test: xfail `two` — two fails until someone fixes it -->
   ```sh
   one \\
     --flag
   two   # -> said two
   #   -> {"id": "<id>", …}
   ```

```json
{"not": "a command"}
```
"""


def test_blocks_their_marks_headings_and_places() -> None:
    skip, steps, text = parse.blocks("d.md", DOC)
    assert (skip.line, skip.mark("skip"), skip.heading) == (4, parse.Mark(
        "skip", "", "needs a cluster"), "Title")
    assert steps.mark("xfail") == parse.Mark("xfail", "two", "two fails until someone fixes it")
    assert (steps.heading, steps.place, steps.text.splitlines()[0]) == ("Steps", 1, "one \\")
    assert not text.is_command and text.lang == "json"


def test_statements_follow_bash_and_take_their_expected_outputs() -> None:
    one, two = parse.statements(parse.blocks("d.md", DOC)[1].text)
    assert one.text == "one \\\n  --flag" and one.expected == []
    assert (two.line, two.expected) == (2, ["said two", '{"id": "<id>", …}'])


def test_commands_on_one_line_are_statements_of_their_own() -> None:
    found = parse.statements("until ready; do sleep 1; done; state   # -> up\nserve &\n")
    assert [s.text for s in found] == ["until ready; do sleep 1; done", "state", "serve &"]
    assert found[1].expected == ["up"]


@pytest.mark.parametrize("line", [
    "<!-- doc-test: sikp — typo -->",  # an unknown kind
    "<!-- doc-test: skip -->",  # no reason
    "<!-- doc-test: xfail `x` -->",
])
def test_a_mark_the_runner_cannot_follow_is_an_error(line: str) -> None:
    with pytest.raises(parse.DocError):
        parse.blocks("d.md", f"{line}\n```sh\ntrue\n```\n")


def test_a_mark_before_no_fence_is_an_error() -> None:
    with pytest.raises(parse.DocError, match="right before a fence"):
        parse.blocks("d.md", "<!-- doc-test: stopped -->\nsome text\n```sh\ntrue\n```\n")


@pytest.mark.parametrize(("shown", "printed", "found"), [
    ('{…"ok": false, …}', '{"errors":[],"ok":false,"x":1}', True),
    ('{"ok": false, …}', '{"errors":[],"ok":false,"x":1}', False),
    ("task <id>", "task 0123456789abcdef0123456789abcdef\n", True),
    ("task <id>", "task 42\n", False),
    ("made <token> at <time>", "made tke_AbC-9_x at 2026-01-31T12:00:00.123Z", True),
    ("revision <n> ...: done", "revision 3 of 4: done", True),
    ("a (b) [c]", "a (b) [c]", True),
    ("a (b) [c]", "a b c", False),
])
def test_placeholders_stand_for_their_kind_and_the_rest_for_itself(
        shown: str, printed: str, found: bool) -> None:
    assert bool(parse.pattern(shown).search(printed)) is found


def block(*marks: parse.Mark) -> parse.Block:
    return parse.Block("d.md", 1, "sh", "true\n", "h", list(marks))


FAILED = Failure("d.md:2", "taskenv two", "exit 1")


def test_an_expected_failure_is_strict() -> None:
    mark = parse.Mark("xfail", "two", "why")
    assert verdict(block(mark), [FAILED]) == ("xfail", "why")
    assert verdict(block(mark), [])[0] == "fail"  # it passes: the mark goes (XPASS)
    assert verdict(block(parse.Mark("xfail", "three", "why")), [FAILED])[0] == "fail"
    assert verdict(block(parse.Mark("xfail", "", "anything")), [FAILED])[0] == "xfail"
    assert verdict(block(), []) == ("pass", "")
