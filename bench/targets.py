"""The targets the run is judged against, each MET or MISSED with what caused it.

Two floors, both measured in the same run: the bare three-hop Celery pipeline
(``baseline``) and the thin design (``thin``: an endpoint writing one ~2 KB record
and enqueuing it, three hops each reading it and writing a new state).
"""

from __future__ import annotations

from typing import Any

LIMITS = {
    "throughput_vs_thin": 0.85,  # pipeline throughput >= this x the thin floor's
    "throughput_vs_bare": 0.70,  # ... and >= this x bare Celery's
    "p99_vs_thin": 1.5,  # p99 submit -> launching at 50 % of thin's throughput
    "post_vs_noop_enqueue": 0.7,  # POST /api/v1/tasks >= this x no-op + enqueue
    "commands_vs_thin": 1.5,  # Redis commands per task <= this x the thin floor's
    "listing_ms": 15.0,  # GET /api/v1/tasks?limit=50, p50 at the large store
    "memory_bytes": 4096,  # Redis memory per stored task of 44 variables
    "merge_1000_ms": 5.0,  # validation + merge of 1,000 variables
    "history": 1.2,  # a state change at 200 revisions / at 1
    "merge_linear": 2.0,  # per-variable cost, 10,000 vs 10 (and vs 100) variables
    "listing_growth": 1.5,  # GET ?limit=50 p50 at the large store / at 1,000
    "retention": 0.05,  # memory left by retention 0 / by retention off
    "reconciler": 1.0,  # status calls per pass, 10,000 / 10 running tasks
    "podman": 0.8,  # podman launcher throughput / kube play loop
    "doctor_pathological": 2.0,  # a hostile 64 KiB script's reading / a plain one's
    "hostile_name": 2.0,  # a preview with a name at the length limit / with a plain name
    "hostile_secret": 2.0,  # redaction of 2 MB, a secret sharing its prefix / a plain one
    "neighbour": 1.2,  # another tenant's task beside a hostile input / on a quiet stack
}


def paced_at(rows: list[dict[str, Any]], fraction: float) -> dict[str, Any] | None:
    """The paced load offered at ``fraction`` of the thin floor's throughput, if measured."""
    return next((r for r in rows if abs(r["fraction"] - fraction) < 1e-9), None)


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _against(pipe: dict[str, Any], floor: dict[str, Any], at: float) -> dict[str, Any]:
    """taskenv's burst and paced figures over one floor's."""
    pb, fb = pipe["burst"], floor["burst"]
    p_at, f_at = paced_at(pipe["paced"], at), paced_at(floor["paced"], at)
    return {
        "throughput": pb["throughput"] / fb["throughput"],
        # A floor's only mark is its third hop's start: its throughput.
        "throughput_to_launching": (pb.get("throughput_to_launching", pb["throughput"])
                                    / fb["throughput"]),
        "p99_at_judged_load": (_div(p_at["latency_ms"]["p99"], f_at["latency_ms"]["p99"])
                               if p_at and f_at else None),
        "p99_burst": pb["latency_ms"]["p99"] / fb["latency_ms"]["p99"],
        "redis_commands_per_task": (pb["redis_commands"]["per_item"]
                                    / fb["redis_commands"]["per_item"]),
        "cpu_per_task": pb["cpu"]["cpu_ms_per_item_total"] / fb["cpu"]["cpu_ms_per_item_total"],
        "p99_by_load": {str(f["fraction"]): p["latency_ms"]["p99"] / f["latency_ms"]["p99"]
                        for f in floor["paced"] if (p := paced_at(pipe["paced"], f["fraction"]))},
    }


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """Every ratio the run reports, against both floors where there are two."""
    at = results["meta"]["settings"]["p99_judged_at"]
    post, growth = results["post"], results["growth"]
    merge = {r["variables"]: r for r in growth["merge"]["rows"]}
    podman = results.get("podman", {})
    return {
        "vs_thin": _against(results["pipeline"], results["thin"], at),
        "vs_bare": _against(results["pipeline"], results["baseline"], at),
        "thin_vs_bare": _against(results["thin"], results["baseline"], at),
        "post_vs_noop_enqueue": post["api"]["throughput"] / post["noop_enqueue"]["throughput"],
        "post_vs_noop": post["api"]["throughput"] / post["noop"]["throughput"],
        "noop_enqueue_vs_noop": post["noop_enqueue"]["throughput"] / post["noop"]["throughput"],
        "transition_200_vs_1": growth["transition"]["time_ratio"],
        "transition_bytes_200_vs_1": growth["transition"]["bytes_ratio"],
        "merge_per_variable_10k_vs_10": (merge[10_000]["per_variable_us"]
                                         / merge[10]["per_variable_us"]),
        "merge_per_variable_10k_vs_100": growth["merge"]["per_variable_ratio_10k_vs_100"],
        "listing_large_vs_1000": growth["listing"]["get_list_limit_50"][
            "p50_ratio_large_vs_small"],
        "memory_retention_0_vs_off": growth["retention"]["ratio"],
        "reconciler_calls_10k_vs_10": growth.get("reconciler", {}).get(
            "status_calls_ratio_large_vs_small"),
        "podman_throughput": podman.get("throughput_ratio"),
        "podman_p50_submit_to_running": podman.get("p50_ratio"),
        "doctor_pathological_vs_plain": results.get("doctor", {}).get(
            "pathological", {}).get("worst_ratio"),
        "hostile_name_vs_plain": results.get("hostile_input", {}).get("worst_doctor_ratio"),
        "hostile_secret_vs_plain": results.get("hostile_input", {}).get(
            "redaction", {}).get("worst_ratio"),
        "neighbour_beside_hostile_script": results.get("doctor_neighbour", {}).get("ratio"),
        "neighbour_beside_long_name": results.get("doctor_neighbour", {}).get(
            "ratio_beside_long_name"),
        "neighbour_beside_output_flood": results.get("output_neighbour", {}).get("ratio"),
    }


