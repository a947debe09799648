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
"""

from __future__ import annotations

import argparse
import json
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
from shared.task.resolution import preview

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "shared" / "doctor" / "corpus"
TARGET_LINES = 2000
ENV = [{"name": "LR", "value": "0.1"}, {"name": "EPOCHS", "value": "3"},
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
    doctor = Doctor(applying(True, [], [], [policy]))
    task = {"files": files}
    n, rounds = (20, 3) if quick else (100, 5)

    def plain() -> Any:
        return preview(ENV, "bench", policy, limits, {})

    def warm() -> Any:
        return preview(ENV, "bench", policy, limits, task, None, doctor=doctor)

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
            "ratio_cold": round(with_cold / without, 2)}


def lines(result: dict[str, Any]) -> list[str]:
    ms = result["ms_per_preview"]
    return [f"{v:8.3f} ms  {k}" for k, v in ms.items()] + [
        f"ratio with/without: {result['ratio_warm']}x (scripts cached), "
        f"{result['ratio_cold']}x (read anew); {result['script_lines']} lines in "
        f"{result['files']} files"]


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
