"""What a tenant's hostile input costs the platform, against a plain input of the same size.

Two of the platform's passes over a tenant's data, each measured in turns against a
plain input within each round, the median of the rounds kept, reported as a ratio
(target ≤ 2 x each, ``bench/targets.py``):

- **the doctor's near-miss search**: a preview (``shared.task.resolution.preview``, the
  function the API's preview and the policy stage call) of an env with one name at the
  length limit (``MAX_NAME_LENGTH``) and a script reading a name one edit from it,
  against a plain 13-character name and its near-miss; beside it, not judged, a name of
  100,000 characters (refused by the validation, ``name.max_length``; its script alone
  is 100 KB to read);
- **redaction**: 2 MB of output (a run of ``A``, fed in 4 KiB pieces as a pipe gives
  them, then whole) with a secret of 40,001 characters that shares every prefix with
  the output (``"A" * 40_000 + "B"``), against a secret of the same length that shares
  none; the search for the secret's forms is built anew each time (a task's runner
  builds it once).  Beside them, for the record and not judged: the same output against
  secrets whose forms both start and end like it (``"A" * 8`` and a 40,001-character run
  ``"A" * 20_000 + "B" + "A" * 20_000``), the case the linear backwards pass is for.

``python -m bench.hostile_input [--quick] [--json]`` runs it alone; ``python -m bench``
runs it with the rest.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from shared.doctor.catalog import applying
from shared.doctor.checkup import Doctor
from shared.env.envlist import MAX_NAME_LENGTH, Limits
from shared.policy.model import Policy
from shared.policy.scopes import Chain
from shared.secrets import StreamRedactor, _forms, redact

OUTPUT_CHARS = 2_000_000
PIECE = 4096
PLAIN_NAME = "LEARNING_RATE"
# Refused by the validation; its script alone is 100 KB to read: shown, not judged.
PAST_LIMIT = "name of 100,000 characters (not judged)"


def _typo(name: str) -> str:
    """``name`` with its last two characters swapped: one edit away."""
    return name[:-2] + name[-1] + name[-2]


def _preview_case(name: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    env = [{"name": name, "value": "1"}]
    script = f"import os\nvalue = os.environ['{_typo(name)}']\n"
    return env, {"files": [{"path": "train.py", "content": script}]}


def doctor_cases() -> dict[str, tuple[list[dict[str, Any]], dict[str, Any]]]:
    at_limit = "X" * (MAX_NAME_LENGTH - 2) + "YZ"
    return {"plain name": _preview_case(PLAIN_NAME),
            "name at the limit": _preview_case(at_limit),
            PAST_LIMIT: _preview_case("X" * 99_998 + "YZ")}


def plain_secret(length: int = 40_001) -> str:
    """A secret of ``length`` characters none of whose forms starts like a run of ``A``."""
    rng = random.Random(42)
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(length))


def redaction_cases() -> dict[str, list[str]]:
    return {"plain secret": [plain_secret()],
            "secret sharing the output's prefix": ["A" * 40_000 + "B"],
            "secrets starting and ending like the output": ["A" * 8,
                                                            "A" * 20_000 + "B" + "A" * 20_000]}


def _streamed(text: str, secrets: list[str]) -> str:
    redactor = StreamRedactor(secrets)
    out = [redactor.feed(text[i:i + PIECE]) for i in range(0, len(text), PIECE)]
    return "".join(out) + redactor.flush()


def _in_turns(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(t) for name, t in times.items()}


def doctor_phase(quick: bool = False) -> dict[str, Any]:
    from shared.task.resolution import preview  # noqa: PLC0415 (the heavy import, here)

    policy = Policy.from_dict({"scope": "platform", "version": 1})
    chain, limits = Chain.of(policy), Limits()
    doctor = Doctor(applying(True, [], [policy]))
    cases = doctor_cases()

    def call(name: str) -> Callable[[], Any]:
        env, task = cases[name]
        return lambda: [preview(env, "bench", chain, limits, task, doctor=doctor)
                        for _ in range(20)]

    said = {name: preview(env, "bench", chain, limits, task, doctor=doctor)
            for name, (env, task) in cases.items()}
    median = _in_turns({name: call(name) for name in cases}, 5 if quick else 11)
    plain = median["plain name"]
    return {"ms_per_preview": {n: round(t / 20 * 1000, 3) for n, t in median.items()},
            "ratios": {n: round(t / plain, 2) for n, t in median.items() if n != "plain name"},
            "found": {n: sorted({p["rule"] for p in s.get("errors", []) + s.get("warnings", [])
                                 if isinstance(p, dict)} | ({"doctor.script_unset"}
                                                             if s.get("doctor", {}).get("missing")
                                                             else set()))
                      for n, s in said.items()}}


def redaction_phase(quick: bool = False) -> dict[str, Any]:
    output = "A" * OUTPUT_CHARS
    cases = redaction_cases()
    calls: dict[str, Callable[[], Any]] = {}
    for name, secrets in cases.items():
        calls[f"{name}, 4 KiB pieces"] = _cold(partial(_streamed, output, secrets))
        calls[f"{name}, whole"] = _cold(partial(redact, output, secrets))
    for name, secrets in cases.items():  # right, before timing
        assert _streamed(output, secrets) == redact(output, secrets), name
    median = _in_turns(calls, 3 if quick else 5)
    ratios = {}
    for how in ("4 KiB pieces", "whole"):
        plain = median[f"plain secret, {how}"]
        ratios[f"secret sharing the output's prefix, {how}"] = round(
            median[f"secret sharing the output's prefix, {how}"] / plain, 2)
        ratios[f"secrets starting and ending like the output, {how} (not judged)"] = round(
            median[f"secrets starting and ending like the output, {how}"] / plain, 2)
    judged = [r for n, r in ratios.items() if "not judged" not in n]
    return {"output_chars": OUTPUT_CHARS,
            "ms": {n: round(t * 1000, 1) for n, t in median.items()},
            "ratios": ratios, "worst_ratio": max(judged)}


def _cold(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` with the search for the secrets' forms built anew, as a new task's is."""
    def anew() -> Any:
        _forms.cache_clear()
        return call()
    return anew


def phase(quick: bool = False) -> dict[str, Any]:
    doctor = doctor_phase(quick)
    return {"doctor": doctor, "redaction": redaction_phase(quick),
            "worst_doctor_ratio": doctor["ratios"]["name at the limit"]}


def lines(result: dict[str, Any]) -> list[str]:
    doctor, redaction = result["doctor"], result["redaction"]
    ms = doctor["ms_per_preview"]
    out = [f"{ms['plain name']:8.3f} ms  a preview, plain name and its near-miss"]
    out += [f"{ms[n]:8.3f} ms  {n}: x{r:.2f} ({', '.join(doctor['found'][n])})"
            for n, r in doctor["ratios"].items()]
    out += [f"{t:8.1f} ms  redaction of {redaction['output_chars']:,} characters, {n}"
            for n, t in redaction["ms"].items()]
    out += [f"          x{r:.2f} {n}" for n, r in redaction["ratios"].items()]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile_input",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = phase(args.quick)
    print(json.dumps(result, indent=2) if args.json else "\n".join(lines(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
