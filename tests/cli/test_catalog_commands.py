"""``taskenv catalog`` and the doctor's output in ``submit``, ``env set`` and ``preview``."""

from __future__ import annotations

from pathlib import Path

from tests.cli.fake_api import Answer, FakeApi

NEAR_MISS = {"variable": "NCCL_DEBGU", "rule": "doctor.near_miss",
             "message": "NCCL_DEBGU is not a documented variable: did you mean NCCL_DEBUG?"}
ENTRIES = {"builtin": True, "project": None, "entries": [
    {"name": "NCCL_DEBUG", "description": "How much NCCL logs.", "type": "enum",
     "values": ["VERSION", "WARN", "INFO", "TRACE"], "layer": "builtin",
     "source": "https://docs.nvidia.com/x"},
    {"name": "LR", "description": "ours", "type": "float", "values": [], "layer": "project",
     "scope": "project:vision"}]}


def test_catalog_list_shows_values_layers_and_sources(api: FakeApi, run) -> None:
    api.on("GET", "/catalog", Answer(200, ENTRIES))
    result = run("catalog", "list", "--project", "vision")
    assert result.code == 0
    assert "NCCL_DEBUG" in result.out and "VERSION, WARN, INFO, TRACE" in result.out
    assert "project:vision" in result.out and "https://docs.nvidia.com/x" in result.out
    assert api.seen[0].query == {"project": "vision", "limit": "500"}  # pages of 500
    only = run("catalog", "list", "--layer", "project", "--json")
    assert '"LR"' in only.out and "NCCL_DEBUG" not in only.out


def test_catalog_set_delete_and_builtin(api: FakeApi, run) -> None:
    api.on("PUT", "/catalog/entries/LR", Answer(200, {"name": "LR", "scope": "project:vision"}))
    api.on("DELETE", "/catalog/entries/LR", Answer(204))
    api.on("PUT", "/catalog/settings", Answer(200, {"builtin": False}))
    result = run("catalog", "set", "LR", "--project", "vision", "--type", "float",
                 "--min", "0", "--max", "1", "--description", "learning rate")
    assert result.code == 0 and "LR documented in the project:vision catalog" in result.err
    put = api.requests_to("PUT", "/catalog/entries/LR")[0]
    assert put.body == {"description": "learning rate", "type": "float", "values": [],
                        "case_insensitive": False, "source": "", "min": 0.0, "max": 1.0}
    assert put.query == {"project": "vision"}
    assert run("catalog", "delete", "LR", "--project", "vision").code == 0
    assert run("catalog", "builtin", "off").code == 0
    assert api.requests_to("PUT", "/catalog/settings")[0].body == {"builtin": False}


def test_submit_and_env_set_print_the_advice(api: FakeApi, run, tmp_path: Path) -> None:
    task_file = tmp_path / "task.yaml"
    task_file.write_text("name: d\nsteps: [[sh, x]]\nenv: [{name: NCCL_DEBGU, value: INFO}]\n")
    accepted = {"id": "t1", "url": "/api/v1/tasks/t1", "revision": 1, "status": "pending",
                "advice": [NEAR_MISS]}
    api.on("POST", "/tasks", Answer(202, accepted))
    api.on("PATCH", "/tasks/t1/env", Answer(202, {**accepted, "revision": 2}))
    api.on("GET", "/tasks/t1", Answer(200, {"id": "t1", "revision": 2, "status": "running",
                                            "warnings": [NEAR_MISS], "errors": []}))
    result = run("submit", str(task_file))
    assert result.out == "t1\n"
    assert "advice:" in result.err and "did you mean NCCL_DEBUG" in result.err
    changed = run("env", "set", "t1", "NCCL_DEBGU=WARN")
    assert changed.code == 0, changed.err
    assert changed.err.count("did you mean NCCL_DEBUG") == 1  # the advice, once


def test_preview_sends_the_scripts_and_prints_the_report(api: FakeApi, run,
                                                         tmp_path: Path) -> None:
    task_file = tmp_path / "task.yaml"
    task_file.write_text("name: d\nsteps: [[python3, train.py]]\nenv: [{name: LR, value: '1'}]\n")
    script = tmp_path / "train.py"
    script.write_text("import os\nos.environ['LEARNING_RATE']\n")
    missing = {"variable": "LEARNING_RATE", "rule": "doctor.script_unset",
               "message": "train.py line 2 reads LEARNING_RATE, which this task does not set "
                          "and the script gives no default; did you mean LR?"}
    api.on("POST", "/env/preview", Answer(200, {
        "ok": False, "policy_version": 0, "variables": [], "warnings": [],
        "errors": [missing],
        "doctor": {"scripts": [{"path": "train.py"}], "missing": [missing],
                   "unread": [], "from_defaults": [], "unknowable": []}}))
    result = run("preview", str(task_file), "--script", str(script), "--strict-env")
    assert result.code == 2
    sent = api.seen[0].body
    assert sent["files"] == [{"path": "train.py", "content": script.read_text()}]
    assert sent["strict_env"] is True
    assert "doctor: read train.py" in result.err and "did you mean LR?" in result.err


def test_show_prints_the_pre_flight_report(api: FakeApi, run) -> None:
    report = {"scripts": [{"path": "train.py"}], "missing": [], "unread": [],
              "from_defaults": [{"message": "train.py line 3 reads DATA_DIR: set by a default "
                                            "of project:vision"}],
              "unknowable": [{"message": "train.py line 9 reads a variable whose name is "
                                        "built at run time ('LR_' + stage)"}]}
    api.on("GET", "/tasks/t1", Answer(200, {
        "id": "t1", "name": "n", "status": "succeeded", "revision": 1, "errors": [],
        "warnings": [], "env": [], "resolved_env": [], "doctor": report}))
    result = run("show", "t1")
    assert result.code == 0
    assert "doctor: read train.py" in result.out
    assert "set by a default of project:vision" in result.out
    assert "built at run time" in result.out


def test_catalog_list_shows_every_documented_field(api: FakeApi, run) -> None:
    api.on("GET", "/catalog", Answer(200, {"builtin": True, "project": None, "entries": [
        {"name": "LR", "description": "learning rate", "type": "float", "values": [],
         "min": 0.0, "max": 1.0, "layer": "platform", "scope": "platform"},
        {"name": "WORKERS", "type": "int", "values": [], "min": 1, "layer": "platform"},
        {"name": "CEILING", "type": "int", "values": [], "max": 0.5, "layer": "platform"},
        {"name": "MODE", "type": "enum", "values": ["Fast", "Slow"],
         "case_insensitive": True, "layer": "builtin"}]}))

    result = run("catalog", "list")

    assert result.code == 0
    rows = {r.split("│")[1].strip(): r for r in result.out.splitlines() if r.count("│") > 2}
    assert "float" in rows["LR"] and "0 <= value <= 1" in rows["LR"]
    assert "value >= 1" in rows["WORKERS"] and "value <= 0.5" in rows["CEILING"]
    assert "Fast, Slow" in rows["MODE"] and " any " in rows["MODE"] and "enum" in rows["MODE"]
    assert " any " not in rows["LR"]
