"""What the doctor costs a preview: with a 2,000-line script set, against none.

In-process and pure (``shared.task.resolution.preview``, the function the API's
preview and the console's live preview call): the same env and policies, once without
the doctor and once with the built-in catalog and a task's scripts of about 2,000 lines
(the test corpus's four scripts, plus generated Python and shell training code of the
same shape).  Two readings with the doctor: *warm*, each script's reading already in
the content-digest cache (a console preview, re-run at every keystroke while the
scripts stay the same), and *cold*, the cache emptied before every call (the first
preview of new scripts).  Wall time per call, best of ``rounds`` rounds; reported as
ratios against the preview without the doctor.  ``python -m bench.doctor [--quick]``
runs it alone; ``python -m bench`` runs it with the rest.

Then the doctor's bound (``pathological``): the issue's hostile scripts, each 64 KiB
(shell: ``$(`` nested, backticks; Python: parentheses, lists, ``if`` nested), read
anew against a plain 64 KiB script of the same language (the generated training code
above), in turns within each round, the median of the rounds kept: each must be read
within 2 x the plain script's time (``bench/targets.py``).  What each reading says is
shown with it (too complex, and which limit; or not parsed in full).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.inputs import policy_body
from shared.doctor import scripts
from shared.doctor.catalog import applying
from shared.doctor.checkup import Doctor
from shared.env.envlist import Limits
from shared.policy.model import Policy
from shared.policy.scopes import Chain
from shared.task.resolution import preview

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "shared" / "doctor" / "corpus"
TARGET_LINES = 2000
ENV: list[dict[str, Any]] = [
    {"name": "LR", "value": "0.1"}, {"name": "EPOCHS", "value": "3"},
    {"name": "BATCH_SZ", "value": "64"}, {"name": "MODEL_NAME", "value": "gpt2"},
    {"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_DEBGU", "value": "WARN"},
    {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"},
    {"name": "HF_TOKEN", "value": "hf_0123456789abcdef", "secret": True}]


def _python_module(index: int, lines: int) -> str:
    """Training code of the corpus's shape: functions, env reads with and without defaults."""
    out = ["import os", "import math", ""]
    while len(out) < lines:
        n = len(out)
        out += [f"def step_{index}_{n}(batch, state):",
                f"    lr = float(os.environ.get('LR', '3e-4')) * math.cos({n} / 100)",
                f"    warmup = int(os.getenv('WARMUP_{n % 7}', '0'))",
                f"    clip = os.environ['GRAD_CLIP_{n % 5}'] if 'GRAD_CLIP_{n % 5}' in os.environ "
                "else '1.0'",
                "    loss = sum(x * lr for x in batch) / max(len(batch), 1)",
                "    state['loss'] = loss if warmup == 0 else loss / warmup",
                "    return float(clip) * loss", ""]
    return "\n".join(out[:lines]) + "\n"


def _shell_script(lines: int) -> str:
    out = ["#!/usr/bin/env bash", "set -euo pipefail"]
    while len(out) < lines:
        n = len(out)
        out += [f"# stage {n}: $NOT_READ in a comment",
                f"export STAGE_{n}=${{STAGE_{n}:-{n}}}",
                f"echo \"stage {n} on $HOSTNAME with ${{EPOCHS}} epochs\" "
                f">> \"${{LOG_DIR:-/tmp}}/run.log\"",
                f"python3 train.py --lr \"${{LR}}\" --stage \"$STAGE_{n}\" '--literal=$NOPE'"]
    return "\n".join(out[:lines]) + "\n"


