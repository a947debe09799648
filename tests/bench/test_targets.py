"""The benchmark's verdicts on made-up numbers: each target MET or MISSED at its limit,
the cause printed only for a miss, and a phase left out said as such."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench import targets


def load(throughput: float, p99: float, commands: float, cpu: float) -> dict[str, Any]:
    return {"throughput": throughput, "throughput_to_launching": throughput,
            "latency_ms": {"p50": p99 / 2, "p95": p99, "p99": p99}, "offered_rate": None,
            "redis_commands": {"per_item": commands, "by_command_per_item": {"evalsha": 2.0}},
            "cpu": {"cpu_ms_per_item_total": cpu, "cpu_ms_per_item": {"api": cpu}}}


def system(throughput: float, p99: float, commands: float) -> dict[str, Any]:
    paced = {**load(throughput / 2, p99, commands, 10.0), "fraction": 0.5,
             "offered_rate": throughput / 2}
    return {"burst": load(throughput, p99 * 10, commands, 10.0), "paced": [paced]}


def post(throughput: float, name: str) -> dict[str, Any]:
    return {"throughput": throughput, "cpu": {"cpu_ms_per_item": {name: 1.0}},
            "response_ms": {"p50": 1.0, "p99": 2.0}}


def results() -> dict[str, Any]:
    """A run where every target is met."""
    return {
        "meta": {"settings": {"p99_judged_at": 0.5}},
        "pipeline": system(90.0, 20.0, 30.0),
        "thin": system(100.0, 15.0, 25.0),
        "baseline": system(120.0, 10.0, 20.0),
        "post": {"api": post(400.0, "api"), "noop_enqueue": post(500.0, "noop_enqueue"),
                 "noop": post(1000.0, "noop")},
        "growth": {
            "merge": {"rows": [{"variables": n, "seconds": n * 4e-6, "per_variable_us": 4.0}
                               for n in (10, 100, 1000, 10_000)],
                      "per_variable_ratio_10k_vs_100": 1.0},
            "listing": {"stored": {"large": 1_000_000},
                        "get_list_limit_50": {"small": {"p50": 0.008, "p99": 0.01},
                                              "large": {"p50": 0.009, "p99": 0.012},
                                              "p50_ratio_large_vs_small": 1.125},
                        "memory": {"record_json_bytes": 3000}},
            "transition": {"rows": [{"median_ms": 0.5, "bytes_sent": 900},
                                    {"median_ms": 0.55, "bytes_sent": 910}],
                           "time_ratio": 1.1, "bytes_ratio": 1.01},
            "retention": {"tasks": 20_000, "ratio": 0.01,
                          "retention_off": {"bytes_left": 60e6, "bytes_left_per_task": 3000.0},
                          "retention_0": {"bytes_left": 0.6e6}},
        },
        "podman": {"skipped": "podman is not installed"},
    }


def verdicts(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["target"]: t for t in targets.judge(res)[1]}


def test_a_run_within_every_limit_meets_every_target() -> None:
    judged = verdicts(results())
    assert [name for name, t in judged.items() if not t["met"] and not t.get("skipped")] == []
    assert len(judged) == 13


def test_a_target_just_past_its_limit_is_missed_with_its_cause() -> None:
    res = results()
    res["pipeline"]["burst"]["throughput"] = 84.0  # 0.84 x the thin floor's 100/s
    res["pipeline"]["burst"]["cpu"]["cpu_ms_per_item"] = {"api": 7.0, "worker launch": 9.0}
    judged = verdicts(res)
    thin = judged["pipeline throughput >= 0.85 x thin floor"]
    assert not thin["met"] and thin["value"] == pytest.approx(0.84)
    assert "worker launch 9.0" in thin["cause"]
    res["meta"]["settings"] = {"p99_judged_at": 0.5}
    res["ratios"], res["targets"] = targets.judge(res)
    text = targets.verdicts(res)
    assert "MISSED       pipeline throughput >= 0.85 x thin floor" in text
    assert text.count("cause:") == 1


@pytest.mark.parametrize(("path", "value", "name"), [
    (("growth", "transition", "time_ratio"), 1.21, "growth: state change at 200 vs 1"),
    (("growth", "retention", "ratio"), 0.06, "growth: Redis memory after 20,000"),
    (("growth", "retention", "retention_off", "bytes_left_per_task"), 4097.0,
     "Redis memory per stored task"),
])
def test_each_growth_limit_is_inclusive_and_missed_just_past_it(
        path: tuple[str, ...], value: float, name: str) -> None:
    res = copy.deepcopy(results())
    node = res
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    [target] = [t for n, t in verdicts(res).items() if n.startswith(name)]
    assert not target["met"]


def test_a_podman_phase_left_out_is_not_measured_rather_than_missed() -> None:
    res = results()
    res["ratios"], res["targets"] = targets.judge(res)
    text = targets.verdicts(res)
    assert "NOT MEASURED podman launcher" in text
    assert "podman is not installed" in text


def test_the_podman_ratio_is_judged_when_measured() -> None:
    res = results()
    run = {"throughput": 0.7, "submit_to_running_ms": {"p50": 1000.0}}
    floor = {"throughput": 1.0, "submit_to_running_ms": {"p50": 800.0}}
    res["podman"] = {"pipeline": run, "floor": floor, "throughput_ratio": 0.7, "p50_ratio": 1.25}
    target = verdicts(res)["podman launcher throughput >= 0.8 x a loop of podman kube play"]
    assert not target["met"] and target["value"] == 0.7
