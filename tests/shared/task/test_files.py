"""A task's own files: the rules (every problem at once), the summary and the diff."""

from __future__ import annotations

from shared.task.files import FileLimits, check, diff, path_problem, stored, summary

LIMITS = FileLimits(max_files=3, max_bytes=100)


def rules(problems) -> list[tuple[str, str | None]]:  # type: ignore[no-untyped-def]
    return [(p.rule, p.field) for p in problems]


def test_good_files_pass_and_keep_a_default_mode() -> None:
    files = [{"path": "prepare.sh", "content": "echo hi\n", "mode": 0o755},
             {"path": "conf/train.yaml", "content": "lr: 0.1\n"}]
    assert check(files, LIMITS) == []
    assert stored(files)[1] == {"path": "conf/train.yaml", "content": "lr: 0.1\n",
                                "mode": 0o644}


def test_every_bad_path_is_named_with_its_rule_at_once() -> None:
    files = [{"path": p, "content": ""} for p in
             ("/etc/passwd", "../up", "a/../../b", "a//b", "./x", "nul\0x", "", "tab\tx")]
    problems = check(files, FileLimits(max_files=20))
    assert rules(problems) == [("file.path", f"files[{i}].path") for i in range(8)]
    assert "/etc/passwd" in problems[0].message and "absolute" in problems[0].message
    assert "'..'" in problems[1].message


def test_duplicates_nesting_counts_sizes_and_modes_are_all_reported() -> None:
    files = [{"path": "a", "content": "x" * 60}, {"path": "a", "content": ""},
             {"path": "a/b", "content": "y" * 50, "mode": 0o1777},
             {"path": "c", "content": "", "mode": True}]
    got = rules(check(files, LIMITS))
    assert ("files.max_count", "files") in got and ("files.max_bytes", "files") in got
    assert ("file.duplicate", "files[1]") in got
    assert ("file.path", "files[2].path") in got  # a/b needs a to be a directory
    assert ("file.mode", "files[2].mode") in got and ("file.mode", "files[3].mode") in got
    limits = {p.rule: p.limit for p in check(files, LIMITS)}
    assert limits["files.max_count"] == 3 and limits["files.max_bytes"] == 100


def test_a_secret_value_or_a_private_key_in_a_file_is_refused_without_showing_it() -> None:
    files = [{"path": "run.sh", "content": "curl -H 'token: hf_sekret_123'"},
             {"path": "id", "content": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc"},
             {"path": "nul", "content": "a\0b"}]
    problems = check(files, FileLimits(), [("HF_TOKEN", "hf_sekret_123")])
    assert [(p.rule, p.variable) for p in problems] == [
        ("file.holds_secret", "HF_TOKEN"), ("file.private_key", None),
        ("file.content_nul", None)]
    assert all("hf_sekret_123" not in p.message for p in problems)
    assert "$HF_TOKEN" in problems[0].message


def test_a_path_problem_says_why() -> None:
    assert path_problem("ok/fine.py") is None
    assert path_problem("x" * 1025) == "must be at most 1024 characters"


def test_the_diff_names_files_by_path_with_sizes_and_digests_never_contents() -> None:
    big = "z" * 50_000
    old = [{"path": "a.sh", "content": "echo 1\n"}, {"path": "gone", "content": big}]
    new = [{"path": "a.sh", "content": "echo 2\n", "mode": 0o755},
           {"path": "new.py", "content": big}]
    found = diff(old, new)
    assert [f["path"] for f in found["added"]] == ["new.py"]
    assert [f["path"] for f in found["removed"]] == ["gone"]
    assert [c["path"] for c in found["changed"]] == ["a.sh"]
    assert found["changed"][0]["new"]["mode"] == 0o755
    assert big not in repr(found) and found["added"][0]["size"] == 50_000
    assert diff(new, new) == {"added": [], "removed": [], "changed": []}
    assert summary(new)[0]["sha256"] != summary(old)[0]["sha256"]