def script_set(target: int = TARGET_LINES) -> list[dict[str, str]]:
    """About ``target`` lines: the corpus, then generated Python and shell to make it up."""
    files = [{"path": p.name, "content": p.read_text()} for p in sorted(CORPUS.iterdir())]
    have = sum(f["content"].count("\n") for f in files)
    rest = max(0, target - have)
    files.append({"path": "model_steps.py", "content": _python_module(0, rest * 3 // 4)})
    files.append({"path": "stages.sh", "content": _shell_script(rest - rest * 3 // 4)})
    return files


PATHOLOGICAL_BYTES = 64 * 1024


def _exactly(text: str, size: int) -> str:
    """``text`` cut at its last whole line within ``size`` bytes, then filled up to ``size``
    with a comment line (``#`` starts a comment in both languages)."""
    cut = text[:text.rindex("\n", 0, size) + 1] if len(text) > size else text
    pad = size - len(cut.encode())
    return cut + ("\n" + "#" * (pad - 2) + "\n" if pad >= 2 else " " * pad)


def pathological(size: int = PATHOLOGICAL_BYTES) -> dict[str, dict[str, str]]:
    """Each hostile input of ``size`` bytes, and the plain script of its language it is
    measured against: ``{name: {path, content, against}}``."""
    depth = (size - 40) // 3
    levels = int((size / 2) ** 0.5)  # the indentation of l levels takes about 2 l**2 bytes
    ifs = "import os\n" + "".join("    " * i + "if os.environ['A']:\n" for i in range(levels))
    inputs = {
        "plain shell": ("plain.sh", _shell_script(size // 20), ""),
        "plain python": ("plain.py", _python_module(0, size // 20), ""),
        "shell: $( nested": ("nested.sh", "$(" * depth + "x" + ")" * depth, "plain shell"),
        "shell: backticks": ("ticks.sh", "`" * size, "plain shell"),
        "python: ( nested": ("parens.py", "import os\nos.environ[" + "(" * (size // 2)
                             + "'A'", "plain python"),
        "python: [ nested": ("lists.py", "import os\nos.environ['A']\nx = ["
                             + "[" * (size // 2), "plain python"),
        "python: if nested": ("ifs.py", ifs[:ifs.rindex("\n", 0, size) + 1], "plain python"),
    }
    return {name: {"path": path, "content": _exactly(content, size), "against": against}
            for name, (path, content, against) in inputs.items()}


def pathological_phase(quick: bool = False) -> dict[str, Any]:
    """Each input read anew (its reading dropped from the cache first), all of them in
    turns within a round; the median of each over the rounds, as a ratio to the plain
    script of its language."""
    inputs = pathological()
    rounds = 3 if quick else 7
    times: dict[str, list[float]] = {name: [] for name in inputs}
    said: dict[str, str] = {}
    for _ in range(rounds):
        for name, f in inputs.items():
            scripts.CACHE.clear()
            started = time.perf_counter()
            reading = scripts.read(f["path"], f["content"])
            times[name].append(time.perf_counter() - started)
            said[name] = reading.too_complex or reading.error or "read in full"
    median = {name: statistics.median(t) for name, t in times.items()}
    ratios = {name: round(median[name] / median[f["against"]], 3)
              for name, f in inputs.items() if f["against"]}
    return {"bytes": PATHOLOGICAL_BYTES, "rounds": rounds,
            "ms_per_read": {name: round(t * 1000, 2) for name, t in median.items()},
            "ratios": ratios, "readings": said, "worst_ratio": max(ratios.values())}


def _per_call(fn: Callable[[], Any], n: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - started) / n)
    return best


def phase(quick: bool = False) -> dict[str, Any]:
    policy = Policy.from_dict({**policy_body(), "version": 1})
    limits = Limits()
    files = script_set()
    lines = sum(f["content"].count("\n") for f in files)
    chain = Chain.of(policy)
    doctor = Doctor(applying(True, [], [policy]))
    task = {"files": files}
    n, rounds = (20, 3) if quick else (100, 5)

    def plain() -> Any:
        return preview(ENV, "bench", chain, limits, {})

    def warm() -> Any:
        return preview(ENV, "bench", chain, limits, task, doctor=doctor)

    def cold() -> Any:
        scripts.CACHE.clear()
        return warm()

    shown = warm()  # also fills the cache for the warm readings
    assert shown["doctor"]["missing"], "the script set reads variables the env lacks"
    without = _per_call(plain, n, rounds)
    with_warm = _per_call(warm, n, rounds)
    with_cold = _per_call(cold, max(3, n // 5), rounds)
    return {"script_lines": lines, "files": len(files),
            "findings": {k: len(shown["doctor"][k]) for k in
                         ("missing", "unread", "from_defaults", "unknowable")},
            "ms_per_preview": {"without doctor": round(without * 1000, 3),
                               "with doctor, scripts cached": round(with_warm * 1000, 3),
                               "with doctor, scripts read anew": round(with_cold * 1000, 3)},
            "ratio_warm": round(with_warm / without, 2),
            "ratio_cold": round(with_cold / without, 2),
            "pathological": pathological_phase(quick)}


def lines(result: dict[str, Any]) -> list[str]:
    ms = result["ms_per_preview"]
    out = [f"{v:8.3f} ms  {k}" for k, v in ms.items()] + [
        f"ratio with/without: {result['ratio_warm']}x (scripts cached), "
        f"{result['ratio_cold']}x (read anew); {result['script_lines']} lines in "
        f"{result['files']} files"]
    if "pathological" in result:
        out += pathological_lines(result["pathological"])
    return out


def pathological_lines(result: dict[str, Any]) -> list[str]:
    ms = result["ms_per_read"]
    out = [f"{ms[name]:8.2f} ms  {name} ({result['bytes'] // 1024} KiB, read anew)"
           for name in ms if name.startswith("plain")]
    out += [f"{ms[name]:8.2f} ms  {name}: x{ratio:.2f} a plain script's time "
            f"({result['readings'][name]})" for name, ratio in result["ratios"].items()]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.doctor",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls per round")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = phase(args.quick)
    print(json.dumps(result, indent=2) if args.json else "\n".join(lines(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
