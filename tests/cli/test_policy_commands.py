"""``taskenv policy … --project NAME`` and how ``show`` and ``preview`` tell a task's
policies apart: what each command sends to the API and what it prints."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.fake_api import Answer, FakeApi

PROJECT_POLICY = {"version": 2, "scope": "project:vision", "author": "carol",
                  "created_at": "2026-12-01T15:04:05.123Z", "on_conflict": "reject",
                  "defaults": [{"name": "NCCL_DEBUG", "value": "INFO"}], "protected": [],
                  "rules": [{"name": "DATA_ROOT", "required": True}], "conflicts": []}
# A project default over the platform's, a platform-protected value over the user's, and
# the user's value over a project default: each says what it overrode and who did it.
RESOLVED = [
    {"name": "NCCL_DEBUG", "value": "INFO", "source": "default", "scope": "project:vision",
     "policy_version": 2, "overrode": ["default"],
     "shadowed": [{"source": "default", "scope": "platform", "value": "WARN"}]},
    {"name": "HTTPS_PROXY", "value": "http://proxy:3128", "source": "protected",
     "scope": "platform", "policy_version": 3, "overrode": ["user"],
     "shadowed": [{"source": "user", "scope": None, "value": "http://mine"}]},
    {"name": "LR", "value": "0.1", "source": "user", "overrode": ["default"],
     "shadowed": [{"source": "default", "scope": "project:vision", "value": "0.5"}]}]
VERSIONS = {"policy_version": 3, "policy_versions": {"project:vision": 2, "platform": 3}}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "vision.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_policy_get_with_a_project_reads_its_policy_and_names_its_conflicts(api: FakeApi,
                                                                             run):
    api.on("GET", "/projects/vision/policy", Answer(200, {**PROJECT_POLICY, "conflicts": [
        {"variable": "HTTPS_PROXY", "rule": "layer.platform_protected",
         "message": "HTTPS_PROXY is protected by the platform"}]}))
    api.on("GET", "/projects/vision/policy/versions/1", Answer(200, {
        **PROJECT_POLICY, "version": 1, "defaults": []}))

    shown = run("policy", "get", "--project", "vision")
    old = run("policy", "get", "--project", "vision", "--version", "1", "--json")

    assert shown.code == old.code == 0, shown.err
    assert "project vision policy version 2" in shown.out
    assert any("NCCL_DEBUG" in r and "INFO" in r for r in shown.out.splitlines())
    assert "the platform's current policy refuses in project vision's version 2" in shown.err
    assert ("HTTPS_PROXY: HTTPS_PROXY is protected by the platform "
            "(layer.platform_protected)") in shown.err
    assert json.loads(old.out)["version"] == 1
    assert [s.path for s in api.seen] == ["/api/v1/projects/vision/policy",
                                          "/api/v1/projects/vision/policy/versions/1"]


def test_policy_set_with_a_project_puts_the_file_as_written(api: FakeApi, run,
                                                             tmp_path: Path):
    # No protected list: the API takes an omitted list as an empty one.
    draft = write(tmp_path, "defaults: [{name: NCCL_DEBUG, value: INFO}]\n"
                            "rules: [{name: DATA_ROOT, required: true}]\n")
    api.on("PUT", "/projects/vision/policy", Answer(200, PROJECT_POLICY))

    result = run("policy", "set", str(draft), "--project", "vision")

    assert result.code == 0, result.err
    assert api.seen[0].path == "/api/v1/projects/vision/policy"
    assert api.seen[0].body == {"defaults": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                                "rules": [{"name": "DATA_ROOT", "required": True}]}
    assert "project vision policy version 2 saved" in result.err


def test_policy_impact_and_history_with_a_project_use_its_endpoints(api: FakeApi, run,
                                                                     tmp_path: Path):
    draft = write(tmp_path, json.dumps({"defaults": [{"name": "NCCL_DEBUG", "value": "TRACE"}]}))
    api.on("POST", "/projects/vision/policy/impact", Answer(200, {
        "considered": 2, "newly_rejected": 0, "already_rejected": 0, "rejections": [],
        "changes": [{"name": "NCCL_DEBUG", "old": "INFO", "new": "TRACE", "tasks": 2,
                     "owners": 1}]}))
    api.on("GET", "/projects/vision/policy/versions", Answer(200, {"current": 2,
                                                                   "versions": [0, 1, 2]}))
    for n in (1, 2):
        api.on("GET", f"/projects/vision/policy/versions/{n}",
               Answer(200, {**PROJECT_POLICY, "version": n}))

    impact = run("policy", "impact", str(draft), "--project", "vision")
    history = run("policy", "history", "--project", "vision", "--limit", "2")

    assert impact.code == history.code == 0, impact.err + history.err
    assert "tasks considered: 2" in impact.out
    assert any("NCCL_DEBUG" in r and "INFO" in r and "TRACE" in r
               for r in impact.out.splitlines())
    assert "2 (current)" in history.out
    assert [s.path for s in api.seen] == [
        "/api/v1/projects/vision/policy/impact", "/api/v1/projects/vision/policy/versions",
        "/api/v1/projects/vision/policy/versions/2", "/api/v1/projects/vision/policy/versions/1"]


def test_a_project_name_is_one_path_segment_of_the_policy_path(api: FakeApi, run):
    run("policy", "get", "--project", "../tokens")

    assert api.seen[0].path == "/api/v1/projects/..%2Ftokens/policy"


def overrode_cells(out: str) -> dict[str, str]:
    """Each env table row's name and its overrode cell (the fourth column)."""
    rows = [[c.strip() for c in r.split("│")[1:-1]] for r in out.splitlines()
            if r.count("│") == 6]
    return {cells[0]: cells[3] for cells in rows}


