"""Where the time goes, from py-spy's raw (collapsed-stack) output.

``python -m bench --profile`` records the API and each worker (with its prefork
children) during one more burst (:func:`record_burst`); :func:`summarize_file`
splits the on-CPU samples by the package of the innermost frame (self time) and
lists taskenv's own functions by inclusive time.  ``python -m bench.profile FILE...``
prints the same summary.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.report import say
from workers.queues import QUEUES

if TYPE_CHECKING:
    from bench.pipeline import Taskenv

OURS = ("api", "shared", "workers", "bench")


def _frame_file(frame: str) -> str:
    # "function (path/to/file.py:123)"
    if not frame.endswith(")") or " (" not in frame:
        return ""
    return frame.rsplit(" (", 1)[1][:-1].rsplit(":", 1)[0]


def package(frame: str) -> str:
    path = _frame_file(frame)
    if not path:
        return "?"
    head = path.split("/", 1)[0]
    return head[:-3] if head.endswith(".py") else head


def _function(frame: str) -> str:
    name, _, rest = frame.rpartition(" (")
    return f"{_frame_file(frame)}:{name}" if rest else frame


def summarize_file(path: Path, top: int = 15) -> dict[str, Any]:
    self_by_package: Counter[str] = Counter()
    inclusive_ours: Counter[str] = Counter()
    total = 0
    if not path.exists():
        return {"samples": 0, "missing": str(path)}
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        self_by_package[package(frames[-1])] += count
        for fn in {_function(f) for f in frames if package(f) in OURS}:
            inclusive_ours[fn] += count
    share = (lambda c: round(100 * c / total, 1)) if total else (lambda c: 0.0)
    ours_self = sum(c for p, c in self_by_package.items() if p in OURS)
    return {
        "samples": total,
        "self_percent_by_package": {p: share(c) for p, c in self_by_package.most_common(top)},
        "self_percent_ours": share(ours_self),
        "inclusive_percent_ours": {f: share(c) for f, c in inclusive_ours.most_common(top)},
    }


def render(summaries: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, s in summaries.items():
        lines.append(f"== {name}: {s['samples']} samples; self time in taskenv code "
                     f"{s.get('self_percent_ours', 0)}%")
        lines.append("  self time by package: " + ", ".join(
            f"{k} {v}%" for k, v in s.get("self_percent_by_package", {}).items()))
        lines += [f"  {pct:5.1f}%  {fn}" for fn, pct in s.get("inclusive_percent_ours", {}).items()]
    return "\n".join(lines)


def record_burst(stack: Taskenv, args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """One more burst with py-spy sampling the API and each worker (with its children).

    The raw collapsed stacks go to ``profile-<process>.tmp`` beside the results (several
    MB each; ``*.tmp`` there is ignored by git).
    """
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        return {"skipped": "py-spy is not installed (pip install -r bench/requirements.txt)"}
    targets = {"api": stack.api.pid} if stack.api else {}
    targets.update({f"worker-{q}": w.pid for q, w in zip(QUEUES, stack.workers, strict=True)})
    out_dir.mkdir(parents=True, exist_ok=True)
    spies = {name: _spy(spy, pid, out_dir / f"profile-{name}.tmp")
             for name, pid in targets.items()}
    try:
        time.sleep(1.0)
        result = stack.load("profiled", min(args.tasks, 1000), None)
    finally:
        _stop_spies(list(spies.values()))
    summary = {name: summarize_file(out_dir / f"profile-{name}.tmp") for name in spies}
    say(render(summary))
    return {"throughput_under_profiler": result.get("throughput_to_succeeded"),
            "components": summary}


def _spy(spy: Path, pid: int, output: Path) -> subprocess.Popen[bytes]:
    # --gil: only samples of threads holding the GIL, i.e. Python actually running.
    return subprocess.Popen([str(spy), "record", "--pid", str(pid), "--subprocesses",
                             "--gil", "--rate", "200", "--format", "raw", "--nonblocking",
                             "--output", str(output)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop_spies(spies: list[subprocess.Popen[bytes]]) -> None:
    """SIGINT makes py-spy write what it recorded."""
    for p in spies:
        p.send_signal(signal.SIGINT)
    for p in spies:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(paths: list[str]) -> None:
    print(render({p: summarize_file(Path(p)) for p in paths}))


if __name__ == "__main__":
    main(sys.argv[1:])
