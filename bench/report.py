"""Ratios, targets, the table and the plot, from one run's results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TARGETS = {
    "throughput": 0.85,  # pipeline throughput >= 0.85 x bare
    "p99": 1.3,  # pipeline p99 <= 1.3 x bare p99 (same offered load)
    "post": 0.5,  # POST /api/v1/tasks throughput >= 0.5 x no-op endpoint
    "merge_1000_ms": 5.0,  # validation + merge of 1,000 variables < 5 ms
}
LISTING_FACTOR = 1.5  # GET ?limit=50 p50 at the large store <= this x at 1,000 tasks


def _paced(rows: list[dict[str, Any]], fraction: float) -> dict[str, Any] | None:
    return next((r for r in rows if abs(r["fraction"] - fraction) < 1e-9), None)


def judge(results: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    base, pipe = results["baseline"], results["pipeline"]
    at = results["meta"]["settings"]["p99_judged_at"]
    post = results["post"]
    bb, pb = base["burst"], pipe["burst"]
    base_at, pipe_at = _paced(base["paced"], at), _paced(pipe["paced"], at)
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
            for b in base["paced"] if (p := _paced(pipe["paced"], b["fraction"]))},
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


def _lat(row: dict[str, Any]) -> str:
    m = row["latency_ms"]
    return f"{m['p50']:.1f} / {m['p95']:.1f} / {m['p99']:.1f}"


def table(results: dict[str, Any]) -> str:
    base, pipe, r = results["baseline"], results["pipeline"], results["ratios"]
    post = results["post"]
    bb, pb = base["burst"], pipe["burst"]
    n = results["meta"]["settings"]["tasks"]
    rows = [
        ("measure", "taskenv", "floor", "ratio"),
        (f"throughput, burst of {n} (/s, best round)", f"{pb['throughput']:.1f}",
         f"{bb['throughput']:.1f}", f"{r['throughput']:.2f}"),
        ("latency p50/p95/p99, burst (ms)", _lat(pb), _lat(bb), f"p99 {r['p99_burst']:.2f}"),
    ]
    for b in base["paced"]:
        p = _paced(pipe["paced"], b["fraction"])
        if p:
            rows.append((f"latency p50/p95/p99 at {b['fraction']:.0%} ({b['offered_rate']:.0f}/s)"
                         " (ms)", _lat(p), _lat(b),
                         f"p99 {r['p99_by_load'][str(b['fraction'])]:.2f}"))
    for p in pipe["paced"]:
        m = p["submit_to_resolved_ms"]
        rows.append((f"taskenv submit → resolved p50/p95/p99 at {p['fraction']:.0%} (ms)",
                     f"{m['p50']:.1f} / {m['p95']:.1f} / {m['p99']:.1f}", "", ""))
    rows += [
        ("POST throughput (/s; floor: no-op endpoint)", f"{post['api']['throughput']:.0f}",
         f"{post['noop']['throughput']:.0f}", f"{r['post']:.2f}"),
        ("POST throughput (/s; floor: no-op + 1 SET + send_task)",
         f"{post['api']['throughput']:.0f}", f"{post['noop_enqueue']['throughput']:.0f}",
         f"{r['post_vs_noop_enqueue']:.2f}"),
        ("POST latency p50/p99 (ms; floor: no-op endpoint)",
         f"{post['api']['response_ms']['p50']:.1f} / {post['api']['response_ms']['p99']:.1f}",
         f"{post['noop']['response_ms']['p50']:.1f} / {post['noop']['response_ms']['p99']:.1f}",
         ""),
        ("server CPU ms per POST (floor: no-op endpoint)",
         f"{post['api']['cpu']['cpu_ms_per_item']['api']:.2f}",
         f"{post['noop']['cpu']['cpu_ms_per_item']['noop']:.2f}", ""),
        ("Redis commands per task (burst)", f"{pb['redis_commands']['per_item']:.1f}",
         f"{bb['redis_commands']['per_item']:.1f}", f"{r['redis_commands_per_task']:.2f}"),
        ("CPU ms per task, all processes (burst)", f"{pb['cpu']['cpu_ms_per_item_total']:.2f}",
         f"{bb['cpu']['cpu_ms_per_item_total']:.2f}", f"{r['cpu_per_task']:.2f}"),
    ]
    own = results.get("own_code", {}).get("cpu_ms_per_call", {})
    for name, ms in own.items():
        rows.append((f"in-process CPU ms per call: {name}", f"{ms:.3f}", "", ""))
    for row in results["growth"]["merge"]["rows"]:
        rows.append((f"validation + merge, {row['variables']:,} variables (ms)",
                     f"{row['seconds'] * 1e3:.3f}", "", f"{row['per_variable_us']:.2f} µs/var"))
    listing = results["growth"]["listing"]
    get = listing["get_list_limit_50"]
    rows += [
        ("GET /tasks?limit=50 p50 at 1,000 stored (ms)", f"{get['small']['p50'] * 1e3:.1f}",
         "", ""),
        (f"GET /tasks?limit=50 p50 at {listing['stored']['large']:,} stored (ms)",
         f"{get['large']['p50'] * 1e3:.1f}", "", f"{get['p50_ratio_large_vs_small']:.2f}"),
        ("Redis memory per stored task (bytes)", f"{listing['memory']['bytes_per_task']:.0f}",
         "", f"record JSON {listing['memory']['record_json_bytes']} B"),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    out = []
    for i, row in enumerate(rows):
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                   + " |")
        if i == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def plot(results: dict[str, Any], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "not drawn (pip install -r bench/requirements.txt)"
    base, pipe = results["baseline"], results["pipeline"]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for rows, key, label, color in (
        (pipe["paced"], "latency_ms", "taskenv (submit → launching)", "tab:red"),
        (base["paced"], "latency_ms", "bare Celery (submit → 3rd hop)", "tab:blue"),
    ):
        x = [r["offered_rate"] for r in rows]
        ax.plot(x, [r[key]["p50"] for r in rows], "o-", color=color, label=f"{label} p50")
        ax.plot(x, [r[key]["p99"] for r in rows], "s--", color=color, label=f"{label} p99")
    ax.axvline(base["burst"]["throughput"], color="tab:blue", lw=0.8, ls=":",
               label="bare throughput (burst)")
    ax.axvline(pipe["burst"]["throughput"], color="tab:red", lw=0.8, ls=":",
               label="taskenv throughput (burst)")
    ax.set_yscale("log")
    ax.set_xlabel("offered load (submissions/s, paced)")
    ax.set_ylabel("latency (ms, log scale)")
    m = results["meta"]
    ax.set_title(f"Latency against offered load — {m['machine']['nproc']} cores, "
                 f"-P {m['settings']['pool']} -c {m['settings']['concurrency']}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return str(path)
