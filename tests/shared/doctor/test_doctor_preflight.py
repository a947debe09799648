"""The pre-flight report on the corpus: a task's four scripts against its resolved env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared.doctor.catalog import Entry, applying
from shared.doctor.checkup import Doctor, examine
from shared.doctor.preflight import MISSING, UNREAD, preflight, runtime_only
from shared.env.envlist import Limits
from shared.policy.conditions import TaskFacts
from shared.policy.model import Policy
from shared.policy.scopes import Chain
from shared.task.resolution import decide_policy, preview

CORPUS = Path(__file__).parent / "corpus"
FILES = [{"path": p.name, "content": p.read_text()} for p in sorted(CORPUS.iterdir())]
CATALOG = applying(True, [])
ENV = [{"name": "LR", "value": "0.1"}, {"name": "EPOCHS", "value": "3"},
       {"name": "BATCH_SZ", "value": "64"}, {"name": "MODEL_NAME", "value": "gpt2"},
       {"name": "HF_TOKEN", "value": "hf_0123456789abcdef", "secret": True},
       {"name": "NCCL_DEBUG", "value": "INFO"}]
PROJECT = Policy.from_dict({"scope": "project:vision", "version": 2,
                            "defaults": [{"name": "DATA_DIR", "value": "/data"}]})


def resolved_of(env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    doc = {"id": "t", "name": "t", "revision": 1, "env": env, "warnings": [],
           "project": "vision"}
    state, decided = decide_policy(doc, Chain.of(Policy(), PROJECT))
    assert state == "resolved", decided
    return list(decided["resolved"])


def test_the_corpus_report_names_each_file_line_and_likely_name() -> None:
    report = preflight(FILES, resolved_of(ENV), CATALOG)
    missing = {(m["path"], m["line"], m["name"]) for m in report.missing}
    assert missing == {
        ("argparse_env.py", 16, "WANDB_RUN_NAME"),  # .get without a default
        ("hf_style.py", 7, "OUTPUT_DIR"),
        ("hf_style.py", 8, "HF_HOME"),  # getenv without a default
        ("hf_style.py", 14, "HUB_REPO"),  # in a function nothing calls: still a read
        ("torchrun_entry.py", 7, "BATCH_SIZE"),
        ("launch.sh", 7, "LOG_DIR"),
    }
    by_name = {m["name"]: m for m in report.missing}
    assert by_name["BATCH_SIZE"]["suggestions"] == ["BATCH_SZ"]
    assert "did you mean BATCH_SZ?" in by_name["BATCH_SIZE"]["message"]
    assert "inside push_to_hub()" in by_name["HUB_REPO"]["message"]
    assert "inside log()" in by_name["LOG_DIR"]["message"]
    # Never reported missing: set (LR, EPOCHS, MODEL_NAME, HF_TOKEN), defaulted in the
    # script (STAGE, OMP_NUM_THREADS, NPROC_PER_NODE), guarded (RESUME_FROM), the script's
    # own (TOKENIZERS_PARALLELISM), run-time only (LOCAL_RANK, RANK, WORLD_SIZE,
    # PET_NNODES, HOSTNAME), a comment or single quotes (NCCL_DEBUG, NOT_A_READ).
    assert [(d["name"], d["source"], d["scope"]) for d in report.from_defaults] == [
        ("DATA_DIR", "default", "project:vision")]
    assert "argparse_env.py line 10 reads DATA_DIR: set by a default of project:vision" \
        == report.from_defaults[0]["message"]
    assert [u["name"] for u in report.unread] == ["BATCH_SZ"]  # NCCL_DEBUG: a library's
    assert report.unread[0]["suggestions"] == ["BATCH_SIZE"]
    assert report.unknowable == [{
        "path": "hf_style.py", "line": 10, "expression": "'LR_' + stage.upper()",
        "message": "hf_style.py line 10 reads a variable whose name is built at run time "
                   "('LR_' + stage.upper()): the doctor cannot tell which"}]
    assert {s["path"] for s in report.scripts} == {f["path"] for f in FILES}


def test_abbreviations_are_suggested_both_ways() -> None:
    files = [{"path": "train.py",
              "content": "import os\nlr = float(os.environ['LEARNING_RATE'])\n"}]
    report = preflight(files, resolved_of([{"name": "LR", "value": "0.1"}]), CATALOG)
    assert report.missing[0]["message"] == (
        "train.py line 2 reads LEARNING_RATE, which this task does not set and the script "
        "gives no default; did you mean LR?")
    assert "the scripts read LEARNING_RATE" in report.unread[0]["message"]


def test_a_variable_read_again_is_one_finding_naming_each_line() -> None:
    """Read twice on one line, or on several lines: one finding per variable and script,
    never the same line twice."""
    files = [{"path": "t.py", "content": "import os\nprint(os.environ['X'], os.environ['X'])\n"},
             {"path": "p.sh", "content": "echo $Y $Y\necho \"${Y}/$D\"\ncp $D $Y\n"}]
    report = preflight(files, resolved_of([]), CATALOG)
    messages = [p.message for p in report.problems()]
    assert len(messages) == len(set(messages)), messages
    assert messages == [
        "t.py line 2 reads X, which this task does not set and the script gives no default",
        "p.sh lines 1, 2 and 3 read Y, which this task does not set and the script gives no "
        "default",
        "p.sh lines 2 and 3 read D, which this task does not set and the script gives no "
        "default"]
    assert [(m["line"], m["lines"]) for m in report.missing] == [(2, [2]), (1, [1, 2, 3]),
                                                                 (2, [2, 3])]
    project = [{"name": "Y", "value": "/y", "source": "default", "scope": "project:vision"}]
    again = preflight(files[1:], project, CATALOG)
    assert [d["message"] for d in again.from_defaults] == [
        "p.sh lines 1, 2 and 3 read Y: set by a default of project:vision"]


def test_a_finding_names_at_most_ten_lines_and_counts_the_others() -> None:
    files = [{"path": "p.sh", "content": "echo $Y\n" * 25}]
    [finding] = preflight(files, resolved_of([]), CATALOG).missing
    assert finding["lines"] == list(range(1, 26))
    assert finding["message"].startswith(
        "p.sh lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 15 more read Y, which")


def test_runtime_only_names() -> None:
    for name in ("TASK_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "PET_NNODES",
                 "SLURM_PROCID", "CUDA_VISIBLE_DEVICES", "PATH", "HOME", "LC_ALL"):
        assert runtime_only(name), name
    assert not runtime_only("LR") and not runtime_only("DATA_DIR")


def test_no_scripts_no_report() -> None:
    report = preflight([{"path": "notes.txt", "content": "$LR"}], resolved_of(ENV), CATALOG)
    assert report.scripts == [] and report.problems() == []


def examined(strict_task: bool = False, strict_policy: bool = False) -> Any:
    doc = {"id": "t", "name": "t", "revision": 1, "env": ENV, "warnings": [],
           "files": FILES, "strict_env": strict_task}
    platform = Policy(strict_env=strict_policy)
    state, decided = decide_policy(doc, Chain.of(platform, PROJECT), doctor=Doctor(CATALOG))
    return state, decided


def test_missing_reads_warn_and_strict_env_rejects_naming_each() -> None:
    state, decided = examined()
    assert state == "resolved"
    rules = [w["rule"] for w in decided["warnings"]]
    assert rules.count(MISSING) == 6 and rules.count(UNREAD) == 1
    assert decided["doctor"]["missing"][0]["path"]
    for strict in ({"strict_task": True}, {"strict_policy": True}):
        state, decided = examined(**strict)
        assert state == "rejected"
        assert {e["variable"] for e in decided["errors"]} == {
            "WANDB_RUN_NAME", "OUTPUT_DIR", "HF_HOME", "HUB_REPO", "BATCH_SIZE", "LOG_DIR"}
        assert all(e["rule"] == MISSING for e in decided["errors"])
        # The unread variable stays a warning even then: it breaks nothing.
        assert [w["variable"] for w in decided["warnings"] if w["rule"] == UNREAD] == [
            "BATCH_SZ"]


def test_a_name_the_builtin_catalog_documents_is_never_unread_whoever_described_it_last(
        ) -> None:
    """NCCL reads NCCL_DEBUG, not the scripts: not "unread", even when the platform's
    catalog entry replaced the built-in one and a platform default describes it."""
    replaced = Entry("NCCL_DEBUG", "ours", "enum", ("WARN", "INFO"), layer="platform",
                     scope="platform", replaces=True)
    platform = Policy.from_dict({"defaults": [{"name": "NCCL_DEBUG", "value": "WARN"}]})
    doc = {"id": "t", "name": "t", "revision": 1, "env": ENV, "warnings": [],
           "files": FILES}
    for catalog in (CATALOG, applying(True, [[replaced]], [platform])):
        state, decided = decide_policy(doc, Chain.of(platform), doctor=Doctor(catalog))
        unread = [w["variable"] for w in decided["warnings"] if w["rule"] == UNREAD]
        assert "NCCL_DEBUG" not in unread and unread == ["BATCH_SZ"], (state, unread)


def test_documented_rules_make_advice_binding_with_their_severity() -> None:
    env = [{"name": "NCCL_DEBGU", "value": "INFO"}, {"name": "NCCL_DEBUG", "value": "loud"}]
    for severity, expected_state in (("error", "rejected"), ("warning", "resolved")):
        platform = Policy.from_dict({"rules": [{"name": "NCCL_*", "documented": True,
                                                "severity": severity}]})
        doc = {"id": "t", "name": "t", "revision": 1, "env": env, "warnings": []}
        state, decided = decide_policy(doc, Chain.of(platform), doctor=Doctor(CATALOG))
        assert state == expected_state
        listed = decided["errors"] if severity == "error" else decided["warnings"]
        documented = [p for p in listed if p["rule"] == "rule.documented"]
        assert documented[0]["variable"] == "NCCL_DEBGU"
        assert "did you mean NCCL_DEBUG" in documented[0]["message"]
        assert "rule NCCL_* of the platform" in documented[0]["message"]
    # The plain advice is there too, a warning either way.
    assert {w["rule"] for w in decided["warnings"]} >= {"doctor.near_miss", "doctor.value"}


def test_a_warning_rule_warns_instead_of_rejecting() -> None:
    platform = Policy.from_dict({"rules": [{"name": "LR", "max": 1, "severity": "warning"}]})
    doc = {"id": "t", "name": "t", "revision": 1, "env": [{"name": "LR", "value": "5"}],
           "warnings": []}
    state, decided = decide_policy(doc, Chain.of(platform))
    assert state == "resolved" and decided["warnings"][0]["rule"] == "rule.max"


def test_preview_carries_the_report_and_the_advice() -> None:
    task = {"files": FILES, "project": "vision"}
    shown = preview(ENV + [{"name": "NCCL_DEBGU", "value": "INFO"}], "p",
                    Chain.of(Policy(), PROJECT), Limits(), task, doctor=Doctor(CATALOG))
    assert shown["ok"]
    assert {w["variable"] for w in shown["warnings"] if w["rule"] == "doctor.near_miss"} == {
        "NCCL_DEBGU"}
    assert len(shown["doctor"]["missing"]) == 6
    # Without a doctor, the preview is what it always was.
    plain = preview(ENV, "p", Chain.of(Policy(), PROJECT), Limits(), task)
    assert "doctor" not in plain and plain["warnings"] == []


def test_examine_without_files_gives_advice_only() -> None:
    doc = {"env": ENV}
    result_doc = {"id": "t", "name": "t", "revision": 1, "env": ENV, "warnings": []}
    from shared.task.resolution import _resolution  # the same resolution the stage makes
    result = _resolution(result_doc, Chain.of(Policy()))
    found = examine(doc, result, [Policy()], Doctor(CATALOG), TaskFacts())
    assert found.report is None and found.errors == [] and found.warnings == []
