"""The static reader over a corpus of real-looking training scripts, traps included."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.doctor import scripts
from shared.doctor.scripts import Read, Unknowable, language_of, read, read_python, read_shell

CORPUS = Path(__file__).parent / "corpus"


def reading_of(name: str) -> scripts.Reading:
    return read(name, (CORPUS / name).read_text())


def reads(reading: scripts.Reading) -> dict[str, list[tuple[int, bool, str | None]]]:
    found: dict[str, list[tuple[int, bool, str | None]]] = {}
    for r in reading.reads:
        found.setdefault(r.name, []).append((r.line, r.default, r.function))
    return found


def test_argparse_script_reads_with_and_without_defaults() -> None:
    found = reads(reading_of("argparse_env.py"))
    assert found == {"LR": [(8, True, "parse")], "EPOCHS": [(9, True, "parse")],
                     "DATA_DIR": [(10, False, "parse")],
                     "WANDB_RUN_NAME": [(16, False, None)]}


def test_huggingface_style_aliases_run_time_names_and_uncalled_functions() -> None:
    reading = reading_of("hf_style.py")
    found = reads(reading)
    assert found["MODEL_NAME"] == [(5, True, None)]  # from os import environ as env
    assert found["HF_TOKEN"] == [(6, False, None)]
    assert found["HF_HOME"] == [(8, False, None)]  # getenv without a default
    assert found["STAGE"] == [(9, True, None)]
    # Read inside a function nothing calls: still a read, with its function named.
    assert found["HUB_REPO"] == [(14, False, "push_to_hub")]
    # Built at run time: reported as unknowable, never guessed as LR_PRETRAIN.
    assert reading.unknowable == (Unknowable(10, "'LR_' + stage.upper()"),)
    assert not any(name.startswith("LR_") for name in found)


def test_torchrun_entry_membership_tests_and_the_scripts_own_assignments() -> None:
    reading = reading_of("torchrun_entry.py")
    found = reads(reading)
    assert found["RESUME_FROM"] == [(8, True, None), (9, False, None)]
    # "X" in os.environ guards the later read; os.environ["X"] = ... sets it.
    assert {"RESUME_FROM", "TOKENIZERS_PARALLELISM"} <= reading.sets
    assert found["BATCH_SIZE"] == [(7, False, None)]


def test_shell_wrapper_quotes_comments_defaults_and_functions() -> None:
    reading = reading_of("launch.sh")
    assert reading.language == "shell" and reading.error is None
    found = reads(reading)
    assert "NCCL_DEBUG" not in found  # in a comment
    assert "NOT_A_READ" not in found  # single quotes do not expand
    assert found["OMP_NUM_THREADS"] == [(4, True, None)]  # ${X:-4}
    assert found["NPROC_PER_NODE"] == [(5, True, None)]  # ${X-1}
    assert found["LOG_DIR"] == [(7, False, "log")]
    assert found["PET_NNODES"] == [(8, False, None)]
    assert found["EPOCHS"] == [(8, False, None)]  # ${EPOCHS}
    assert {"OMP_NUM_THREADS", "NPROC"} <= reading.sets


@pytest.mark.parametrize(("source", "expected"), [
    ("echo $A ${B} ${C:-x} ${D-x} ${E:=x} ${F:+x}",
     [("A", False), ("B", False), ("C", True), ("D", True), ("E", True), ("F", True)]),
    ('echo "$A" \'$B\' "${C}"', [("A", False), ("C", False)]),
    ("# $A\necho ok # $B", []),
    ("echo $1 $@ $# $? $$", []),
    ("echo ${#ARR}", [("ARR", True)]),
    ('cat <<EOF\n$HEREDOC\nEOF', [("HEREDOC", False)]),
    ("x=$((N + 1))", []),
    ("echo $(printf %s \"$INNER\")", [("INNER", False)]),
])
def test_shell_forms(source: str, expected: list[tuple[str, bool]]) -> None:
    assert [(r.name, r.default) for r in read_shell(source).reads] == expected


def test_shell_indirect_names_are_unknowable() -> None:
    reading = read_shell('echo "${!REF}"')
    assert reading.reads == () and reading.unknowable[0].expression == "${!REF}"


def test_python_forms_and_aliases() -> None:
    source = ("import os as o\nfrom os import getenv as ge\n"
              "a = o.environ['A']\nb = ge('B', 'x')\nc = o.getenv(key='C')\n"
              "d = o.environ.setdefault('D', '1')\ne = o.environ.pop('E', None)\n"
              "del o.environ['F']\nname = 'G'\ng = o.environ[name]\n")
    reading = read_python(source)
    assert [(r.name, r.default) for r in reading.reads] == [
        ("A", False), ("B", True), ("C", False), ("D", True), ("E", True)]
    assert reading.unknowable == (Unknowable(10, "name"),)


def test_a_name_given_to_the_environment_is_read_through() -> None:
    """``env = os.environ`` (examples/linear-regression/train.py): its reads are the
    script's reads, as are those of ``getenv = os.getenv``."""
    source = ("import os\nenv = os.environ\nget = os.getenv\n"
              "def main():\n    lr = float(env['LR'])\n    return env.get('E', 1), get('G')\n")
    reading = read_python(source)
    assert [(r.name, r.line, r.default, r.function) for r in reading.reads] == [
        ("LR", 5, False, "main"), ("E", 6, True, "main"), ("G", 6, False, "main")]
    example = Path(__file__).parents[3] / "examples" / "linear-regression" / "train.py"
    assert {"LEARNING_RATE", "EPOCHS", "SEED", "RUN_NOTE", "DATA_DIR"} <= \
        read("train.py", example.read_text()).names


