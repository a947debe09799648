"""What a process checks as it starts, on fakeredis: each refusal names what is missing
and the setting that gives it."""

from __future__ import annotations

from pathlib import Path

import fakeredis
import pytest

from shared.config import Settings
from shared.keyring import recorded
from shared.keys import Keys
from shared.redis_conn import connect_for
from shared.secrets import key_fingerprints, new_key
from workers.startup import problems, refuse_unless_ready

PLATFORM_KEY = new_key()


@pytest.fixture
def platform() -> fakeredis.FakeRedis:
    """A platform whose first process had the platform's key."""
    client = fakeredis.FakeRedis()
    assert problems(Settings(secret_keys=PLATFORM_KEY), client=client) == []
    return client


def test_a_process_with_the_platform_s_keys_starts(platform: fakeredis.FakeRedis) -> None:
    settings = Settings(secret_keys=PLATFORM_KEY, launcher="dryrun")
    assert problems(settings, ["validate", "policy", "launch"], platform) == []


@pytest.mark.parametrize("other, says", [
    (False, "this process has no secret keys (TASKENV_SECRET_KEYS is empty)"),
    (True, "that TASKENV_SECRET_KEYS lacks"),
], ids=["no keys", "other keys"])
def test_a_process_without_the_platform_s_keys_is_refused_naming_them(
        platform: fakeredis.FakeRedis, other: bool, says: str) -> None:
    keys = new_key() if other else ""
    [found] = problems(Settings(secret_keys=keys), [], platform)
    assert says in found and "set TASKENV_SECRET_KEYS to the platform's keys" in found
    assert key_fingerprints(PLATFORM_KEY)[0][:12] in found  # which key: its fingerprint
    assert PLATFORM_KEY not in found and (not keys or keys not in found)
    assert recorded(platform, Keys()) == set(key_fingerprints(PLATFORM_KEY))


def test_refusing_exits_with_code_2_and_says_why(platform: fakeredis.FakeRedis,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        refuse_unless_ready(Settings(), "the launch worker", [], platform)
    assert exited.value.code == 2
    assert "the launch worker refuses to start: " in caplog.text
    assert "TASKENV_SECRET_KEYS" in caplog.text


def test_an_unknown_queue_and_a_launcher_without_its_set_up_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap anywhere on it
    found = problems(Settings(), ["lunch", "launch"], fakeredis.FakeRedis())
    assert found[0] == "'lunch' is no taskenv queue: a worker consumes validate, policy, launch"
    assert found[1].startswith("the local launcher cannot run tasks here: ")
    assert "apt-get install bubblewrap" in found[1]
    # A validate or policy worker needs no launcher.
    assert problems(Settings(), ["validate", "policy"], fakeredis.FakeRedis()) == []


def test_a_redis_that_does_not_answer_is_named_without_its_password() -> None:
    settings = Settings(redis_url="redis://:s3cret-pw@127.0.0.1:1/0", redis_timeout_seconds=0.2)
    [found] = problems(settings, ["validate"], connect_for(settings))
    assert found.startswith("Redis at redis://***@127.0.0.1:1/0 does not answer")
    assert "set TASKENV_REDIS_URL" in found and "s3cret-pw" not in found
