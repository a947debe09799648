"""docs/launchers.md's table "What a task sees" (podman), checked against real pods: a task
without files, one with files (its working directory is /home/task, where its files are)
and one with a ``workdir`` of its own.  Each row's variable and the value it gives are what
a step's ``env`` prints, besides the resolved env; the launchers' overview table says the
same of ``PWD``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.task import manifest
from shared.task.files import TaskFile
from tests.workers.launchers.podman.test_podman_launcher import (
    DUMP,
    env_dumps,
    image,
    launcher,
    make_workload,
    run,
    runtime_added,
)
from workers.launchers.base import Outcome

pytestmark = [pytest.mark.integration, pytest.mark.podman]

__all__ = ["image", "launcher", "make_workload"]  # fixtures
DOC = Path(__file__).resolve().parents[4] / "docs" / "launchers.md"


def table() -> dict[str, str]:
    """The "What a task sees" table: variable -> the value column, as written."""
    text = DOC.read_text()
    section = text[text.index("### What a task sees"):]
    section = section[:section.index("\n###")]
    return dict(re.findall(r"^\| `([A-Z]+)` \| (.*?) \|", section, re.MULTILINE))


def seen(launcher, workload) -> dict[str, str]:  # noqa: ANN001 - the fixtures' own types
    outcome, logs = run(launcher, workload)
    assert outcome == Outcome("succeeded", exit_code=0), logs
    [dump] = env_dumps(logs, 1)
    return dump


def test_the_table_names_what_a_task_with_files_and_one_without_see(launcher,
                                                                    make_workload) -> None:
    plain = make_workload([list(DUMP)])
    with_files = make_workload([list(DUMP)], files=(TaskFile("train.py", "print(1)\n"),))
    own = make_workload([list(DUMP)], workdir="/tmp")
    got = {"plain": seen(launcher, plain), "files": seen(launcher, with_files),
           "workdir": seen(launcher, own)}
    assert got["plain"] == runtime_added(plain)
    identity = set(runtime_added(plain)) - set(table())  # the replica's, the platform's
    for case, dump in got.items():
        assert set(dump) == set(table()) | identity, case
    for case, where in (("plain", "/work"), ("files", manifest.WORK_DIR),
                        ("workdir", "/tmp")):
        assert got[case]["PWD"] == got[case]["HOME"] == where, (case, got[case])
    rows = table()
    assert set(rows) == {"HOSTNAME", "HOME", "PATH", "PWD", "SHLVL"}
    for name in ("PWD", "HOME"):  # each working directory the table names, and when
        assert "`/work`" in rows[name] and f"`{manifest.WORK_DIR}`" in rows[name], rows[name]
        assert "files" in rows[name] and "workdir" in rows[name], rows[name]
    assert f"`{got['plain']['PATH']}`" in rows["PATH"]
    assert f"`{got['plain']['SHLVL']}`" in rows["SHLVL"]
    overview = next(line for line in DOC.read_text().splitlines()
                    if line.startswith("| `podman` |"))
    assert "PWD=/work`" not in overview and "`PWD` (the working directory" in overview
