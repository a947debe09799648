"""Diff, rerun-as-it-was and drift between revisions."""

from __future__ import annotations

from shared.secrets import MASK
from shared.task import revisions


def var(name: str, value: str, source: str = "user", secret: bool = False) -> dict:
    return {"name": name, "value": value, "source": source, "secret": secret, "overrode": []}


def test_diff_names_added_removed_and_changed() -> None:
    old = [var("LR", "0.1"), var("GONE", "x"), var("SAME", "s")]
    new = [var("LR", "0.2"), var("SAME", "s"), var("NEW", "n", "default")]
    d = revisions.diff(old, new)
    assert [a["name"] for a in d["added"]] == ["NEW"]
    assert d["added"][0]["source"] == "default"
    assert [r["name"] for r in d["removed"]] == ["GONE"]
    assert d["changed"] == [{"name": "LR", "old": "0.1", "new": "0.2", "old_source": "user",
                             "new_source": "user", "secret": False, "value_changed": True}]
    assert d["unchanged"] == ["SAME"]


def test_diff_shows_a_secret_only_as_changed_or_unchanged() -> None:
    old = [var("TOKEN", "first-secret", secret=True), var("KEY", "same-secret", secret=True)]
    new = [var("TOKEN", "second-secret", secret=True), var("KEY", "same-secret", secret=True)]
    d = revisions.diff(old, new)
    assert "first-secret" not in repr(d) and "second-secret" not in repr(d)
    assert "same-secret" not in repr(d)
    assert d["changed"][0]["name"] == "TOKEN"
    assert d["changed"][0]["old"] == d["changed"][0]["new"] == MASK
    assert d["unchanged"] == ["KEY"]


def test_pinned_env_keeps_values_but_never_protected_or_platform_ones() -> None:
    resolved = [var("TASK_ID", "t", "platform"), var("LOCK", "1", "protected"),
                var("NCCL", "WARN", "default"), var("LR", "0.1"), var("NOW_LOCKED", "u")]
    pinned = revisions.pinned_env(resolved, protected_now={"NOW_LOCKED"})
    assert [(e["name"], e["value"]) for e in pinned] == [("LR", "0.1")]
    defaults = revisions.pinned_defaults(resolved, protected_now={"NOW_LOCKED"})
    assert [(e["name"], e["value"]) for e in defaults] == [("NCCL", "WARN")]


def test_drift_says_why_each_value_moved() -> None:
    old = [var("TASK_ENV_REVISION", "1", "platform"), var("NCCL", "WARN", "default"),
           var("LOCK", "1", "protected"), var("LR", "0.1"), var("OLD_DEFAULT", "x", "default")]
    new = [var("TASK_ENV_REVISION", "2", "platform"), var("NCCL", "INFO", "default"),
           var("LOCK", "2", "protected"), var("LR", "0.1"), var("EXTRA", "e", "default")]
    report = {d["name"]: d for d in revisions.drift(old, new, 5, 9)}
    assert set(report) == {"NCCL", "LOCK", "OLD_DEFAULT", "EXTRA"}
    assert report["NCCL"]["why"] == "default changed (policy v5 -> v9)"
    assert report["LOCK"]["why"] == "protected value changed (policy v5 -> v9)"
    assert report["OLD_DEFAULT"]["new"] is None
    assert report["EXTRA"]["old"] is None
