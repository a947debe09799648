"""The exec helper on its own: it lowers limits, never raises one, and hands on the env."""

from __future__ import annotations

import subprocess
import sys

from workers.launchers.common.containment import ENTER

UNDER_512 = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512)); "
             "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def helper(*args: str, env: dict[str, str] | None = None) -> str:
    command = [sys.executable, "-c", UNDER_512, "-I", ENTER, *args]
    return subprocess.run(command, check=True, capture_output=True, text=True,
                          env=env if env is not None else {"PATH": "/usr/bin:/bin"}).stdout


def test_a_limit_is_lowered_but_never_raised_past_what_the_worker_has() -> None:
    shell = ["--", "/bin/sh", "-c", "ulimit -Hn; ulimit -Sn"]
    assert helper("--rlimit", "nofile=4096:4096", *shell).split() == ["512", "512"]
    assert helper("--rlimit", "nofile=128:256", *shell).split() == ["256", "128"]


def test_the_env_is_handed_on_less_what_python_added() -> None:
    env = {"PATH": "/usr/bin:/bin", "LR": "0.1", "NOTE": "$(HOME) `id`"}
    shown = helper("--unset", "LC_CTYPE", "--", "/usr/bin/env", env=env)
    assert dict(line.split("=", 1) for line in shown.splitlines()) == env
