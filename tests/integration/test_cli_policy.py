"""A project's policy through the installed ``taskenv`` against a running stack: its
maintainer drafts, saves and reads it with ``policy … --project``, and a member's task
resolved under both policies says, in ``show`` and ``preview``, each scope's version and
which scope overrode what."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.integration.conftest import Stack
from tests.integration.test_cli import taskenv

pytestmark = pytest.mark.integration

# docs/policy.md's worked example, as written there (the project's has no protected list).
PLATFORM = {"defaults": [{"name": "NCCL_DEBUG", "value": "WARN"}],
            "protected": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128",
                           "reason": "egress goes through the proxy"}],
            "rules": [{"name": "NUM_WORKERS", "min": 1, "max": 64,
                       "description": "a node has 64 cores"}]}
PROJECT = {"defaults": [{"name": "NCCL_DEBUG", "value": "INFO"},
                        {"name": "NCCL_IB_DISABLE", "value": "0", "when": {"gpus": ">=1"}}],
           "rules": [{"name": "DATA_ROOT", "required": True,
                      "description": "jobs read their data from a project volume"}]}
PRINT_ENV = "import os; print('sees', os.environ['NCCL_DEBUG'], os.environ['DATA_ROOT'])"


def overrode_cells(out: str) -> dict[str, str]:
    """Each env table row's name and its overrode cell (the fourth column)."""
    rows = [[c.strip() for c in r.split("│")[1:-1]] for r in out.splitlines()
            if r.count("│") == 6]
    return {cells[0]: cells[3] for cells in rows}


def test_a_maintainer_runs_the_projects_policy_from_the_cli_and_tasks_name_both_scopes(
        stack: Stack, tmp_path: Path):
    name = f"ml-{uuid.uuid4().hex[:6]}"
    (tmp_path / "platform.json").write_text(json.dumps(PLATFORM), encoding="utf-8")
    (tmp_path / "project.json").write_text(json.dumps(PROJECT), encoding="utf-8")
    (tmp_path / "rules-only.json").write_text('{"rules": []}', encoding="utf-8")
    admin, carol, alice = (stack.admin_token, stack.new_token(f"{name}-carol"),
                           stack.new_token(f"{name}-alice"))
    platform_set = taskenv(stack, admin, "policy", "set", str(tmp_path / "platform.json"))
    made = taskenv(stack, admin, "projects", "create", name, "--member", f"{name}-alice",
                   "--maintainer", f"{name}-carol")
    assert platform_set.returncode == made.returncode == 0, platform_set.stderr + made.stderr
    platform = stack.call("GET", "/api/v1/policy").json()["version"]

    impact = taskenv(stack, carol, "policy", "impact", str(tmp_path / "project.json"),
                     "--project", name)
    saved = taskenv(stack, carol, "policy", "set", str(tmp_path / "project.json"),
                    "--project", name)
    refused = taskenv(stack, carol, "policy", "set", str(tmp_path / "rules-only.json"),
                      "--project", name)
    shown = taskenv(stack, carol, "policy", "get", "--project", name)
    history = taskenv(stack, carol, "policy", "history", "--project", name)
    not_hers = taskenv(stack, carol, "policy", "set", str(tmp_path / "project.json"))

    assert impact.returncode == 0, impact.stderr
    assert "would newly be rejected: 0" in impact.stdout
    assert saved.returncode == 0, saved.stderr
    assert f"project {name} policy version 1 saved" in saved.stderr
    assert refused.returncode != 0 and "give defaults, protected or both" in refused.stderr
    assert shown.returncode == history.returncode == 0, shown.stderr + history.stderr
    assert f"project {name} policy version 1" in shown.stdout
    assert any("DATA_ROOT" in r and "required" in r for r in shown.stdout.splitlines())
    assert "1 (current)" in history.stdout
    assert not_hers.returncode == 5 and "403" in not_hers.stderr  # the platform's: admins'
    stored = stack.call("GET", f"/api/v1/projects/{name}/policy").json()
    assert (stored["version"], stored["protected"]) == (1, [])

    # A member's task, resolved under both policies.
    (tmp_path / "task.yaml").write_text(
        f"name: layered\nproject: {name}\nsteps: [[python3, -c, \"{PRINT_ENV}\"]]\n"
        "env: [{name: DATA_ROOT, value: /mnt/vision}]\n", encoding="utf-8")
    (tmp_path / "gpu.yaml").write_text(
        f"name: layered\nproject: {name}\nresources: {{gpus: 2}}\nsteps: [[\"true\"]]\n"
        "env: [{name: DATA_ROOT, value: /mnt/vision}]\n", encoding="utf-8")
    submitted = taskenv(stack, alice, "submit", str(tmp_path / "task.yaml"), "--follow")
    assert submitted.returncode == 0, submitted.stderr
    assert "sees INFO /mnt/vision" in submitted.stdout
    task_id = submitted.stderr.split("task ", 1)[1].split()[0]
    both = f"platform v{platform}, project {name} v1"

    show = taskenv(stack, alice, "show", task_id)
    preview = taskenv(stack, alice, "preview", str(tmp_path / "gpu.yaml"))

    assert show.returncode == preview.returncode == 0, show.stderr + preview.stderr
    [policy] = [r for r in show.stdout.splitlines() if r.startswith("policy")]
    assert policy.split(None, 1)[1].strip() == both
    by_project = f"platform default (by project {name} v1)"
    assert overrode_cells(show.stdout)["NCCL_DEBUG"] == by_project
    assert f"policy: {both}" in preview.stdout
    assert overrode_cells(preview.stdout)["NCCL_DEBUG"] == by_project
    assert "NCCL_IB_DISABLE" in overrode_cells(preview.stdout)  # the project's gpus default