def judge(results: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    r = ratios(results)
    return r, [*_pipeline_targets(results, r), *_store_targets(results, r),
               *_growth_targets(results, r), *doctor_targets(results),
               *hostile_input_targets(results), *neighbour_targets(results)]


def _pipeline_targets(results: dict[str, Any], r: dict[str, Any]) -> list[dict[str, Any]]:
    pb, tb, bb = (results[k]["burst"] for k in ("pipeline", "thin", "baseline"))
    at = results["meta"]["settings"]["p99_judged_at"]
    p_at, t_at = paced_at(results["pipeline"]["paced"], at), paced_at(results["thin"]["paced"], at)
    post = results["post"]
    return [
        _target("pipeline throughput >= 0.85 x thin floor", r["vs_thin"]["throughput"], ">=",
                LIMITS["throughput_vs_thin"],
                f"{pb['throughput']:.1f} vs {tb['throughput']:.1f} /s", cpu_cause(pb, tb)),
        _target("pipeline throughput >= 0.70 x bare Celery", r["vs_bare"]["throughput"], ">=",
                LIMITS["throughput_vs_bare"],
                f"{pb['throughput']:.1f} vs {bb['throughput']:.1f} /s", cpu_cause(pb, bb)),
        _target(f"p99 submit -> launching <= 1.5 x thin floor's (both offered {at:.0%} of "
                "its throughput)", r["vs_thin"]["p99_at_judged_load"], "<=",
                LIMITS["p99_vs_thin"],
                f"{p_at['latency_ms']['p99']:.1f} vs {t_at['latency_ms']['p99']:.1f} ms"
                if p_at and t_at else "not measured", p99_cause(p_at)),
        _target("POST /api/v1/tasks throughput >= 0.7 x no-op + enqueue endpoint",
                r["post_vs_noop_enqueue"], ">=", LIMITS["post_vs_noop_enqueue"],
                f"{post['api']['throughput']:.0f} vs {post['noop_enqueue']['throughput']:.0f} /s",
                f"server CPU per request {post['api']['cpu']['cpu_ms_per_item']['api']:.2f} ms "
                f"vs {post['noop_enqueue']['cpu']['cpu_ms_per_item']['noop_enqueue']:.2f} ms"),
        _target("Redis commands per task <= 1.5 x thin floor's",
                r["vs_thin"]["redis_commands_per_task"], "<=", LIMITS["commands_vs_thin"],
                f"{pb['redis_commands']['per_item']:.1f} vs {tb['redis_commands']['per_item']:.1f}",
                commands_cause(pb, tb)),
    ]


def _store_targets(results: dict[str, Any], r: dict[str, Any]) -> list[dict[str, Any]]:
    growth = results["growth"]
    listing = growth["listing"]
    get = listing["get_list_limit_50"]
    large = listing["stored"]["large"]
    per_task = growth["retention"]["retention_off"]["bytes_left_per_task"]
    merge_1000 = next(x for x in growth["merge"]["rows"] if x["variables"] == 1000)
    return [
        _target(f"GET /api/v1/tasks?limit=50 under 15 ms (p50 at {large:,} stored)",
                get["large"]["p50"] * 1e3, "<", LIMITS["listing_ms"],
                f"p50 {get['large']['p50'] * 1e3:.1f} ms, p99 {get['large']['p99'] * 1e3:.1f} "
                f"ms; at 1,000 stored p50 {get['small']['p50'] * 1e3:.1f} ms",
                "loopback round trip, client side: an upper bound of server time"),
        _target("Redis memory per stored task of 44 variables <= 4 KB", per_task, "<=",
                LIMITS["memory_bytes"], f"{per_task:,.0f} B per finished task "
                f"(record JSON {listing['memory']['record_json_bytes']:,} B)",
                "env and resolved env stored as JSON in the revision hash"),
        _target("validation + merge of 1,000 variables < 5 ms", merge_1000["seconds"] * 1e3, "<",
                LIMITS["merge_1000_ms"], f"{merge_1000['seconds'] * 1e3:.3f} ms", ""),
    ]


def _growth_targets(results: dict[str, Any], r: dict[str, Any]) -> list[dict[str, Any]]:
    growth = results["growth"]
    small, large = growth["transition"]["rows"]
    merge = {x["variables"]: x for x in growth["merge"]["rows"]}
    stored = growth["listing"]["stored"]["large"]
    ret = growth["retention"]
    out = [
        _target("growth: state change at 200 vs 1 revision(s) of 100 variables (time)",
                r["transition_200_vs_1"], "<=", LIMITS["history"],
                f"{large['median_ms']:.2f} vs {small['median_ms']:.2f} ms median; "
                f"{large['bytes_sent']:.0f} vs {small['bytes_sent']:.0f} B sent "
                f"(x{r['transition_bytes_200_vs_1']:.2f})", ""),
        _target("growth: validation + merge per variable, 10,000 vs 10 variables",
                r["merge_per_variable_10k_vs_10"], "<=", LIMITS["merge_linear"],
                f"{merge[10]['per_variable_us']:.2f} -> {merge[10_000]['per_variable_us']:.2f} "
                f"µs/variable (10k vs 100: x{r['merge_per_variable_10k_vs_100']:.2f})", ""),
        _target(f"growth: GET /tasks?limit=50 p50, {stored:,} vs 1,000 stored",
                r["listing_large_vs_1000"], "<=", LIMITS["listing_growth"],
                f"{growth['listing']['get_list_limit_50']['large']['p50'] * 1e3:.1f} vs "
                f"{growth['listing']['get_list_limit_50']['small']['p50'] * 1e3:.1f} ms", ""),
        _target(f"growth: Redis memory after {ret['tasks']:,} finished tasks, retention 0 vs "
                "off", r["memory_retention_0_vs_off"], "<=", LIMITS["retention"],
                f"{ret['retention_0']['bytes_left'] / 2**20:.2f} vs "
                f"{ret['retention_off']['bytes_left'] / 2**20:.1f} MiB", ""),
    ]
    if "reconciler" in growth:
        rows = growth["reconciler"]["rows"]
        out.append(_target(
            f"growth: reconciler status calls per pass, {rows[1]['running']:,} vs "
            f"{rows[0]['running']:,} running tasks", r["reconciler_calls_10k_vs_10"], "<=",
            LIMITS["reconciler"], f"{rows[1]['status_calls_per_pass']:.1f} vs "
            f"{rows[0]['status_calls_per_pass']:.1f} calls", ""))
    out.append(_podman_target(results.get("podman", {}), r))
    return out


def doctor_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The doctor's bound, when measured: every hostile 64 KiB script read within 2 x the
    time of a plain 64 KiB script of its language (bench/doctor.py)."""
    found = results.get("doctor", {}).get("pathological")
    if not found:
        return []
    worst = max(found["ratios"], key=found["ratios"].get)
    ms = found["ms_per_read"]
    return [_target(
        "doctor: each hostile 64 KiB script read within 2 x a plain one's time",
        found["worst_ratio"], "<=", LIMITS["doctor_pathological"],
        ", ".join(f"{name} x{ratio:.2f}" for name, ratio in found["ratios"].items()),
        f"slowest: {worst}, {ms[worst]:.1f} ms ({found['readings'][worst]}); plain "
        f"scripts {ms['plain shell']:.1f} ms (shell), {ms['plain python']:.1f} ms (python)")]


def neighbour_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Another tenant's plain task beside a hostile one, against a quiet stack, when
    measured: a hostile script, a name at the length limit (bench/doctor_neighbour.py),
    a local task flooding its output with a hostile secret (bench/output_neighbour.py)."""
    out: list[dict[str, Any]] = []
    found = results.get("doctor_neighbour")
    if found:
        ms = found["median_ms"]
        out += [_target(f"neighbour: another tenant's task {what} within 1.2 x a quiet "
                        "stack's", found[key], "<=", LIMITS["neighbour"],
                        f"{ms[name]:.0f} ms", f"quiet {ms['quiet']:.0f} ms")
                for what, key, name in (
                    ("beside a hostile script", "ratio", "beside a hostile one"),
                    ("beside a name at the length limit", "ratio_beside_long_name",
                     "beside a hostile name")) if key in found]
    flood = results.get("output_neighbour")
    if flood and "skipped" not in flood:
        ms = flood["median_ms"]
        out.append(_target("neighbour: another tenant's local task beside a task flooding "
                           "output with a hostile secret within 1.2 x a quiet host's",
                           flood["ratio"], "<=", LIMITS["neighbour"],
                           f"{ms['beside a flood']:.0f} ms", f"quiet {ms['quiet']:.0f} ms"))
    return out


def hostile_input_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """A tenant's hostile input, when measured (bench/hostile_input.py): the doctor's
    preview of a name at the length limit, and redaction of 2 MB of output with a
    40,001-character secret sharing its prefix, each within 2 x a plain input's time."""
    found = results.get("hostile_input")
    if not found:
        return []
    doctor, redaction = found["doctor"], found["redaction"]
    ms = doctor["ms_per_preview"]
    return [
        _target("doctor: a preview with a name at the length limit within 2 x a plain "
                "name's", found["worst_doctor_ratio"], "<=", LIMITS["hostile_name"],
                ", ".join(f"{n} x{r:.2f}" for n, r in doctor["ratios"].items()),
                f"plain name {ms['plain name']:.3f} ms a preview"),
        _target("redaction: 2 MB with a secret sharing its prefix within 2 x a plain "
                "secret's", redaction["worst_ratio"], "<=", LIMITS["hostile_secret"],
                ", ".join(f"{n} x{r:.2f}" for n, r in redaction["ratios"].items()),
                ", ".join(f"{n} {t:.0f} ms" for n, t in redaction["ms"].items())),
    ]


def _podman_target(podman: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    name = "podman launcher throughput >= 0.8 x a loop of podman kube play"
    if "skipped" in podman or not podman:
        return {**_target(name, None, ">=", LIMITS["podman"], "not measured", ""),
                "skipped": podman.get("skipped", "not run")}
    p, f = podman["pipeline"], podman["floor"]
    return _target(name, r["podman_throughput"], ">=", LIMITS["podman"],
                   f"{p['throughput']:.2f} vs {f['throughput']:.2f} tasks/s; p50 submit -> "
                   f"running {p['submit_to_running_ms']['p50']:.0f} vs "
                   f"{f['submit_to_running_ms']['p50']:.0f} ms", "")


def cpu_cause(pipe: dict[str, Any], floor: dict[str, Any]) -> str:
    """Where taskenv's CPU per task goes beyond the floor's, process group by group."""
    mine, theirs = pipe["cpu"]["cpu_ms_per_item"], floor["cpu"]["cpu_ms_per_item"]
    parts = ", ".join(f"{k} {v:.1f}" for k, v in mine.items() if v >= 0.05)
    floor_parts = ", ".join(f"{k} {v:.1f}" for k, v in theirs.items() if v >= 0.05)
    return (f"CPU per task {pipe['cpu']['cpu_ms_per_item_total']:.1f} ms ({parts}) vs "
            f"{floor['cpu']['cpu_ms_per_item_total']:.1f} ms ({floor_parts})")


def p99_cause(paced: dict[str, Any] | None) -> str:
    if not paced:
        return ""
    done = paced.get("throughput_to_launching", 0.0)
    offered = paced["offered_rate"] or 0.0
    state = "saturated: its queue grew" if done < 0.97 * offered else "kept up"
    return f"offered {offered:.1f}/s, reached launching at {done:.1f}/s ({state})"


def commands_cause(pipe: dict[str, Any], floor: dict[str, Any], top: int = 6) -> str:
    mine = pipe["redis_commands"]["by_command_per_item"]
    theirs = floor["redis_commands"]["by_command_per_item"]
    extra = sorted(((mine.get(k, 0) - theirs.get(k, 0), k) for k in mine), reverse=True)
    return "most extra per task: " + ", ".join(f"{k} +{d:.1f}" for d, k in extra[:top] if d > 0)


def _target(name: str, value: float | None, op: str, limit: float, detail: str,
            cause: str) -> dict[str, Any]:
    met = value is not None and {"<": value < limit, "<=": value <= limit,
                                 ">=": value >= limit}[op]
    return {"target": name, "value": value, "op": op, "limit": limit, "met": met,
            "detail": detail, "cause": cause}


def verdict(t: dict[str, Any]) -> str:
    if t.get("skipped"):
        return "NOT MEASURED"
    return "MET" if t["met"] else "MISSED"


def verdicts(results: dict[str, Any]) -> str:
    lines = []
    for t in results["targets"]:
        value = "n/a" if t["value"] is None else f"{t['value']:.3g}"
        line = (f"{verdict(t):12s} {t['target']}: {value} (limit {t['op']} {t['limit']}; "
                f"{t['detail']})")
        if t.get("skipped"):
            line += f"\n             {t['skipped']}"
        elif not t["met"] and t["cause"]:
            line += f"\n             cause: {t['cause']}"
        lines.append(line)
    return "\n".join(lines)
