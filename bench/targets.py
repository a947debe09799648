"""The targets the run is judged against, and each as MET or MISSED."""

from __future__ import annotations

from typing import Any

TARGETS = {
    "throughput": 0.85,  # pipeline throughput >= 0.85 x bare
    "p99": 1.3,  # pipeline p99 <= 1.3 x bare p99 (same offered load)
    "post": 0.5,  # POST /api/v1/tasks throughput >= 0.5 x no-op endpoint
    "merge_1000_ms": 5.0,  # validation + merge of 1,000 variables < 5 ms
}
LISTING_FACTOR = 1.5  # GET ?limit=50 p50 at the large store <= this x at 1,000 tasks


def paced_at(rows: list[dict[str, Any]], fraction: float) -> dict[str, Any] | None:
    """The paced load offered at ``fraction`` of the floor's throughput, if measured."""
    return next((r for r in rows if abs(r["fraction"] - fraction) < 1e-9), None)


def judge(results: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    base, pipe = results["baseline"], results["pipeline"]
    at = results["meta"]["settings"]["p99_judged_at"]
    post = results["post"]
    bb, pb = base["burst"], pipe["burst"]
    base_at, pipe_at = paced_at(base["paced"], at), paced_at(pipe["paced"], at)
    ratios = {
        "throughput": pb["throughput"] / bb["throughput"],
        "throughput_to_launching": pb["throughput_to_launching"] / bb["throughput"],
        "p99_at_judged_load": (pipe_at["latency_ms"]["p99"] / base_at["latency_ms"]["p99"]
                               if pipe_at and base_at else None),
        "p99_burst": pb["latency_ms"]["p99"] / bb["latency_ms"]["p99"],
        "post": post["api"]["throughput"] / post["noop"]["throughput"],
        "post_vs_noop_enqueue": post["api"]["throughput"] / post["noop_enqueue"]["throughput"],
        "noop_enqueue_vs_noop": post["noop_enqueue"]["throughput"] / post["noop"]["throughput"],
        "redis_commands_per_task": (pb["redis_commands"]["per_item"]
                                    / bb["redis_commands"]["per_item"]),
        "cpu_per_task": pb["cpu"]["cpu_ms_per_item_total"] / bb["cpu"]["cpu_ms_per_item_total"],
        "p99_by_load": {
            str(b["fraction"]): p["latency_ms"]["p99"] / b["latency_ms"]["p99"]
            for b in base["paced"] if (p := paced_at(pipe["paced"], b["fraction"]))},
    }
    merge = {r["variables"]: r for r in results["growth"]["merge"]["rows"]}
    listing = results["growth"]["listing"]["get_list_limit_50"]
    merge_1000 = merge[1000]["seconds"] * 1e3
    targets = [
        _target("pipeline throughput >= 0.85 x bare", ratios["throughput"], ">=",
                TARGETS["throughput"],
                f"{pb['throughput']:.1f} vs {bb['throughput']:.1f} /s"),
        _target(f"p99 <= 1.3 x bare p99 (both offered {at:.0%} of bare throughput)",
                ratios["p99_at_judged_load"], "<=", TARGETS["p99"],
                f"{pipe_at['latency_ms']['p99']:.1f} vs {base_at['latency_ms']['p99']:.1f} ms"
                if pipe_at and base_at else "not measured"),
        _target("POST /api/v1/tasks throughput >= 0.5 x no-op endpoint", ratios["post"], ">=",
                TARGETS["post"],
                f"{post['api']['throughput']:.0f} vs {post['noop']['throughput']:.0f} /s"),
        _target("validation + merge of 1,000 variables < 5 ms", merge_1000, "<",
                TARGETS["merge_1000_ms"], f"{merge_1000:.3f} ms"),
        _target("check: per-variable cost, 10k vs 100 variables (linear)",
                results["growth"]["merge"]["per_variable_ratio_10k_vs_100"], "<=",
                results["growth"]["merge"]["linearity_factor"],
                f"{merge[100]['per_variable_us']:.2f} -> "
                f"{merge[10000]['per_variable_us']:.2f} µs/variable"),
        _target(f"check: GET /tasks?limit=50 p50, "
                f"{results['growth']['listing']['stored']['large']:,} vs 1,000 stored",
                listing["p50_ratio_large_vs_small"], "<=", LISTING_FACTOR,
                f"{listing['large']['p50'] * 1e3:.1f} vs {listing['small']['p50'] * 1e3:.1f} ms"),
    ]
    return ratios, targets


def _target(name: str, value: float | None, op: str, limit: float, detail: str) -> dict[str, Any]:
    met = value is not None and {"<": value < limit, "<=": value <= limit,
                                 ">=": value >= limit}[op]
    return {"target": name, "value": value, "op": op, "limit": limit, "met": met,
            "detail": detail}


def verdicts(results: dict[str, Any]) -> str:
    lines = []
    for t in results["targets"]:
        value = "n/a" if t["value"] is None else f"{t['value']:.3g}"
        lines.append(f"{'MET   ' if t['met'] else 'MISSED'} {t['target']}: {value} "
                     f"(limit {t['op']} {t['limit']}; {t['detail']})")
    return "\n".join(lines)
