"""docker-compose.sentinel.yml as written: a replica of docker-compose.yml's ``redis``,
three sentinels with a quorum of two, passwords only through env files and private
config files.  (tests/faults/test_failover.py fails the same shape over for real, on
loopback.)"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SENTINELS = ["sentinel1", "sentinel2", "sentinel3"]


def services(name: str = "docker-compose.sentinel.yml") -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / name).read_text())["services"]  # type: ignore[no-any-return]


def script(name: str) -> str:
    found = services().get(name) or services("docker-compose.yml")[name]
    return " ".join(found["command"])


def test_the_file_adds_a_replica_and_three_sentinels_and_changes_nothing_else() -> None:
    assert sorted(services()) == ["redis-replica", *SENTINELS]
    assert not set(services()) & set(services("docker-compose.yml"))


def test_the_replica_follows_redis_with_its_password_and_the_same_ceiling() -> None:
    replica, primary = script("redis-replica"), script("redis")
    assert "--replicaof redis 6379" in replica and "masterauth" in replica
    assert "masterauth" in primary  # it becomes a replica itself after a failover
    for option in ("--maxmemory ${TASKENV_REDIS_MAXMEMORY:-1gb}",
                   "--maxmemory-policy noeviction", "--appendonly yes"):
        assert option in replica


def test_each_sentinel_watches_redis_with_a_quorum_of_two_under_its_own_name() -> None:
    names = set()
    for name in SENTINELS:
        service = services()[name]
        assert "sentinel monitor mymaster redis 6379 2" in script(name)
        assert "--sentinel" in script(name)
        names.add(service["environment"]["SENTINEL_NAME"])
        assert service["volumes"] == [f"{name}-data:/data"]  # each keeps what it learnt
    assert names == set(SENTINELS)


def test_passwords_reach_the_nodes_through_env_files_and_private_files_only() -> None:
    for name in ["redis-replica", *SENTINELS]:
        service = services()[name]
        assert service["env_file"] == ["${TASKENV_SECRETS_DIR:-./secrets}/redis.env"]
        assert "umask 077" in script(name)
        assert all("PASSWORD" not in str(v) for v in (service.get("environment") or {}).values())