def test_show_prints_each_scopes_version_and_who_overrode_what(api: FakeApi, run):
    api.on("GET", "/tasks/t1", Answer(200, {
        "id": "t1", "status": "succeeded", "revision": 1, "errors": [], "warnings": [],
        "project": "vision", **VERSIONS, "resolved_env": RESOLVED}))

    result = run("show", "t1")

    assert result.code == 0, result.err
    [policy] = [r for r in result.out.splitlines() if r.startswith("policy")]
    assert policy.split(None, 1)[1].strip() == "platform v3, project vision v2"
    assert overrode_cells(result.out) == {
        "NCCL_DEBUG": "platform default (by project vision v2)",
        "HTTPS_PROXY": "user (by platform v3)",
        "LR": "project vision default"}


def test_show_of_a_task_resolved_before_projects_shows_the_platforms_version(api: FakeApi,
                                                                            run):
    api.on("GET", "/tasks/t1", Answer(200, {
        "id": "t1", "status": "succeeded", "revision": 1, "errors": [], "warnings": [],
        "policy_version": 4, "resolved_env": [
            {"name": "NCCL_DEBUG", "value": "INFO", "source": "user",
             "overrode": ["default"]}]}))

    result = run("show", "t1")

    assert any(r.startswith("policy") and "platform v4" in r for r in result.out.splitlines())
    assert overrode_cells(result.out)["NCCL_DEBUG"] == "default"


def test_preview_sends_the_task_files_project_gpus_and_image_and_shows_both_versions(
        api: FakeApi, run, tmp_path: Path):
    task_file = tmp_path / "task.yaml"
    task_file.write_text("name: train\nproject: vision\nimage: nvcr.io/pytorch\n"
                         "resources: {gpus: 2}\nsteps: [[python3, train.py]]\n"
                         "env: [{name: LR, value: '0.1'}]\n", encoding="utf-8")
    api.on("POST", "/env/preview", Answer(200, {"ok": True, **VERSIONS, "variables": RESOLVED,
                                                "warnings": [], "errors": []}))

    result = run("preview", str(task_file))

    assert result.code == 0, result.err
    sent = api.seen[0].body
    assert (sent["project"], sent["image"], sent["resources"]) == (
        "vision", "nvcr.io/pytorch", {"gpus": 2})
    assert "policy: platform v3, project vision v2" in result.out
    assert overrode_cells(result.out)["NCCL_DEBUG"] == "platform default (by project vision v2)"
