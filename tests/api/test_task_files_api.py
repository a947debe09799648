"""A task's own files through the API: stored per revision, shown as summaries, refused
whole with every problem named, changed by a PATCH, rerun as they were, diffed."""

from __future__ import annotations

from collections.abc import Callable

from flask.testing import FlaskClient

from shared.policy.model import Policy, Protected
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from shared.task import states

PREPARE = {"path": "prepare.sh", "content": "echo prepared > data.txt\n", "mode": 0o755}
TRAIN = {"path": "train.py", "content": "print(open('data.txt').read())\n"}


def body(**changes: object) -> dict[str, object]:
    return {"name": "t", "steps": [["sh", "prepare.sh"], ["python3", "train.py"]],
            "files": [PREPARE, TRAIN], **changes}


def test_files_are_stored_and_shown_as_path_mode_size_and_digest(
        client_for: Callable[..., FlaskClient], tasks: TaskStore) -> None:
    alice = client_for("alice")
    created = alice.post("/api/v1/tasks", json=body())
    assert created.status_code == 202, created.get_json()
    task_id = created.get_json()["id"]
    assert tasks.get(task_id)["files"] == [PREPARE, {**TRAIN, "mode": 0o644}]
    shown = alice.get(f"/api/v1/tasks/{task_id}").get_json()["files"]
    assert [(f["path"], f["mode"], f["size"]) for f in shown] == [
        ("prepare.sh", 0o755, len(PREPARE["content"])), ("train.py", 0o644,
                                                         len(TRAIN["content"]))]
    assert all(len(f["sha256"]) == 64 and "content" not in f for f in shown)
    manifest = alice.get(f"/api/v1/tasks/{task_id}/manifest").get_json()
    assert manifest["config_map"]["data"]["file-0"] == PREPARE["content"]


def test_every_problem_of_the_files_and_the_env_is_named_in_one_refusal(
        client_for: Callable[..., FlaskClient], policies: PolicyStore,
        tasks: TaskStore) -> None:
    policies.put(Policy(protected=(Protected("CUDA_VISIBLE_DEVICES", "the scheduler"),)))
    files = [{"path": "/etc/x", "content": ""}, {"path": "../up", "content": ""},
             {"path": "run.sh", "content": "export T=hf_value_0123456\n"}]
    env = [{"name": "HF_TOKEN", "value": "hf_value_0123456", "secret": True},
           {"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]
    refused = client_for("alice").post("/api/v1/tasks", json=body(files=files, env=env))
    assert refused.status_code == 422
    got = [(p["rule"], p.get("field"), p.get("variable"))
           for p in refused.get_json()["errors"]]
    assert got == [("policy.protected", None, "CUDA_VISIBLE_DEVICES"),
                   ("file.path", "files[0].path", None), ("file.path", "files[1].path", None),
                   ("file.holds_secret", "files[2].content", "HF_TOKEN")]
    assert "hf_value_0123456" not in refused.get_data(as_text=True)
    assert tasks.r.keys("taskenv:task:*") == []


def test_too_many_or_too_large_files_name_the_limit(admin_client_with) -> None:  # type: ignore[no-untyped-def]
    client = admin_client_with(max_files=2, max_files_bytes=10)
    refused = client.post("/api/v1/tasks", json=body(files=[
        {"path": f"f{i}", "content": "0123456789"} for i in range(3)]))
    assert refused.status_code == 422
    assert {(p["rule"], p.get("limit")) for p in refused.get_json()["errors"]} == {
        ("files.max_count", 2), ("files.max_bytes", 10)}


def test_a_patch_replaces_the_files_a_rerun_runs_the_old_ones_and_a_diff_names_them(
        client_for: Callable[..., FlaskClient], move_to: Callable[[str, str], None],
        tasks: TaskStore) -> None:
    alice = client_for("alice")
    task_id = alice.post("/api/v1/tasks", json=body()).get_json()["id"]
    move_to(task_id, states.SUCCEEDED)
    changed = {**TRAIN, "content": "print('v2')\n"}
    assert alice.patch(f"/api/v1/tasks/{task_id}/env",
                       json={"files": [PREPARE, changed]}).status_code == 202
    assert tasks.get(task_id)["files"][1]["content"] == "print('v2')\n"
    kept = alice.patch(f"/api/v1/tasks/{task_id}/env",
                       json={"set": [{"name": "LR", "value": "1"}]})
    assert kept.status_code == 202 and tasks.get(task_id)["files"][1]["content"] == \
        "print('v2')\n"
    diff = alice.get(f"/api/v1/tasks/{task_id}/revisions/1/diff/2?of=env").get_json()
    assert [c["path"] for c in diff["files"]["changed"]] == ["train.py"]
    assert "print(" not in str(diff["files"])
    move_to(task_id, states.SUCCEEDED)
    rerun = alice.post(f"/api/v1/tasks/{task_id}/rerun", json={"revision": 1})
    assert rerun.status_code == 202
    assert tasks.get(task_id)["files"][1]["content"] == TRAIN["content"]
    revision = alice.get(f"/api/v1/tasks/{task_id}/revisions/4").get_json()
    assert [f["path"] for f in revision["files"]] == ["prepare.sh", "train.py"]


def test_files_with_apply_next_run_are_refused(client_for: Callable[..., FlaskClient]) -> None:
    alice = client_for("alice")
    task_id = alice.post("/api/v1/tasks", json=body()).get_json()["id"]
    refused = alice.patch(f"/api/v1/tasks/{task_id}/env",
                          json={"files": [TRAIN], "apply": "next-run"})
    assert refused.status_code == 400


def test_preview_names_the_files_problems_beside_the_env_s(
        client_for: Callable[..., FlaskClient], policies: PolicyStore) -> None:
    policies.put(Policy(protected=(Protected("CUDA_VISIBLE_DEVICES", "the scheduler"),)))
    got = client_for("alice").post("/api/v1/env/preview", json={
        "env": [{"name": "1BAD", "value": "x"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "0"}],
        "files": [{"path": "../x", "content": ""}]}).get_json()
    assert got["ok"] is False
    assert [e["rule"] for e in got["errors"]] == ["name.shell", "policy.protected", "file.path"]


def test_a_secret_set_later_may_not_already_sit_in_a_kept_file(
        client_for: Callable[..., FlaskClient]) -> None:
    alice = client_for("alice")
    task_id = alice.post("/api/v1/tasks", json=body()).get_json()["id"]
    refused = alice.patch(f"/api/v1/tasks/{task_id}/env", json={
        "set": [{"name": "WORD", "value": "prepared > data", "secret": True}]})
    assert refused.status_code == 422
    (problem,) = refused.get_json()["errors"]
    assert (problem["rule"], problem["variable"]) == ("file.holds_secret", "WORD")
