"""docker-compose.yml as written: what it publishes and the ceiling it gives Redis.
(tests/compose runs it for real with podman-compose.)"""

from __future__ import annotations

from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def services() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(COMPOSE.read_text())["services"]  # type: ignore[no-any-return]


def test_the_api_is_published_on_loopback_only_as_the_readme_says() -> None:
    published = [p for s in services().values() for p in s.get("ports", [])]
    assert published and all(str(p).startswith("127.0.0.1:") for p in published), published


def test_redis_runs_with_a_maxmemory_and_never_evicts() -> None:
    command = " ".join(services()["redis"]["command"])
    assert "--maxmemory ${TASKENV_REDIS_MAXMEMORY:-1gb}" in command
    assert "--maxmemory-policy noeviction" in command


def test_no_other_service_publishes_a_port() -> None:
    assert [n for n, s in services().items() if s.get("ports")] == ["api"]
