"""Resources in Kubernetes' notation, the platform's defaults and maxima."""

from __future__ import annotations

import pytest

from shared.config import Settings
from shared.task.limits import (
    BadQuantity,
    Maxima,
    limits_for,
    parse_bytes,
    parse_millicpu,
    resource_problems,
)

MAXIMA = Maxima.from_settings(Settings(task_max_cpu="4", task_max_memory="8Gi",
                                       task_max_gpus=2))


@pytest.mark.parametrize(("text", "expected"), [
    ("64Mi", 64 << 20), ("4Gi", 4 << 30), ("1G", 10**9), ("1048576", 1 << 20),
    ("1.5Gi", 3 << 29), ("512k", 512_000)])
def test_sizes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(("text", "expected"), [("2", 2000), ("0.5", 500), ("500m", 500),
                                                ("1.25", 1250)])
def test_cores(text: str, expected: int) -> None:
    assert parse_millicpu(text) == expected


@pytest.mark.parametrize("bad", ["", "lots", "4GB", "-1", "1e9", "Gi"])
def test_what_is_not_a_size_is_refused(bad: str) -> None:
    with pytest.raises(BadQuantity):
        parse_bytes(bad)


def test_every_problem_is_reported_at_once_naming_the_field_and_the_limit() -> None:
    problems = resource_problems({"cpu": "64", "memory": "1Ti", "gpus": 3}, MAXIMA)
    assert [(p.field, p.limit) for p in problems] == [
        ("resources.cpu", 4000), ("resources.memory", 8 << 30), ("resources.gpus", 2)]
    assert "at most 2" in problems[2].message and "8Gi" in problems[1].message


def test_a_bad_quantity_names_its_field() -> None:
    problems = resource_problems({"cpu": "many", "memory": "4GB"}, MAXIMA)
    assert [p.field for p in problems] == ["resources.cpu", "resources.memory"]
    assert all(p.rule == "resource_quantity" for p in problems)


def test_a_host_smaller_than_the_maxima_lowers_them() -> None:
    small = MAXIMA.within(cpu=2000, memory=4 << 30)
    assert [p.field for p in resource_problems({"cpu": "3", "memory": "6Gi"}, small)] == [
        "resources.cpu", "resources.memory"]


def test_limits_take_the_defaults_and_never_exceed_the_maxima() -> None:
    limits = limits_for(None, MAXIMA)
    assert (limits.millicpu, limits.memory_bytes) == (1000, 2 << 30)
    clamped = limits_for({"cpu": "64", "memory": "1Ti", "gpus": 9}, MAXIMA)
    assert (clamped.millicpu, clamped.memory_bytes, clamped.gpus) == (4000, 8 << 30, 2)
    tiny = limits_for({"memory": "64Mi"}, MAXIMA)
    assert tiny.tmp_bytes == 64 << 20 and tiny.home_bytes == 64 << 20  # never above memory
