"""What a run shows: progress lines, then the table, the targets, the plot and the
results files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench import targets
from bench.targets import paced_at


def say(text: str = "") -> None:
    """One line of progress, at once: a run takes minutes."""
    print(text, flush=True)


def publish(results: dict[str, Any], out: Path, began: float) -> None:
    """Judge the run, write ``latest.json``, a timestamped copy and the plot, and print
    the table and the verdicts."""
    results = strip_private(results)
    results["ratios"], results["targets"] = targets.judge(results)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(began))
    text = json.dumps(results, indent=2, default=str)
    (out / "latest.json").write_text(text)
    (out / f"{stamp}.json").write_text(text)
    drawn = plot(results, out / "latency-vs-load.png")
    say()
    say(table(results))
    say()
    say(targets.verdicts(results))
    say()
    say(f"results: {out / 'latest.json'} (and {stamp}.json); plot: {drawn}; "
        f"took {results['meta']['duration_seconds']:.0f} s")


def strip_private(value: Any) -> Any:
    """Without the ``_``-prefixed entries the run keeps for itself (ids, submissions)."""
    if isinstance(value, dict):
        return {k: strip_private(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [strip_private(v) for v in value]
    return value

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
        p = paced_at(pipe["paced"], b["fraction"])
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
