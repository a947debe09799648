"""The doctor's budget: whatever a script holds, its reading ends, and a script past the
budget is named too complex (a warning, strict or not).  The work is counted (parser
steps, nodes visited, depth reached), not timed: the machine is shared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.config import process_settings
from shared.doctor import scripts
from shared.doctor.catalog import applying
from shared.doctor.checkup import Doctor
from shared.doctor.preflight import TOO_COMPLEX, UNREAD, UNREADABLE, preflight
from shared.doctor.scripts import (
    MAX_DEPTH,
    MAX_NODES,
    MAX_PARSE_STEPS,
    MAX_SCRIPT_BYTES,
    Budget,
    read,
    read_python,
    read_shell,
)
from shared.env.envlist import Limits
from shared.policy.model import Policy
from shared.policy.scopes import Chain
from shared.task.files import FileLimits
from shared.task.resolution import decide_policy, preview

CORPUS = Path(__file__).parent / "corpus"
CATALOG = applying(True, [], [])
ENV = [{"name": "LR", "value": "0.1"}]
ENV_RESOLVED = [{"name": "LR", "value": "0.1", "source": "user", "scope": None}]

# The inputs, and their kin.
DEEP_SUBSTITUTIONS = "$(" * 20_000 + "x" + ")" * 20_000  # 60 KB
BACKTICKS = "`" * MAX_SCRIPT_BYTES  # 256 KiB, the largest script the doctor reads
DEEP_PARENTHESES = "import os\nos.environ[" + "(" * 50_000 + "'A'" + ")" * 50_000 + "]\n"
DEEP_LISTS = "import os\nx = " + "[" * 50_000 + "os.environ['A']" + "]" * 50_000 + "\n"
DEEP_IFS = ("import os\n" + "".join("    " * i + "if os.environ['A']:\n" for i in range(150))
            + "    " * 150 + "pass\n")
DEEP_SUM = "import os\nos.environ[" + "+".join(["a"] * 50_000) + "]\n"


def many_nodes(n: int) -> str:
    return "import os\nos.environ['A']\nx = [" + "~a," * n + "]\n"  # 3 nodes a term


MANY_NODES = many_nodes(80_000)  # 240 KB
MANY_SUBSTITUTIONS = "`x" * (MAX_SCRIPT_BYTES // 2)  # side by side, 256 KiB

# (path, content, what the reading says it reached, the limit's number)
TOO_COMPLEX_SCRIPTS = [
    ("deep.sh", DEEP_SUBSTITUTIONS, "nested deeper than 256 levels", MAX_DEPTH),
    ("ticks.sh", BACKTICKS, "more than 200,000 syntax nodes", MAX_NODES),
    ("many.sh", MANY_SUBSTITUTIONS, "more than 8,000 parser steps", MAX_PARSE_STEPS),
    ("parens.py", DEEP_PARENTHESES,
     "more than 200 nested brackets (Python's parser's limit)", 200),
    ("lists.py", DEEP_LISTS, "more than 200 nested brackets (Python's parser's limit)", 200),
    ("ifs.py", DEEP_IFS, "more than 100 levels of indentation (Python's parser's limit)", 100),
    ("sum.py", DEEP_SUM, "nested past the depth Python's parser reads", None),
    ("nodes.py", MANY_NODES, "more than 200,000 syntax nodes", MAX_NODES),
]


def reader(path: str) -> Any:
    return read_python if path.endswith(".py") else read_shell


def test_nested_command_substitutions_stop_at_the_depth_limit() -> None:
    budget = Budget()
    reading = read_shell(DEEP_SUBSTITUTIONS, budget)
    assert reading.too_complex == "nested deeper than 256 levels"
    assert reading.limit == MAX_DEPTH and reading.reads == () and not reading.complete
    assert budget.reached == reading.too_complex and budget.depth == MAX_DEPTH + 1
    # Straight down and stopped: a few nodes a level, not the tree's 100,000.
    assert budget.nodes < 2 * MAX_DEPTH
    assert budget.parse_steps < MAX_PARSE_STEPS


def test_past_the_depth_limit_the_walk_costs_the_same_however_deep_the_script() -> None:
    shallow, deep = Budget(), Budget()
    read_shell("$(" * 1_000 + "x" + ")" * 1_000, shallow)
    read_shell(DEEP_SUBSTITUTIONS, deep)
    assert shallow.nodes == deep.nodes
    # The parse is linear in the script: 20 times the text, 20 times the steps (about).
    assert deep.parse_steps <= 22 * shallow.parse_steps


def test_backticks_to_256_kib_stop_at_the_node_limit() -> None:
    budget = Budget()
    reading = read_shell(BACKTICKS, budget)
    assert reading.too_complex == "more than 200,000 syntax nodes" and reading.limit == MAX_NODES
    assert budget.nodes == MAX_NODES + 1  # counted one by one, and not one more
    assert budget.parse_steps < MAX_PARSE_STEPS


def test_a_parse_past_its_steps_is_cancelled_and_the_next_parse_starts_afresh() -> None:
    launch = (CORPUS / "launch.sh").read_text()
    before = read_shell(launch)
    budget = Budget(max_parse_steps=100)  # the full-size case is in the test below
    reading = read_shell(MANY_SUBSTITUTIONS[:64 * 1024], budget)
    assert reading.too_complex == "more than 100 parser steps" and reading.limit == 100
    assert budget.parse_steps == 101 and budget.nodes == 0  # cancelled, never walked
    assert read_shell(launch) == before  # the parser of this thread was reset


@pytest.mark.parametrize("source", [DEEP_PARENTHESES, DEEP_LISTS, DEEP_IFS, DEEP_SUM],
                         ids=["parentheses", "lists", "ifs", "sum"])
def test_python_nested_past_its_parsers_limits_is_too_complex_and_never_walked(
        source: str) -> None:
    budget = Budget()
    reading = read_python(source, budget)
    assert reading.too_complex is not None and reading.reads == ()
    assert reading.error == f"too complex to read: {reading.too_complex}; not read"
    assert budget.nodes == 0


def test_python_past_the_node_limit_stops_counting_there() -> None:
    budget = Budget(max_nodes=1_000)  # the full-size case is in the test below
    reading = read_python(many_nodes(2_000), budget)
    assert reading.too_complex == "more than 1,000 syntax nodes" and reading.reads == ()
    assert budget.nodes == 1_001
    within = Budget()
    assert read_python(many_nodes(2_000), within).complete
    assert within.nodes < 10_000


@pytest.mark.parametrize(("path", "content", "reached", "limit"), TOO_COMPLEX_SCRIPTS,
                         ids=[s[0] for s in TOO_COMPLEX_SCRIPTS])
def test_each_pathological_script_finishes_with_a_too_complex_warning_naming_it(
        path: str, content: str, reached: str, limit: int | None) -> None:
    assert len(content.encode()) <= MAX_SCRIPT_BYTES  # read, not refused for its size
    scripts.CACHE.clear()
    report = preflight([{"path": path, "content": content}], [], CATALOG, strict=True)
    [problem] = report.problems()
    assert problem.rule == TOO_COMPLEX and problem.field == path and problem.limit == limit
    assert problem.message == (f"{path} is too complex for the doctor to read: {reached}; "
                               "it did not read it (the task goes on)")
    assert report.scripts[0]["too_complex"] == reached
    # No clock here: the bound is the counted work (nodes, steps, depth), which a loaded
    # machine cannot stretch; bench/doctor.py measures the time, as a ratio.
    assert read(path, content) is read(path, content)  # cached like any other reading


def test_too_complex_is_a_warning_even_under_strict_env() -> None:
    files = [{"path": "deep.sh", "content": DEEP_SUBSTITUTIONS},
             {"path": "train.py", "content": "import os\nlr = os.environ['LR']\n"}]
    for platform, strict in ((Policy(), True), (Policy(strict_env=True), False)):
        doc = {"id": "t", "name": "t", "revision": 1, "env": ENV, "warnings": [],
               "files": files, "strict_env": strict}
        state, decided = decide_policy(doc, Chain.of(platform), doctor=Doctor(CATALOG))
        assert state == "resolved" and "errors" not in decided
        [warning] = [w for w in decided["warnings"] if w["rule"] == TOO_COMPLEX]
        assert warning["field"] == "deep.sh" and warning["limit"] == MAX_DEPTH
        assert "nested deeper than 256 levels" in warning["message"]


def test_a_script_left_unread_means_no_variable_is_called_unread() -> None:
    plain = {"path": "train.py", "content": "import os\nos.environ.get('EPOCHS', '1')\n"}
    assert [u["name"] for u in preflight([plain], ENV_RESOLVED, CATALOG).unread] == ["LR"]
    deep = {"path": "deep.sh", "content": DEEP_SUBSTITUTIONS}
    assert preflight([plain, deep], ENV_RESOLVED, CATALOG).unread == []  # deep.sh may read LR


WRAPPER = '''#!/usr/bin/env bash
set -euo pipefail
main() {
  local here
  here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
  for host in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
    if [[ -n "${DEBUG:-}" ]]; then
      case "$host" in
        gpu*) echo "$(date +%s) $(printf '%s' "$(echo "$(echo "$(echo "$STAGE")")")")" ;;
        *) while read -r line; do echo "${line:-$(cat "$here/$(basename "$0")")}"; done ;;
      esac
    fi
  done
}
main "$@"
'''


def test_a_real_wrapper_nested_several_levels_is_read_in_full() -> None:
    budget = Budget()
    reading = read_shell(WRAPPER, budget)
    assert reading.error is None and reading.complete and budget.reached is None
    assert [(r.name, r.default, r.function) for r in reading.reads] == [
        ("SLURM_JOB_NODELIST", False, "main"), ("DEBUG", True, "main"),
        ("host", False, "main"), ("STAGE", False, "main"), ("here", False, "main"),
        ("line", True, "main")]
    assert {"here", "host", "line"} <= reading.sets
    assert budget.depth < MAX_DEPTH // 4


def test_nesting_is_read_up_to_the_limit_and_named_past_it() -> None:
    within = read_shell("$(" * 60 + "echo $INNER" + ")" * 60)
    assert [r.name for r in within.reads] == ["INNER"] and within.error is None
    past = read_shell("$(" * 100 + "echo $INNER" + ")" * 100)
    assert past.too_complex == "nested deeper than 256 levels" and past.reads == ()


def test_the_reading_is_linear_in_the_script() -> None:
    line = 'echo "stage $STAGE on $HOSTNAME" >> "${LOG_DIR:-/tmp}/run.log"\n'
    one, two = Budget(), Budget()
    read_shell(line * 500, one)
    read_shell(line * 1_000, two)
    assert two.nodes == 2 * one.nodes - 1  # one root, then the same nodes a line
    assert 1.8 < two.parse_steps / one.parse_steps < 2.2
    source = "import os\n" + "x = os.environ.get('A', '1')\n" * 500
    one, two = Budget(), Budget()
    read_python(source, one)
    read_python(source + source[10:], two)
    assert two.nodes - 3 == 2 * (one.nodes - 3)  # the module and its import, then each line


def test_the_corpus_is_far_inside_the_budget() -> None:
    for path in sorted(CORPUS.iterdir()):
        budget = Budget()
        reading = reader(path.name)(path.read_text(), budget)
        assert reading.complete and budget.reached is None, path.name
        assert budget.nodes < MAX_NODES // 100 and budget.depth < MAX_DEPTH // 8


# --- the files' limits: no file past them is read --------------------------------------

def shell_files(n: int, size: int = 0) -> list[dict[str, str]]:
    return [{"path": f"s{i}.sh", "content": f"echo $V{i}\n" + "#" * size} for i in range(n)]


def test_a_preview_past_max_count_reads_no_file_beyond_the_first_past_it() -> None:
    scripts.CACHE.clear()
    report = preflight(shell_files(110), ENV_RESOLVED, CATALOG, limits=FileLimits())
    assert scripts.CACHE.misses == 100  # read: files 1 to 100; not read: 101 to 110
    assert [s["path"] for s in report.scripts][-2:] == ["s99.sh", "s100.sh"]
    [past] = [p for p in report.problems() if p.rule == UNREADABLE]
    assert past.field == "s100.sh" and past.limit == 100
    assert past.message == ("s100.sh: file 101 of 110, past files.max_count (100 files): the "
                            "doctor read neither it nor the 9 files after it")
    assert report.unread == []  # the files not read may read LR


def test_the_first_file_past_max_bytes_stops_the_reading() -> None:
    scripts.CACHE.clear()
    files = shell_files(5, size=40)  # 49 bytes each
    report = preflight(files, [], CATALOG, limits=FileLimits(max_bytes=100))
    assert scripts.CACHE.misses == 2
    [past] = report.problems()[-1:]
    assert past.field == "s2.sh" and past.limit == 100
    assert past.message == ("s2.sh: with it the files take 147 bytes, past files.max_bytes "
                            "(100): the doctor read neither it nor the 2 files after it")


def test_preview_and_the_policy_stage_stop_at_the_doctors_file_limits() -> None:
    doctor = Doctor(CATALOG, files=FileLimits(max_files=3))
    scripts.CACHE.clear()
    shown = preview([{"name": "V0", "value": "1"}], "p", Chain.of(Policy()), Limits(),
                    {"files": shell_files(50)}, doctor=doctor)
    assert scripts.CACHE.misses == 3 and len(shown["doctor"]["scripts"]) == 4
    assert {w["field"] for w in shown["warnings"] if w["rule"] == UNREADABLE} == {"s3.sh"}
    scripts.CACHE.clear()
    doc = {"id": "t", "name": "t", "revision": 1, "env": [], "warnings": [],
           "files": shell_files(50)}
    decide_policy(doc, Chain.of(Policy()), doctor=doctor)
    assert scripts.CACHE.misses == 3
    assert UNREAD not in {w["rule"] for w in shown["warnings"]}


def test_the_doctors_file_limits_are_the_deployments() -> None:
    assert Doctor(CATALOG).files == FileLimits.from_settings(process_settings())
