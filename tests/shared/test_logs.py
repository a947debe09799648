"""Log lines: one JSON object per line for services, readable text for people, and the
task or request they are about on every line."""

from __future__ import annotations

import io
import json
import logging

import pytest

from shared import logs


def written(fmt: str, emit: object) -> str:
    out = io.StringIO()
    logger = logging.getLogger(f"taskenv.test.{fmt}")
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