def test_an_unparsable_python_file_says_so() -> None:
    reading = read("broken.py", "import os\nos.environ['A']\ndef (:\n")
    assert reading.language == "python" and reading.reads == ()
    assert reading.error is not None and "line 3" in reading.error


def test_a_file_that_never_names_the_environment_is_not_even_parsed() -> None:
    assert read_python("def (:\n") == scripts.Reading("python")


def test_language_by_suffix_or_shebang() -> None:
    assert language_of("train.py", "") == "python"
    assert language_of("run", "#!/usr/bin/env python3\n") == "python"
    assert language_of("run", "#!/bin/sh\n") == "shell"
    assert language_of("wrap.bash", "") == "shell"
    assert language_of("config.yaml", "a: $B") is None
    assert read("config.yaml", "a: $B").reads == ()


def test_readings_are_cached_by_content_not_by_path() -> None:
    scripts.CACHE.clear()
    first = read("a.py", "import os\nos.environ['X']\n")
    again = read("b.py", "import os\nos.environ['X']\n")
    assert again is first and scripts.CACHE.hits == 1 and scripts.CACHE.misses == 1
    read("a.py", "import os\nos.environ['Y']\n")
    assert scripts.CACHE.misses == 2


def test_the_cache_is_bounded() -> None:
    cache = scripts._Cache(size=3)
    for i in range(10):
        cache.put(("python", str(i)), scripts.Reading("python"))
    assert list(cache.entries) == [("python", "7"), ("python", "8"), ("python", "9")]


def test_a_huge_script_is_not_read() -> None:
    reading = read("big.py", "#" * (scripts.MAX_SCRIPT_BYTES + 1))
    assert reading.reads == () and "not read" in (reading.error or "")


def test_read_dataclass_is_plain_data() -> None:
    assert Read("A", 1, False).function is None


# --- hostile scripts: bounded work, a clear word, never an exception ------------------------

def test_a_python_expression_nested_past_the_interpreters_limit_is_too_complex() -> None:
    reading = read_python("import os\nos.environ[" + "+".join(["a"] * 50000) + "]\n")
    assert reading.reads == () and not reading.complete
    assert reading.too_complex == "nested past the depth Python's parser reads"


def test_reads_per_script_are_capped() -> None:
    python = read_python("import os\n" + "os.environ['A']\n" * (scripts.MAX_READS + 10))
    shell = read_shell("echo $A\n" * (scripts.MAX_READS + 10))
    for reading in (python, shell):
        assert len(reading.reads) == scripts.MAX_READS
        assert reading.error == (f"more than {scripts.MAX_READS} reads: only the first "
                                 f"{scripts.MAX_READS} are used")


def test_deeply_nested_shell_and_unterminated_quotes_do_not_raise() -> None:
    assert read_shell("$(" * 3000 + "echo" + ")" * 3000).reads == ()
    assert read_shell('echo "${A').error == "could not be parsed in full"


def test_the_innermost_shell_function_is_named() -> None:
    reading = read_shell("outer() {\n  inner() { echo $A; }\n  echo $B\n}\necho $C\n")
    assert [(r.name, r.function) for r in reading.reads] == [
        ("A", "inner"), ("B", "outer"), ("C", None)]
