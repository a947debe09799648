"""What each replica received of its env, compared (shared/env/received.py): pure."""

from __future__ import annotations

import json

from shared.env.received import MAX_NAMES, RULE, Look, summary, value_hash

KEY = b"k" * 32
RESOLVED = {"LEARNING_RATE": "0.1", "DATA_DIR": "/data", "HF_TOKEN": "hf_secret-value-123"}
IDENTITY = {"RANK": "0", "MASTER_ADDR": "10.254.0.1", "GLOO_SOCKET_IFNAME": "tj4"}


def look(replica: int, **extra: str) -> Look:
    return Look.of(replica, {**RESOLVED, **IDENTITY, "RANK": str(replica), **extra}, KEY)


def test_replicas_that_received_the_resolved_env_agree_and_nothing_is_said() -> None:
    got = summary(RESOLVED, [look(0), look(1), look(2)], KEY, backend_names=("PATH",))
    assert got["same"] is True and got["warnings"] == [] and got["added"] == []
    assert [r["replica"] for r in got["replicas"]] == [0]  # only replica 0 is kept


def test_a_value_that_arrived_otherwise_names_the_replica_and_the_variable() -> None:
    changed = Look.of(1, {**RESOLVED, "LEARNING_RATE": "9"}, KEY)
    missing = Look.of(2, {k: v for k, v in RESOLVED.items() if k != "HF_TOKEN"}, KEY)
    got = summary(RESOLVED, [look(0), changed, missing], KEY)
    assert got["same"] is False
    said = [(w["replica"], w["names"]) for w in got["warnings"] if w["names"]]
    assert said == [(1, ["LEARNING_RATE"]), (2, ["HF_TOKEN"])]
    assert all(w["rule"] == RULE for w in got["warnings"])


def test_what_the_runtime_adds_to_every_replica_is_named_once() -> None:
    got = summary(RESOLVED, [look(0, IMAGE_ADDED="1"), look(1, IMAGE_ADDED="1")], KEY,
                  backend_names=("PATH", "HOSTNAME"))
    assert got["same"] is True and got["added"] == ["IMAGE_ADDED"]
    assert [(w["replica"], w["names"]) for w in got["warnings"]] == [(None, ["IMAGE_ADDED"])]


def test_a_name_only_some_replicas_received_is_named_even_under_the_backends_prefix() -> None:
    base = {"SLURM_JOB_ID": "7", "SLURM_NODEID": "0"}
    got = summary(RESOLVED, [look(0, **base), look(1, **base, SLURM_SITE_SCRATCH="/local")],
                  KEY, backend_prefixes=("SLURM_",))
    # Slurm's own names, on every replica, are not the task's business; one node's extra is.
    assert got["added"] == []
    assert [(w["replica"], w["names"]) for w in got["warnings"]] == [
        (1, ["SLURM_SITE_SCRATCH"])]
    assert [r["replica"] for r in got["replicas"]] == [0, 1]


def test_no_value_is_in_the_record_only_names_and_keyed_hashes() -> None:
    changed = Look.of(1, {**RESOLVED, "HF_TOKEN": "other-secret-value-456"}, KEY)
    text = json.dumps(summary(RESOLVED, [look(0), changed], KEY))
    for value in (*RESOLVED.values(), "other-secret-value-456"):
        assert value not in text
    # Unkeyed, a hash would let a reader test guesses; keyed, another key says otherwise.
    assert value_hash(KEY, "0.1") != value_hash(b"x" * 32, "0.1")


def test_the_record_is_bounded_whatever_a_runtime_adds() -> None:
    many = {f"ADDED_{i:04d}": "x" for i in range(5_000)}
    got = summary(RESOLVED, [look(k, **many) for k in range(64)], KEY)
    assert len(got["added"]) == MAX_NAMES
    assert "and 4950 more" in got["warnings"][0]["message"]
    assert len(json.dumps(got)) < 8_000


def test_the_slurm_nodes_hash_values_as_the_platform_does() -> None:
    from workers.launchers.slurm import job

    for value in ("", "0.1", "数据 — ü ✓", "a\nb\0c", "\udcff raw byte"):
        assert job.value_hash(KEY, value) == value_hash(KEY, value)
