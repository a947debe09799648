"""Where the time goes, from py-spy's raw (collapsed-stack) output.

``run.py --profile`` records the API and each worker (with its prefork children)
during one more burst; :func:`summarize_file` splits the on-CPU samples by the
package of the innermost frame (self time) and lists taskenv's own functions by
inclusive time.  ``python bench/profile.py FILE...`` prints the same summary.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

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


def main(paths: list[str]) -> None:
    print(render({p: summarize_file(Path(p)) for p in paths}))


if __name__ == "__main__":
    main(sys.argv[1:])
