"""Log lines: one JSON object per line for services, readable text for people, and the
task or request they are about on every line."""

from __future__ import annotations

import io
import json
import logging

import pytest
from celery.app.trace import LOG_RECEIVED
from celery.utils.saferepr import saferepr

from shared import logs


def written(fmt: str, emit: object, logger_name: str = "taskenv.test") -> str:
    out = io.StringIO()
    logger = logging.getLogger(f"{logger_name}.{fmt}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logs.handler(fmt, out)
    logger.addHandler(handler)
    try:
        assert callable(emit)
        emit(logger)
    finally:
        logger.removeHandler(handler)
    return out.getvalue()


def test_json_lines_carry_the_task_while_it_is_bound_and_not_after() -> None:
    def emit(log: logging.Logger) -> None:
        with logs.bound(task_id="abc123", revision=2):
            log.info("validated %s", "abc123")
        log.info("idle")

    first, second = (json.loads(line) for line in written("json", emit).splitlines())
    assert first["task_id"] == "abc123" and first["revision"] == 2
    assert first["message"] == "validated abc123" and first["level"] == "INFO"
    assert "task_id" not in second and "context" not in second


def test_text_lines_show_the_context_at_the_end() -> None:
    def emit(log: logging.Logger) -> None:
        with logs.bound(request_id="r-1"):
            log.warning("slow")

    assert written("text", emit).rstrip().endswith("WARNING taskenv.test.text slow request_id=r-1")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="TASKENV_LOG_FORMAT"):
        logs.formatter("xml")


CELERY = "celery.worker.strategy"  # the logger of Celery's "received" line


def celery_line(log: logging.Logger, name: str, args: object) -> None:
    """What Celery's worker logs on taking a message: the "received" format, formatted from
    its context, which it also passes along as ``data``."""
    context = {"id": "c0ffee-1", "name": name, "args": saferepr(args), "kwargs": "{}",
               "eta": None}
    log.info(LOG_RECEIVED, context, extra={"data": context})


def test_celerys_received_line_names_the_task_and_the_message() -> None:
    line = json.loads(written("json", lambda log: celery_line(
        log, "taskenv.policy", ["a" * 32, 3]), CELERY))
    assert line["message"] == "Task taskenv.policy[c0ffee-1] received"
    assert (line["task_id"], line["revision"], line["celery_id"]) == ("a" * 32, 3, "c0ffee-1")


def test_another_apps_celery_line_names_only_the_message_and_a_bound_task_wins() -> None:
    def emit(log: logging.Logger) -> None:
        celery_line(log, "other.job", ["b" * 32, 1])
        celery_line(log, "taskenv.launch", "__import__('os')")  # not two ids: not read
        with logs.bound(task_id="c" * 32, revision=2):
            celery_line(log, "taskenv.launch", ["a" * 32, 1])

    other, odd, inside = (json.loads(line) for line in written("json", emit, CELERY)
                          .splitlines())
    assert other["celery_id"] == "c0ffee-1" and "task_id" not in other
    assert odd["celery_id"] == "c0ffee-1" and "task_id" not in odd
    assert (inside["task_id"], inside["revision"]) == ("c" * 32, 2)


def test_only_celerys_loggers_are_read_for_a_message() -> None:
    line = json.loads(written("json", lambda log: celery_line(log, "taskenv.policy",
                                                              ["a" * 32, 3])))
    assert "celery_id" not in line and "task_id" not in line


def test_text_lines_show_what_celery_is_about_too() -> None:
    text = written("text", lambda log: celery_line(log, "taskenv.validate", ["d" * 32, 1]),
                   CELERY)
    assert text.rstrip().endswith(f"received celery_id=c0ffee-1 task_id={'d' * 32} revision=1")


@pytest.mark.parametrize("shown, ids", [
    (f"('{'d' * 32}', 3)", {"task_id": "d" * 32, "revision": 3}),
    (f"['{'d' * 32}', 12]", {"task_id": "d" * 32, "revision": 12}),
    (("abc", 2), {"task_id": "abc", "revision": 2}),
    ("('abc', 1, 2)", {}),  # not a stage's two arguments
    ("('a' + 'b', 1)", {}),  # an expression is never evaluated
    ("('x' * 10**9, 1)", {}),
    ("('$(id)', 1)", {}),
    ("", {}),
])
def test_a_stage_s_arguments_are_matched_as_text_never_evaluated(shown: object,
                                                                  ids: dict[str, object]) -> None:
    assert logs.stage_ids(shown) == ids
