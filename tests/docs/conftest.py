"""The doc runner's summary (tests/docs/runner.py), printed at the end of a run of it."""

from __future__ import annotations

import pytest

from tests.docs import runner


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    summary = runner.SUMMARY
    if not summary.run:
        return
    blocks = runner.documents()
    summary.skipped += [f"{b.where}: {m.reason}" for b in blocks if (m := b.mark("skip"))]
    terminalreporter.section("doc runner")
    for line in summary.lines(blocks):
        terminalreporter.write_line(line)
