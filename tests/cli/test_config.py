"""Server and token: flags, then TASKENV_URL/TASKENV_TOKEN, then the config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli import config
from cli.errors import UsageProblem
from cli.main import main


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_flags_beat_the_environment_which_beats_the_file(tmp_path: Path):
    path = write(tmp_path / "c.toml", 'url = "http://file:1"\ntoken = "file-token"\n')
    env = {"TASKENV_URL": "http://env:2", "TASKENV_TOKEN": "env-token"}

    assert config.load("http://flag:3", "flag-token", env, path) == config.Settings(
        "http://flag:3", "flag-token")
    assert config.load(None, None, env, path) == config.Settings("http://env:2", "env-token")
    assert config.load(None, None, {}, path) == config.Settings("http://file:1", "file-token")
    assert config.load(None, None, {}, tmp_path / "missing.toml") == config.Settings(
        config.DEFAULT_URL, None)


def test_the_default_file_lives_under_xdg_config_home(tmp_path: Path):
    write(tmp_path / "taskenv" / "config.toml", 'token = "from-xdg"\n')

    assert config.load(None, None, {"XDG_CONFIG_HOME": str(tmp_path)}).token == "from-xdg"


@pytest.mark.parametrize(("text", "problem"), [
    ('url = "x"\ntokn = "y"\n', "unknown keys tokn"),
    ("url = 8080\n", "url must be a string"),
    ("url = \n", "cannot read the config file"),
])
def test_a_bad_config_file_is_a_usage_problem(tmp_path: Path, text: str, problem: str):
    path = write(tmp_path / "c.toml", text)

    with pytest.raises(UsageProblem, match=problem):
        config.load(None, None, {}, path)


def test_settings_never_show_the_token():
    assert "s3cret" not in repr(config.Settings("http://x", "s3cret"))


def test_no_token_anywhere_exits_4_and_says_where_to_put_one(
        capsys: pytest.CaptureFixture[str], isolated_settings: Path):
    code = main(["tasks"])

    err = capsys.readouterr().err
    assert code == 4
    assert "no API token" in err and "TASKENV_TOKEN" in err and "config.toml" in err


def test_the_config_file_is_used_by_commands(
        capsys: pytest.CaptureFixture[str], isolated_settings: Path):
    write(isolated_settings, 'url = "http://127.0.0.1:9"\ntoken = "t"\n')

    code = main(["tasks"])

    assert code == 5
    assert "cannot reach http://127.0.0.1:9/api/v1/tasks" in capsys.readouterr().err


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o606])
def test_a_token_in_a_file_others_can_read_or_change_is_refused_like_ssh(tmp_path: Path,
                                                                          mode: int):
    path = write(tmp_path / "c.toml", 'token = "t"\n', mode)

    with pytest.raises(UsageProblem, match=f"mode is {mode:04o}.*chmod 600"):
        config.load(None, None, {}, path)


def test_a_file_others_can_read_is_fine_without_a_token_or_when_the_token_comes_elsewhere(
        tmp_path: Path):
    only_url = write(tmp_path / "a.toml", 'url = "http://file:1"\n', 0o644)
    with_token = write(tmp_path / "b.toml", 'token = "t"\n', 0o644)

    assert config.load(None, None, {}, only_url).url == "http://file:1"
    assert config.load(None, "flag", {}, with_token).token == "flag"


@pytest.mark.parametrize("mode", [0o622, 0o646, 0o660, 0o602])
def test_a_server_address_others_can_change_is_refused_whatever_carries_the_token(
        tmp_path: Path, mode: int):
    """Whoever can edit the file can send a token from the environment to their server."""
    path = write(tmp_path / "c.toml", 'url = "http://attacker.invalid:1"\n', mode)

    with pytest.raises(UsageProblem, match=f"mode {mode:04o}: others can change it.*chmod 600"):
        config.load(None, None, {"TASKENV_TOKEN": "tke_from_env"}, path)
    # A flag or the environment naming the server does not read the file's address.
    assert config.load("http://flag:2", None, {}, path).url == "http://flag:2"


def test_the_cli_refuses_it_and_sends_nothing(capsys: pytest.CaptureFixture[str],
                                              isolated_settings: Path,
                                              monkeypatch: pytest.MonkeyPatch):
    write(isolated_settings, 'url = "http://127.0.0.1:9"\n', 0o666)
    monkeypatch.setenv("TASKENV_TOKEN", "tke_secret_from_env")

    code = main(["tasks"])

    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert code == 4 and "others can change it" in err
    assert "tke_secret_from_env" not in err and "cannot reach" not in err


def test_save_writes_mode_0600_in_a_0700_directory_and_reads_back(tmp_path: Path):
    path = tmp_path / "new" / "taskenv" / "config.toml"
    token = 'tke_"quoted"\\ ünï'

    config.save(path, "http://127.0.0.1:8080", token)

    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert config.load(None, None, {}, path) == config.Settings("http://127.0.0.1:8080", token)
    assert [p.name for p in path.parent.iterdir()] == ["config.toml"]  # no temporary left


def test_save_replaces_an_open_file_with_a_private_one(tmp_path: Path):
    path = write(tmp_path / "c.toml", 'token = "old"\n', 0o644)

    config.save(path, "http://x", "new")

    assert path.stat().st_mode & 0o777 == 0o600
    assert config.load(None, None, {}, path).token == "new"
