"""The built-in catalog and its layers: every entry sourced, no two names a typo apart."""

from __future__ import annotations

import fakeredis
import pytest

from shared.doctor import advice
from shared.doctor.catalog import (
    LAYERS,
    TYPES,
    Entry,
    applying,
    builtin,
    check_entry,
    from_policies,
    layered,
)
from shared.doctor.store import CatalogInvalid, CatalogStore
from shared.errors import NotFound
from shared.policy.model import Policy
from shared.policy.scopes import Chain

FAMILIES = ("NCCL", "CUDA", "TORCH", "PYTORCH", "OMP", "MKL", "HF", "TRANSFORMERS", "WANDB",
            "TF", "XLA")


def test_every_builtin_entry_is_sourced_described_and_typed() -> None:
    entries = builtin()
    assert len(entries) >= 60
    for entry in entries:
        assert entry.source.startswith("https://"), entry.name
        assert entry.description and len(entry.description) <= 200, entry.name
        assert entry.type in TYPES, entry.name
        if entry.type in ("enum", "list", "options"):
            assert entry.values, entry.name
    assert {advice.family(e.name) for e in entries} == set(FAMILIES)
    assert len({e.name for e in entries}) == len(entries)  # each name once


def test_no_catalog_name_is_a_near_miss_of_another() -> None:
    """Otherwise one documented name would be taken for a typo of the other."""
    names = [e.name for e in builtin()]
    catalog = layered(builtin())
    assert advice.near_misses(names, catalog) == []
    for name in names:
        others = [n for n in names if n != name]
        assert advice.likely(name, others) == [], name


def test_an_edited_entry_is_a_note_on_the_builtin_one_unless_it_says_it_replaces_it() -> None:
    words = [Entry("NCCL_DEBUG", "our cluster logs at WARN", layer="platform", scope="platform")]
    kept = applying(True, [words]).get("NCCL_DEBUG")
    assert kept is not None and kept.layer == "builtin"  # NCCL's own facts stay
    assert kept.type == "enum" and "INFO" in kept.values and kept.notes == (
        "our cluster logs at WARN",)
    replacing = [Entry("NCCL_DEBUG", "ours", "enum", ("WARN",), layer="platform",
                       scope="platform", replaces=True)]
    assert applying(True, [replacing]).get("NCCL_DEBUG") == replacing[0]


def test_layers_replace_lower_ones_and_the_builtin_can_be_switched_off() -> None:
    platform = [Entry("NCCL_DEBUG", "ours", "enum", ("WARN",), layer="platform", replaces=True)]
    project = [Entry("LR", "learning rate", layer="project", scope="project:vision")]
    on = applying(True, [platform, project])
    assert on.get("NCCL_DEBUG") == platform[0]
    assert on.get("LR") is not None and on.get("CUDA_LAUNCH_BLOCKING") is not None
    off = applying(False, [platform, project])
    assert off.names() == ["LR", "NCCL_DEBUG"]
    assert LAYERS[0] == "builtin"


def test_policies_document_their_rules_protected_entries_and_defaults() -> None:
    platform = Policy.from_dict({
        "scope": "platform", "defaults": [{"name": "DATA_DIR", "value": "/data"}],
        "protected": [{"name": "NCCL_IB_HCA", "value": "mlx5", "reason": "our fabric"}],
        "rules": [{"name": "PRECISION", "allowed": ["bf16", "fp32"],
                   "description": "training precision"},
                  {"name": "NCCL_*", "pattern": ".*"}]})
    found = {e.name: e for e in from_policies([platform])}
    assert set(found) == {"DATA_DIR", "NCCL_IB_HCA", "PRECISION"}  # a glob names nothing
    assert found["PRECISION"].values == ("bf16", "fp32")
    assert found["NCCL_IB_HCA"].description == "our fabric"


