"""The operator commands' settings: the environment first, then what ``make run`` keeps."""

from __future__ import annotations

from pathlib import Path

from api.cli import local_settings, shown


def test_what_make_run_keeps_fills_in_what_is_not_set(tmp_path: Path) -> None:
    (tmp_path / "redis.url").write_text("redis://:pw@127.0.0.1:4242/0\n")
    (tmp_path / "secret.key").write_text("new-key,old-key\n")
    got = local_settings({}, tmp_path)
    assert got.redis_url == "redis://:pw@127.0.0.1:4242/0"
    assert got.secret_keys == "new-key,old-key"


def test_the_environment_wins_over_var(tmp_path: Path) -> None:
    (tmp_path / "redis.url").write_text("redis://:pw@127.0.0.1:4242/0\n")
    got = local_settings({"TASKENV_REDIS_URL": "redis://elsewhere:6379/1"}, tmp_path)
    assert got.redis_url == "redis://elsewhere:6379/1" and got.secret_keys == ""


def test_a_printed_url_hides_its_password() -> None:
    assert shown("redis://:s3cret@127.0.0.1:1/0") == "redis://***@127.0.0.1:1/0"
