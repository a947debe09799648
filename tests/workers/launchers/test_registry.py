"""The one list of backends, and what each declares of itself as plain data."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from shared.config import Settings
from shared.env.identity import LOOPBACK
from workers import launchers
from workers.launchers.registry import (
    BACKENDS,
    make_launcher,
    reserved_prefixes,
    setup_problems,
    traits,
)

FOLDER = Path(launchers.__file__).parent


def test_each_backend_is_a_folder_with_its_launcher_its_traits_and_a_test_folder() -> None:
    folders = {p.name for p in FOLDER.iterdir() if (p / "__init__.py").exists()} - {"common"}
    assert folders == set(BACKENDS)
    tests = Path(__file__).parent
    for name, backend in BACKENDS.items():
        assert traits(name).name == name
        module = importlib.import_module(f"{backend.package}.launcher")
        assert getattr(module, backend.launcher_class).name == name
        assert (tests / name).is_dir(), f"tests/workers/launchers/{name}/ holds its tests"


def test_an_unknown_backend_is_refused_naming_the_setting_and_the_choices() -> None:
    with pytest.raises(ValueError) as caught:
        make_launcher(Settings(launcher="nomad"))
    message = str(caught.value)
    assert "TASKENV_LAUNCHER" in message and "'nomad'" in message
    assert all(name in message for name in BACKENDS)


def test_the_reserved_prefixes_are_what_the_backends_declare() -> None:
    assert traits("slurm").reserved_prefixes == ("SLURM_", "SRUN_")
    assert set(reserved_prefixes()) == {p for n in BACKENDS for p in traits(n).reserved_prefixes}


@pytest.mark.parametrize(("name", "address"), [
    ("local", LOOPBACK), ("podman", LOOPBACK), ("dryrun", LOOPBACK),
    ("kubernetes", "train-r1-0.train-r1"), ("slurm", LOOPBACK)])
def test_replica_zero_is_where_each_backend_puts_it_and_a_world_of_one_is_loopback(
        name: str, address: str) -> None:
    assert traits(name).replica_zero_for(2, "train-r1") == address
    assert traits(name).replica_zero_for(1, "train-r1") == LOOPBACK


def test_a_backend_with_nothing_to_check_at_start_has_no_setup_problems() -> None:
    assert setup_problems(Settings(launcher="dryrun")) == []


def test_no_module_outside_the_backends_names_one_or_discovers_a_capability() -> None:
    """The API, shared/ and the workers around the launchers ask a backend's traits and
    its Protocols: none compares ``settings.launcher`` with a name, none uses getattr."""
    root = FOLDER.parents[1]
    sources = [*root.glob("api/**/*.py"), *root.glob("shared/**/*.py"),
               *root.glob("workers/*.py")]
    named = re.compile(r"\.launcher\s*[!=]=|[!=]=\s*\w*\.launcher\b")
    found = [f"{p.relative_to(root)}:{n}" for p in sources
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if named.search(line) or re.search(r"getattr\(\s*launcher\b", line)]
    assert found == []