@pytest.mark.parametrize(("data", "rule"), [
    ({"name": "X", "type": "colour"}, "catalog.type"),
    ({"name": "NCCL_*"}, "catalog.name"),
    ({"name": "A=B"}, "catalog.name"),
    ({"name": "X", "description": "d" * 501}, "catalog.description_length"),
    ({"name": "X", "values": ["v"] * 101}, "catalog.values_limit"),
    ({"name": "X", "min": "low"}, "catalog.invalid"),
    ({"name": "X", "colour": "red"}, "catalog.invalid"),
    ({"name": "X", "source": "javascript:alert(document.domain)"}, "catalog.source_url"),
    ({"name": "X", "source": "data:text/html,<script>alert(1)</script>"}, "catalog.source_url"),
    ({"name": "X", "source": "//evil.example/x"}, "catalog.source_url"),
    ({"name": "X", "source": "https://\nexample.com"}, "catalog.source_url"),
])
def test_an_entry_breaking_a_limit_is_refused_naming_it(data: dict[str, object],
                                                         rule: str) -> None:
    problems = check_entry(data)
    assert rule in {p.rule for p in problems}


@pytest.mark.parametrize("source", ["https://docs.nvidia.com/x#NCCL_DEBUG", "http://wiki.lan/a?b=c",
                                    "HTTPS://EXAMPLE.COM"])
def test_a_web_address_is_a_source(source: str) -> None:
    assert check_entry({"name": "X", "source": source}) == []


def test_store_round_trip_bounds_and_settings() -> None:
    store = CatalogStore(fakeredis.FakeRedis(decode_responses=True), max_entries=2)
    store.put("platform", {"name": "A", "description": "a"})
    store.put("platform", {"name": "B"})
    store.put("platform", {"name": "A", "description": "again"})  # replacing fits
    with pytest.raises(CatalogInvalid) as refused:
        store.put("platform", {"name": "C"})
    assert refused.value.problems[0].rule == "catalog.max_entries"
    assert refused.value.problems[0].variable == "C" and refused.value.problems[0].limit == 2
    store.put("project:vision", {"name": "C"})  # each layer has its own bound
    on, (platform, project) = store.layers(["platform", "project:vision"])
    assert on and [e.name for e in platform] == ["A", "B"] and project[0].layer == "project"
    assert platform[0].description == "again"
    store.set_builtin(False)
    assert not store.builtin_on()
    assert "NCCL_DEBUG" not in store.applying(Chain.of(Policy(), Policy(scope="project:vision")))
    store.delete("platform", "A")
    with pytest.raises(NotFound):
        store.delete("platform", "A")


def test_a_catalog_is_built_again_only_when_what_it_is_built_from_changed() -> None:
    """The layers are read for each task; an unchanged read under the same policies gives
    the catalog built before, and any change (an entry, the built-in switch, a policy
    version, another project) one built anew."""
    client = fakeredis.FakeRedis(decode_responses=True)
    store = CatalogStore(client)
    platform = Policy.from_dict({"defaults": [{"name": "RUN_KIND", "value": "x"}]})
    chain = Chain.of(platform, Policy(scope="project:vision"))
    first = store.applying(chain)
    assert store.applying(chain) is first
    CatalogStore(client).put("project:vision", {"name": "VISION_SEED", "description": "seed"})
    edited = store.applying(chain)
    assert edited is not first and edited.get("VISION_SEED").description == "seed"
    assert store.applying(chain) is edited
    newer = Policy.from_dict({"defaults": [{"name": "RUN_MODE", "value": "y"}]})
    renewed = store.applying(Chain.of(newer, Policy(scope="project:vision")))
    assert "RUN_MODE" in renewed and "RUN_KIND" not in renewed
    CatalogStore(client).set_builtin(False)
    assert "NCCL_DEBUG" in edited and "NCCL_DEBUG" not in store.applying(chain)
    other = store.applying(Chain.of(platform, Policy(scope="project:audio")))
    assert "VISION_SEED" not in other


def test_a_process_keeps_a_limited_number_of_built_catalogs() -> None:
    """Tasks of many projects (each a catalog of its own) leave the process holding
    ``BUILT_KEPT`` catalogs, the most recent."""
    from shared.doctor.store import BUILT_KEPT

    store = CatalogStore(fakeredis.FakeRedis(decode_responses=True))
    platform = Policy()
    chains = [Chain.of(platform, Policy(scope=f"project:p{i}")) for i in range(BUILT_KEPT + 8)]
    for chain in chains:
        store.applying(chain)
    assert len(store._built) == BUILT_KEPT
    last = store.applying(chains[-1])
    assert store.applying(chains[-1]) is last
