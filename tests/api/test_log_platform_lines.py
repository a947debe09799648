"""The views tell the platform's own lines from a step's: the console in a style of
their own, the CLI too (piped: the mark as sent), the text and JSON answers with the
mark kept.  A step printing the platform's exact words is shown as the step's."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from flask.testing import FlaskClient

from cli.render import PLATFORM_STYLE, LogOutput
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from shared.task import states
from shared.task.replica_logs import MARK, platform_line, step_output
from tests.api.conftest import Browser
from tests.api.test_revisions_api import resolve

FORGED = "==> step 2/2: python3\ntaskenv: step 1 was killed: out of memory\n"
LOG = (platform_line("==> step 1/2: python3") + step_output(FORGED + f"{MARK}==> fake\n")
       + platform_line("==> step 2/2: sh"))
PLATFORM_SPAN = re.compile(r'<span class="platform">([^<]*)</span>')


@pytest.fixture
def logged(create_task: Callable[..., str], tasks: TaskStore) -> str:
    task_id = create_task()
    tasks.append_log(task_id, 1, LOG)
    return task_id


def test_the_console_shows_only_the_platforms_lines_in_their_style(
        logged: str, browser: Callable[..., Browser]) -> None:
    page = browser().get(f"/ui/tasks/{logged}").text
    log = page[page.index('id="log"'):page.index("</pre>", page.index('id="log"'))]

    assert PLATFORM_SPAN.findall(log) == ["==&gt; step 1/2: python3\n", "==&gt; step 2/2: sh\n"]
    assert "==&gt; step 2/2: python3\ntaskenv: step 1 was killed" in log  # the step's, plain
    assert MARK not in log


def test_the_text_and_json_answers_keep_the_mark(logged: str, client: FlaskClient,
                                                 browser: Callable[..., Browser]) -> None:
    assert client.get(f"/api/v1/tasks/{logged}/logs").text == LOG
    assert browser().get(f"/ui/tasks/{logged}/live").get_json()["log"]["text"] == LOG


def test_the_cli_styles_the_platforms_lines_on_a_terminal_and_keeps_the_mark_piped() -> None:
    on_terminal = LogOutput(terminal=True)(LOG)
    assert on_terminal.count(PLATFORM_STYLE) == 2
    assert f"{PLATFORM_STYLE}==> step 1/2: python3" in on_terminal
    assert "\n==> step 2/2: python3\n" in on_terminal  # the step's line, unstyled
    assert MARK not in on_terminal

    piped = LogOutput(terminal=False)(LOG)
    assert [line for line in piped.splitlines() if line.startswith(MARK)] == [
        f"{MARK}==> step 1/2: python3", f"{MARK}==> step 2/2: sh"]


def test_the_cli_carries_a_platform_line_across_chunks() -> None:
    show = LogOutput(terminal=True)
    cut = LOG.index("1/2")
    text = show(LOG[:cut]) + show(LOG[cut:])
    assert text.count(PLATFORM_STYLE) == 3  # the cut line styled in both its parts
    assert "==> step 2/2: python3\n" in text


class Backend:
    """A backend's output as the status sync reads it (podman, Slurm)."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id

    def new_output(self) -> list[tuple[str, int, str]]:
        return [(self.task_id, 1, f"{MARK}==> step 9/9: forged in a container\n")]


def test_a_backends_output_never_carries_the_mark(
        create_task: Callable[..., str], tasks: TaskStore, policies: PolicyStore) -> None:
    from workers import outcomes
    from workers.sync import stream_output

    task_id = create_task()
    resolve(tasks, policies, task_id, 1)
    assert tasks.transition(task_id, 1, states.RESOLVED, states.LAUNCHING)
    outcomes.record_outcome(tasks, task_id, 1, states.RUNNING, None, None)
    assert stream_output(tasks, Backend(task_id)) == 1  # type: ignore[arg-type]
    log = tasks.read_log(task_id, 1)
    assert MARK not in log and "==> step 9/9: forged in a container" in log
