"""What the benchmark submits: the policy an admin PUTs and the task every POST carries."""

from __future__ import annotations

from typing import Any


def policy_body(defaults: int = 20, protected: int = 20) -> dict[str, Any]:
    """A policy as an admin PUTs it: half the protected entries carry a value."""
    return {
        "defaults": [{"name": f"PLATFORM_DEFAULT_{i}", "value": f"default-{i}"}
                     for i in range(defaults)],
        "protected": [{"name": f"LOCKED_{i}", "reason": "set by the platform",
                       **({"value": f"locked-{i}"} if i % 2 == 0 else {})}
                      for i in range(protected)],
        "on_conflict": "reject",
    }


def user_env(n: int, overrides: int = 2) -> list[dict[str, Any]]:
    """``n`` user variables; the first ``overrides`` override policy defaults."""
    env = [{"name": f"PLATFORM_DEFAULT_{i}", "value": f"user-{i}"}
           for i in range(min(overrides, n))]
    env += [{"name": f"USER_VAR_{i}", "value": f"value-{i}-{'x' * 16}"}
            for i in range(n - len(env))]
    return env


def task_body() -> dict[str, Any]:
    """A realistic small task: two steps, ten user variables (two override defaults)."""
    return {"name": "bench", "steps": [["sh", "prepare.sh"], ["python3", "train.py"]],
            "env": user_env(10)}
