"""One settings reader for every process: the environment first, then what ``make run``
keeps in ``var/``, then a caller's overrides."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from api.cli import shown
from shared import config
from shared.config import read_settings
from shared.secrets import new_key

ROOT = Path(__file__).resolve().parents[2]


KEYS = f"{new_key()},{new_key()}"  # a rotation's: the new key first, then the old one


def make_run_var(directory: Path) -> Path:
    var = directory / "var"
    var.mkdir()
    (var / "redis.url").write_text("redis://:pw@127.0.0.1:4242/0\n")
    (var / "secret.key").write_text(KEYS + "\n")
    return var


def test_what_make_run_keeps_fills_in_what_is_not_set(tmp_path: Path) -> None:
    got = read_settings({}, make_run_var(tmp_path))
    assert got.redis_url == "redis://:pw@127.0.0.1:4242/0"
    assert got.secret_keys == KEYS


def test_the_environment_wins_over_var_even_when_empty(tmp_path: Path) -> None:
    var = make_run_var(tmp_path)
    got = read_settings({"TASKENV_REDIS_URL": "redis://elsewhere:6379/1",
                         "TASKENV_SECRET_KEYS": ""}, var)
    assert got.redis_url == "redis://elsewhere:6379/1" and got.secret_keys == ""


def test_overrides_win_and_without_var_nothing_is_read_there(tmp_path: Path) -> None:
    var = make_run_var(tmp_path)
    assert read_settings({}, var, secret_keys="given").secret_keys == "given"
    assert read_settings({}, None).secret_keys == ""


@pytest.mark.parametrize("reads", [
    "from workers.services import current; s = current().settings",
    "from workers.celery_app import app; from shared.config import process_settings; "
    "s = process_settings(); assert app.conf.broker_url == s.redis_url",
    "from api import create_app; s = create_app().extensions['taskenv'].settings",
])
def test_the_api_and_the_workers_read_var_as_the_operator_commands_do(
        tmp_path: Path, reads: str) -> None:
    """A process started by hand in ``make run``'s directory (the API, a worker) finds
    the stack's Redis and keys there, as ``python -m api.cli`` does."""
    make_run_var(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    script = f"{reads}; print(s.redis_url, s.secret_keys)"
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["redis://:pw@127.0.0.1:4242/0", KEYS]


def test_one_reader_builds_every_process_s_settings() -> None:
    """``Settings.from_env`` is called by the reader alone: no process reads its own way."""
    callers = [str(p.relative_to(ROOT)) for top in ("api", "workers", "shared")
               for p in (ROOT / top).rglob("*.py") if "Settings.from_env(" in p.read_text()]
    assert callers == ["shared/config.py"]
    assert config.process_settings.__wrapped__() == read_settings()


def test_a_printed_url_hides_its_password() -> None:
    assert shown("redis://:s3cret@127.0.0.1:1/0") == "redis://***@127.0.0.1:1/0"
    assert "pw" not in shown("sentinel://:pw@s1:26379;sentinel://:pw@s2:26379/0")
