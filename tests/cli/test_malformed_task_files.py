"""A malformed task file exits 4, whichever check finds it: the installed ``taskenv``
command, a process of its own, against the real API (its app on fakeredis, served on a
loopback port), as a user runs it."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest
from werkzeug.serving import make_server

from tests.api.conftest import ADMIN_TOKEN, EnqueueSpy, build_app

TASKENV = Path(sys.executable).with_name("taskenv")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cli"


@pytest.fixture(scope="module")
def api() -> Iterator[tuple[str, EnqueueSpy]]:
    """The API's own app, served over HTTP; what it sent to the stages."""
    enqueued = EnqueueSpy()
    app = build_app(fakeredis.FakeRedis(decode_responses=True), enqueued)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", enqueued
    finally:
        server.shutdown()
        thread.join(5)


def taskenv(api: tuple[str, EnqueueSpy], home: Path,
            *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TASKENV_URL": api[0],
           "TASKENV_TOKEN": ADMIN_TOKEN}
    done = subprocess.run([str(TASKENV), *args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def task_file(tmp_path: Path, text: str) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n", encoding="utf-8")
    path = tmp_path / "task.yaml"
    path.write_text(text, encoding="utf-8")
    return path


Case = tuple[str, str, str, tuple[str, ...]]
BOTH = ("submit", "preview")
# (what is wrong, the file, what the error names, the commands that read it whole): the
# first four the CLI finds before sending anything, the others only the API's check of
# the request's shape (preview sends no steps, and names a task "preview" without a name).
FOUND_BY_THE_CLI: list[Case] = [
    ("step: for steps:", "name: t\nstep:\n  - [python3, train.py]\n",
     "step is not a key it takes (did you mean steps?)", BOTH),
    ("env as a mapping", "name: t\nsteps: [[python3, train.py]]\nenv: {LR: '0.01'}\n",
     "env must be a list", BOTH),
    ("not YAML", "name: t\nsteps: [[python3, train.py]\n", "is not valid YAML", BOTH),
    ("a key of resources misspelt", "name: t\nsteps: [[true]]\nresources: {gpu: 1}\n",
     "resources.gpu is not a key it takes (did you mean gpus?)", BOTH),
]
FOUND_BY_THE_API: list[Case] = [
    ("steps as one string", "name: t\nsteps: python3 train.py\n",
     "steps: Not a valid list.", ("submit",)),
    ("a value left a number", "name: t\nsteps: [[true]]\nenv:\n  - {name: LR, value: 0.01}\n",
     "env.0.value: Not a valid string.", BOTH),
    ("no name", "steps: [[true]]\n", "name: Missing data for required field.", ("submit",)),
]
BY_THE_API = "(the API's check of its shape)"


@pytest.mark.parametrize(("case", "text", "named", "commands"),
                         FOUND_BY_THE_CLI + FOUND_BY_THE_API,
                         ids=[c[0] for c in FOUND_BY_THE_CLI + FOUND_BY_THE_API])
def test_a_malformed_task_file_exits_4_whichever_check_finds_it(
        api: tuple[str, EnqueueSpy], tmp_path: Path, case: str, text: str, named: str,
        commands: tuple[str, ...]):
    path = task_file(tmp_path, text)
    sent = len(api[1].calls)

    for command in commands:
        done = taskenv(api, tmp_path, command, str(path))

        assert done.returncode == 4, (command, done.stderr)
        assert f"{path}" in done.stderr and named in done.stderr, (command, done.stderr)
        by_the_api = (case, text, named, commands) in FOUND_BY_THE_API
        assert (BY_THE_API in done.stderr) == by_the_api, (command, done.stderr)
    assert len(api[1].calls) == sent  # no task was made


def test_the_shipped_example_task_file_is_accepted_and_each_example_file_read(
        api: tuple[str, EnqueueSpy], tmp_path: Path):
    """The README's command-line block submits examples/cli/ as it is: accepted (exit 0,
    the id printed), with train.py read from beside it and the .env's EPOCHS added."""
    done = taskenv(api, tmp_path, "submit", str(EXAMPLES / "task.yaml"), "--env-file",
                   str(EXAMPLES / ".env"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in {task for task, _ in api[1].calls}

    long = taskenv(api, tmp_path, "submit", str(EXAMPLES / "long.yaml"))
    assert long.returncode == 0, long.stderr
