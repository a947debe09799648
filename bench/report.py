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
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(began))
    _write(results, out, stamp)  # first as measured: a failure to judge loses nothing
    results["ratios"], results["targets"] = targets.judge(results)
    _write(results, out, stamp)
    drawn = plot(results, out / "latency-vs-load.png")
    say()
    say(table(results))
    say()
    say(targets.verdicts(results))
    say()
    say(f"results: {out / 'latest.json'} (and {stamp}.json); plot: {drawn}; "
        f"took {results['meta']['duration_seconds']:.0f} s")


def _write(results: dict[str, Any], out: Path, stamp: str) -> None:
    text = json.dumps(results, indent=2, default=str)
    (out / "latest.json").write_text(text)
    (out / f"{stamp}.json").write_text(text)


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


def _x(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def table(results: dict[str, Any]) -> str:
    """taskenv, the thin floor, bare Celery, and taskenv's ratio to each."""
    pipe, thin, base, r = results["pipeline"], results["thin"], results["baseline"], \
        results["ratios"]
    t, b = r["vs_thin"], r["vs_bare"]
    pb, tb, bb = pipe["burst"], thin["burst"], base["burst"]
    n = results["meta"]["settings"]["tasks"]
    rows: list[tuple[str, ...]] = [
        ("measure", "taskenv", "thin floor", "bare Celery", "x thin", "x bare"),
        (f"throughput, burst of {n} (/s, best round)", f"{pb['throughput']:.1f}",
         f"{tb['throughput']:.1f}", f"{bb['throughput']:.1f}", _x(t["throughput"]),
         _x(b["throughput"])),
        ("latency p50/p95/p99, burst (ms)", _lat(pb), _lat(tb), _lat(bb),
         f"p99 {_x(t['p99_burst'])}", f"p99 {_x(b['p99_burst'])}"),
    ]
    for f in thin["paced"]:
        p, bare = paced_at(pipe["paced"], f["fraction"]), paced_at(base["paced"], f["fraction"])
        if p and bare:
            key = str(f["fraction"])
            rows.append((f"latency p50/p95/p99 at {f['fraction']:.0%} of thin "
                         f"({f['offered_rate']:.0f}/s) (ms)", _lat(p), _lat(f), _lat(bare),
                         f"p99 {_x(t['p99_by_load'].get(key))}",
                         f"p99 {_x(b['p99_by_load'].get(key))}"))
    rows += [
        ("Redis commands per task (burst)", f"{pb['redis_commands']['per_item']:.1f}",
         f"{tb['redis_commands']['per_item']:.1f}", f"{bb['redis_commands']['per_item']:.1f}",
         _x(t["redis_commands_per_task"]), _x(b["redis_commands_per_task"])),
        ("CPU ms per task, all processes (burst)", f"{pb['cpu']['cpu_ms_per_item_total']:.2f}",
         f"{tb['cpu']['cpu_ms_per_item_total']:.2f}", f"{bb['cpu']['cpu_ms_per_item_total']:.2f}",
         _x(t["cpu_per_task"]), _x(b["cpu_per_task"])),
        *_post_rows(results),
        *_own_rows(results),
        *_growth_rows(results),
    ]
    return _markdown(rows)


def _post_rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    post, r = results["post"], results["ratios"]
    api, enq, noop = post["api"], post["noop_enqueue"], post["noop"]
    return [
        ("POST throughput (/s): taskenv | no-op + enqueue | no-op", f"{api['throughput']:.0f}",
         f"{enq['throughput']:.0f}", f"{noop['throughput']:.0f}",
         _x(r["post_vs_noop_enqueue"]), _x(r["post_vs_noop"])),
        ("POST latency p50/p99 (ms), same columns",
         f"{api['response_ms']['p50']:.1f} / {api['response_ms']['p99']:.1f}",
         f"{enq['response_ms']['p50']:.1f} / {enq['response_ms']['p99']:.1f}",
         f"{noop['response_ms']['p50']:.1f} / {noop['response_ms']['p99']:.1f}", "", ""),
        ("server CPU ms per POST, same columns", f"{api['cpu']['cpu_ms_per_item']['api']:.2f}",
         f"{enq['cpu']['cpu_ms_per_item']['noop_enqueue']:.2f}",
         f"{noop['cpu']['cpu_ms_per_item']['noop']:.2f}", "", ""),
    ]


def _own_rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    own = results.get("own_code", {}).get("cpu_ms_per_call", {})
    return [(f"in-process CPU ms per call: {name}", f"{ms:.3f}", "", "", "", "")
            for name, ms in own.items()]


def _growth_rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    growth, r = results["growth"], results["ratios"]
    rows: list[tuple[str, ...]] = [
        (f"validation + merge, {row['variables']:,} variables (ms)",
         f"{row['seconds'] * 1e3:.3f}", "", "", f"{row['per_variable_us']:.2f} µs/var", "")
        for row in growth["merge"]["rows"]]
    listing = growth["listing"]
    get = listing["get_list_limit_50"]
    small, large = growth["transition"]["rows"]
    ret = growth["retention"]
    rows += [
        ("GET /tasks?limit=50 p50 at 1,000 stored (ms)", f"{get['small']['p50'] * 1e3:.1f}",
         "", "", "", ""),
        (f"GET /tasks?limit=50 p50 at {listing['stored']['large']:,} stored (ms)",
         f"{get['large']['p50'] * 1e3:.1f}", "", "", f"x1k {_x(r['listing_large_vs_1000'])}",
         ""),
        ("state change at 1 / 200 revisions, 100 variables (ms median)",
         f"{small['median_ms']:.2f} / {large['median_ms']:.2f}", "", "",
         f"x {_x(r['transition_200_vs_1'])}", ""),
        ("bytes sent per state change at 1 / 200 revisions",
         f"{small['bytes_sent']:.0f} / {large['bytes_sent']:.0f}", "", "",
         f"x {_x(r['transition_bytes_200_vs_1'])}", ""),
        ("Redis memory per finished task, 44 variables (bytes)",
         f"{ret['retention_off']['bytes_left_per_task']:.0f}", "", "",
         f"record JSON {listing['memory']['record_json_bytes']} B", ""),
        (f"memory left by {ret['tasks']:,} finished tasks, retention 0 / off (MiB)",
         f"{ret['retention_0']['bytes_left'] / 2**20:.2f} / "
         f"{ret['retention_off']['bytes_left'] / 2**20:.1f}", "", "",
         f"x {_x(r['memory_retention_0_vs_off'])}", ""),
    ]
    rec = growth.get("reconciler")
    if rec:
        a, b = rec["rows"]
        rows.append((f"reconciler status calls per pass, {a['running']:,} / {b['running']:,} "
                     "running", f"{a['status_calls_per_pass']:.1f} / "
                     f"{b['status_calls_per_pass']:.1f}", "", "",
                     f"x {_x(r['reconciler_calls_10k_vs_10'])}", ""))
    podman = results.get("podman", {})
    if "pipeline" in podman:
        p, f = podman["pipeline"], podman["floor"]
        rows.append((f"podman: {podman['tasks']} tasks/s (taskenv | kube play loop)",
                     f"{p['throughput']:.2f}", "", f"{f['throughput']:.2f}",
                     "", f"x play {_x(podman['throughput_ratio'])}"))
        rows.append(("podman: p50 submit → running (ms), same columns",
                     f"{p['submit_to_running_ms']['p50']:.0f}", "",
                     f"{f['submit_to_running_ms']['p50']:.0f}", "",
                     f"x play {_x(podman['p50_ratio'])}"))
    return rows


def _markdown(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
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
    base, thin, pipe = results["baseline"], results["thin"], results["pipeline"]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for rows, key, label, color in (
        (pipe["paced"], "latency_ms", "taskenv (submit → launching)", "tab:red"),
        (thin["paced"], "latency_ms", "thin floor (submit → 3rd hop)", "tab:green"),
        (base["paced"], "latency_ms", "bare Celery (submit → 3rd hop)", "tab:blue"),
    ):
        x = [r["offered_rate"] for r in rows]
        ax.plot(x, [r[key]["p50"] for r in rows], "o-", color=color, label=f"{label} p50")
        ax.plot(x, [r[key]["p99"] for r in rows], "s--", color=color, label=f"{label} p99")
    ax.axvline(base["burst"]["throughput"], color="tab:blue", lw=0.8, ls=":",
               label="bare throughput (burst)")
    ax.axvline(thin["burst"]["throughput"], color="tab:green", lw=0.8, ls=":",
               label="thin floor throughput (burst)")
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
