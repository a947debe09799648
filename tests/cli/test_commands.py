"""Every command against the fake API: what it sends, what it prints, how it exits."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from dotenv import dotenv_values

from tests.cli.fake_api import Answer, FakeApi, Log, RevisionLogs, api_error

TASK_YAML = "name: demo\nsteps:\n  - [sh, -c, 'echo hi']\nenv:\n  - {name: LR, value: '0.01'}\n"
PROTECTED = {"variable": "DATA_ROOT", "rule": "policy.protected",
             "message": "DATA_ROOT is protected by the platform and cannot be set: shared storage"}


def task(status: str, revision: int = 1, **extra: Any) -> Answer:
    return Answer(200, {"id": "t1", "status": status, "revision": revision, "errors": [],
                        "warnings": [], **extra})


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    path = tmp_path / "task.yaml"
    path.write_text(TASK_YAML, encoding="utf-8")
    return path


def accept(api: FakeApi) -> None:
    api.on("POST", "/tasks", Answer(202, {"id": "t1", "url": "/api/v1/tasks/t1", "revision": 1,
                                          "status": "pending"}))


def test_submit_without_follow_prints_the_id(api: FakeApi, run, task_file: Path):
    accept(api)

    result = run("submit", str(task_file))

    assert (result.code, result.out) == (0, "t1\n")
    assert api.seen[0].body == {"name": "demo", "steps": [["sh", "-c", "echo hi"]],
                                "env": [{"name": "LR", "value": "0.01"}]}


def test_submit_follow_passes_each_state_and_prints_the_logs(api: FakeApi, run,
                                                             task_file: Path):
    accept(api)
    api.on("GET", "/tasks/t1", task("pending"), task("running"),
           task("succeeded", exit_code=0))
    api.on("GET", "/tasks/t1/logs", Log(200, "hi\n"))

    result = run("submit", str(task_file), "--follow")

    assert result.code == 0
    assert result.out == "hi\n"
    seen_at = [result.err.index(f"revision 1: {s}") for s in ("pending", "running", "succeeded")]
    assert seen_at == sorted(seen_at)
    assert "task t1 succeeded: exit code 0" in result.err
    assert api.requests_to("GET", "/tasks/t1/logs")[0].query == {"revision": "1", "offset": "0"}


@pytest.mark.parametrize(("status", "code"), [("failed", 1), ("cancelled", 3)])
def test_submit_follow_exits_with_the_outcome(api: FakeApi, run, task_file: Path,
                                              status: str, code: int):
    accept(api)
    api.on("GET", "/tasks/t1", task(status, exit_code=None, reason="stopped by alice"))
    api.on("GET", "/tasks/t1/logs", Log(200, "partial\n"))

    result = run("submit", str(task_file), "--follow")

    assert result.code == code
    assert result.out == "partial\n"
    assert f"task t1 {status}: stopped by alice" in result.err


def test_a_rejected_task_exits_2_and_prints_each_error_with_its_variable(
        api: FakeApi, run, task_file: Path):
    accept(api)
    api.on("GET", "/tasks/t1", task("rejected", errors=[PROTECTED]))

    result = run("submit", str(task_file), "--follow")

    assert result.code == 2
    assert f"DATA_ROOT: {PROTECTED['message']} (policy.protected)" in result.err
    assert not api.requests_to("GET", "/tasks/t1/logs")


def test_follow_rides_out_a_brief_outage(api: FakeApi, run, task_file: Path):
    accept(api)
    api.on("GET", "/tasks/t1", api_error(503, "unavailable", "retry shortly"),
           task("succeeded", exit_code=0))
    api.on("GET", "/tasks/t1/logs", Log(200, ""))

    assert run("submit", str(task_file), "--follow").code == 0


def test_submit_refuses_a_name_in_both_files_before_calling_the_api(
        api: FakeApi, run, task_file: Path, tmp_path: Path):
    (tmp_path / ".env").write_text("LR=0.5\n", encoding="utf-8")

    result = run("submit", str(task_file), "--env-file", str(tmp_path / ".env"))

    assert result.code == 2  # a bad env, whichever check finds it
    assert "the env was rejected" in result.err and "LR" in result.err
    assert api.seen == []


def test_usage_errors_exit_4(run):
    assert run("submit", "/no/such/file.yaml").code == 4
    assert run("env", "set", "t1", "=x").code == 4


def test_tasks_passes_any_state_to_the_api_which_knows_them(api: FakeApi, run):
    api.on("GET", "/tasks", Answer(200, {"items": [
        {"id": "t3", "name": "waits", "status": "queued", "revision": 1}],
        "next_cursor": None}))

    result = run("tasks", "--status", "queued")

    assert result.code == 0, result.err
    assert api.seen[0].query["status"] == "queued" and "waits" in result.out


def test_a_state_the_api_refuses_is_a_usage_error_naming_the_states_it_knows(api: FakeApi,
                                                                             run):
    states = "Must be one of: pending, queued, running."
    api.on("GET", "/tasks", api_error(422, "unprocessable_entity", "bad shape",
                                      {"field": "status", "rule": "schema",
                                       "message": states}))

    result = run("tasks", "--status", "bogus")

    assert result.code == 4  # a bad flag, as when the CLI judged it
    assert api.seen[0].query["status"] == "bogus"
    assert f"status: {states} (schema)" in result.err and "422" in result.err


def test_another_refusal_of_the_task_list_still_exits_5(api: FakeApi, run):
    api.on("GET", "/tasks", api_error(422, "unprocessable_entity", "bad shape",
                                      {"field": "cursor", "rule": "schema", "message": "m"}))

    assert run("tasks", "--status", "running").code == 5


def test_logs_follow_prints_only_new_output_until_final(api: FakeApi, run):
    # The first read finds the revision to follow; then one read before each log read.
    api.on("GET", "/tasks/t1", task("running"), task("running"), task("running"),
           task("succeeded"))
    api.on("GET", "/tasks/t1/logs", Log(200, "a\n"), Log(200, "a\nb\n"),
           Log(200, "a\nb\nc\n"))

    result = run("logs", "t1", "--follow")

    assert (result.code, result.out) == (0, "a\nb\nc\n")


def test_tasks_follows_next_cursor_through_every_page(api: FakeApi, run):
    api.on("GET", "/tasks",
           Answer(200, {"items": [{"id": "t2", "name": "b", "status": "running",
                                   "revision": 1}], "next_cursor": 7}),
           Answer(200, {"items": [{"id": "t1", "name": "a", "status": "failed",
                                   "revision": 2}], "next_cursor": None}))

    result = run("tasks", "--status", "running")

    assert result.code == 0
    assert "t2" in result.out and "t1" in result.out
    assert [s.query.get("cursor") for s in api.seen] == [None, "7"]
    assert all(s.query["status"] == "running" for s in api.seen)


def test_env_get_shows_sources_and_masked_secrets(api: FakeApi, run):
    api.on("GET", "/tasks/t1", task("succeeded", policy_version=3, resolved_env=[
        {"name": "TASK_ID", "value": "t1", "source": "platform", "overrode": []},
        {"name": "HF_TOKEN", "value": "********", "source": "user", "secret": True},
        {"name": "NCCL_DEBUG", "value": "INFO", "source": "user", "overrode": ["default"]}]))

    result = run("env", "get", "t1")

    assert result.code == 0
    lines = result.out.splitlines()
    assert any("HF_TOKEN" in line and "********" in line and "yes" in line for line in lines)
    assert any("NCCL_DEBUG" in line and "default" in line for line in lines)
    assert "policy version 3" in result.out


def test_env_set_and_unset_send_a_patch(api: FakeApi, run, monkeypatch: pytest.MonkeyPatch):
    api.on("PATCH", "/tasks/t1/env", Answer(202, {"id": "t1", "revision": 2,
                                                  "status": "pending", "url": "/x"}))
    api.on("GET", "/tasks/t1", task("running", 2))
    monkeypatch.setattr("sys.stdin", io.StringIO("typed-secret\n"))  # piped: no getpass

    set_result = run("env", "set", "t1", "LR=0.5", "EXPR=a=b", "--secret", "KEY")
    unset_result = run("env", "unset", "t1", "LR", "EXPR")

    assert set_result.code == unset_result.code == 0
    assert "revision 2 pending" in set_result.err
    assert [s.body for s in api.seen if s.method == "PATCH"] == [
        {"set": [{"name": "LR", "value": "0.5"}, {"name": "EXPR", "value": "a=b"},
                 {"name": "KEY", "value": "typed-secret", "secret": True}], "unset": []},
        {"set": [], "unset": ["LR", "EXPR"]}]


def test_env_set_with_a_running_task_shows_the_conflict(api: FakeApi, run):
    api.on("PATCH", "/tasks/t1/env", api_error(409, "conflict", "task t1 is running"))

    result = run("env", "set", "t1", "LR=1")

    assert result.code == 5
    assert "task t1 is running" in result.err


def test_env_diff_calls_the_revisions_endpoint_and_renders_it(api: FakeApi, run):
    api.on("GET", "/tasks/t1/revisions/1/diff/2", Answer(200, {
        "added": [{"name": "NEW", "value": "x", "source": "user"}],
        "removed": [],
        "changed": [{"name": "LR", "old": "0.01", "new": "0.5", "source": "user"}]}))

    result = run("env", "diff", "t1", "1", "2")

    assert result.code == 0
    assert "+ NEW=x  [user]" in result.out
    assert "~ LR: 0.01 -> 0.5  [user]" in result.out


def test_env_export_writes_dotenv_that_reads_back_and_skips_secrets(api: FakeApi, run):
    values = {"Q": "\"quoted\" $HOME $(id) = # x\nline 2", "U": "ünïcode ✓",
              "APOSTROPHE": "it's"}
    as_set = [*({"name": k, "value": v} for k, v in values.items()),
              {"name": "HF_TOKEN", "value": "********", "secret": True}]
    api.on("GET", "/tasks/t1", task("succeeded", env=as_set, resolved_env=[
        *({**e, "source": "user"} for e in as_set),
        {"name": "TASK_ID", "value": "t1", "source": "platform"}]))

    result = run("env", "export", "t1")
    resolved = run("env", "export", "t1", "--resolved")

    assert result.code == resolved.code == 0
    assert "# 'HF_TOKEN' is not exported: it is secret" in result.out
    assert "# 'APOSTROPHE' is not exported: its value holds a single quote" in result.out
    del values["APOSTROPHE"]
    assert dotenv_values(stream=io.StringIO(result.out), interpolate=False) == values
    assert dotenv_values(stream=io.StringIO(resolved.out), interpolate=False) == {
        **values, "TASK_ID": "t1"}


def test_preview_shows_the_env_and_exits_2_when_it_would_be_rejected(
        api: FakeApi, run, task_file: Path):
    api.on("POST", "/env/preview", Answer(200, {"ok": False, "policy_version": 4,
                                                "variables": [], "warnings": [],
                                                "errors": [PROTECTED]}))

    result = run("preview", str(task_file))

    assert result.code == 2
    assert "DATA_ROOT:" in result.err
    assert api.seen[0].body == {"name": "demo", "env": [{"name": "LR", "value": "0.01"}],
                                "policy_version": None}


def test_policy_impact_posts_the_draft_and_renders_the_answer(api: FakeApi, run,
                                                              tmp_path: Path):
    draft = tmp_path / "policy.json"
    draft.write_text('{"version": 3, "author": "admin", "created_at": 1.0, '
                     '"defaults": [{"name": "NCCL_DEBUG", "value": "INFO"}], "protected": [], '
                     '"on_conflict": "reject"}', encoding="utf-8")
    api.on("POST", "/policy/impact", Answer(200, {
        "considered": 3, "rejected": 0, "rejections": [],
        "changes": [{"name": "NCCL_DEBUG", "old": "WARN", "new": "INFO", "tasks": 3,
                     "owners": 2}]}))

    result = run("policy", "impact", str(draft))

    assert result.code == 0
    assert api.seen[0].body == {"defaults": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                                "protected": [], "on_conflict": "reject"}
    assert "tasks considered: 3" in result.out
    assert any("NCCL_DEBUG" in line and "WARN" in line and "INFO" in line
               for line in result.out.splitlines())


def test_policy_set_refuses_a_masked_secret(api: FakeApi, run, tmp_path: Path):
    draft = tmp_path / "policy.yaml"
    draft.write_text("defaults: [{name: KEY, value: '********', secret: true}]\nprotected: []\n",
                     encoding="utf-8")

    result = run("policy", "set", str(draft))

    assert result.code == 4
    assert "secret KEY" in result.err
    assert api.seen == []


def test_policy_history_lists_the_latest_versions_first(api: FakeApi, run):
    api.on("GET", "/policy/versions", Answer(200, {"current": 2, "versions": [0, 1, 2]}))
    for n in (0, 1, 2):
        api.on("GET", f"/policy/versions/{n}", Answer(200, {
            "version": n, "author": "admin", "defaults": [], "protected": [],
            "on_conflict": "reject"}))

    result = run("policy", "history", "--limit", "2")

    assert result.code == 0
    assert "2 (current)" in result.out
    assert [s.path for s in api.seen[1:]] == ["/api/v1/policy/versions/2",
                                              "/api/v1/policy/versions/1"]


def test_tokens_create_prints_the_new_token_once_and_list_never(api: FakeApi, run):
    api.on("POST", "/tokens", Answer(201, {"id": "k1", "owner": "bob", "role": "admin",
                                           "token": "tok_new-one"}))
    api.on("GET", "/tokens", Answer(200, {"items": [{"id": "k1", "owner": "bob",
                                                     "role": "admin"}]}))
    api.on("DELETE", "/tokens/k1", Answer(204, ""))

    created = run("tokens", "create", "bob", "--role", "admin")
    listed = run("tokens", "list")
    revoked = run("tokens", "revoke", "k1")

    assert created.code == listed.code == revoked.code == 0
    assert created.out == "tok_new-one\n"
    assert "tok_new-one" not in created.err + listed.out + listed.err
    assert "bob" in listed.out
    assert "token k1 revoked" in revoked.err
    assert api.seen[0].body == {"owner": "bob", "role": "admin"}


def test_policy_set_warns_of_each_project_policy_the_new_one_refuses(api: FakeApi, run,
                                                                      tmp_path: Path):
    draft = tmp_path / "policy.yaml"
    draft.write_text("defaults: []\nprotected: [{name: DATA_ROOT, value: /data}]\n",
                     encoding="utf-8")
    api.on("PUT", "/policy", Answer(200, {
        "version": 7, "defaults": [], "protected": [{"name": "DATA_ROOT", "value": "/data"}],
        "rules": [], "project_conflicts": [{"project": "vision", "policy_version": 3,
                                            "problems": [PROTECTED]}]}))

    result = run("policy", "set", str(draft))

    assert result.code == 0
    assert "project vision (policy version 3) now conflicts with this policy:" in result.err
    assert f"DATA_ROOT: {PROTECTED['message']} (policy.protected)" in result.err
    assert "project_conflicts" not in result.out
    assert api.seen[0].body == {"defaults": [], "protected": [
        {"name": "DATA_ROOT", "value": "/data"}]}


def test_an_env_the_api_refuses_before_storing_exits_2_like_a_rejected_task(
        api: FakeApi, run, task_file: Path):
    api.on("POST", "/tasks", api_error(422, "env_invalid", "the env cannot be stored", {
        "variable": "BIG", "rule": "env.value_size", "limit": 131072,
        "message": "BIG's value is 200000 bytes"}))

    result = run("submit", str(task_file), "--follow")

    assert result.code == 2
    assert "BIG: BIG's value is 200000 bytes (env.value_size, limit 131072)" in result.err


def test_another_refusal_of_the_api_still_exits_5(api: FakeApi, run, task_file: Path):
    api.on("POST", "/tasks", api_error(409, "quota_exceeded", "too many unfinished tasks"))
    assert run("submit", str(task_file)).code == 5


def test_login_writes_nothing_when_the_server_refuses_the_token(
        api: FakeApi, run, monkeypatch: pytest.MonkeyPatch, isolated_settings: Path):
    api.on("GET", "/tasks", api_error(401, "unauthorized", "a valid bearer token is required"))
    monkeypatch.delenv("TASKENV_TOKEN")
    monkeypatch.setattr("sys.stdin", io.StringIO("tke_wrong\n"))

    result = run("login")

    assert result.code == 5 and "401" in result.err
    assert not isolated_settings.exists()


def test_login_from_a_pipe_writes_the_config_and_warns_of_nothing(
        api: FakeApi, run, monkeypatch: pytest.MonkeyPatch, isolated_settings: Path):
    api.on("GET", "/tasks", Answer(200, {"items": [], "next_cursor": None}))
    monkeypatch.delenv("TASKENV_TOKEN")
    monkeypatch.setattr("sys.stdin", io.StringIO("tke_from-a-pipe\n"))

    result = run("login", "--url", api.base)  # filterwarnings=error: a warning would fail

    assert result.code == 0, result.err
    assert isolated_settings.stat().st_mode & 0o777 == 0o600
    assert 'token = "tke_from-a-pipe"' in isolated_settings.read_text(encoding="utf-8")
    assert api.seen[0].headers["Authorization"] == "Bearer tke_from-a-pipe"


def test_show_prints_facts_problems_and_the_env_with_sources(api: FakeApi, run):
    api.on("GET", "/tasks/t1", task("failed", exit_code=3, reason="step 2 exited 3",
                                    policy_version=4, created_at="2026-12-01T15:04:05.123Z",
                                    warnings=[{"variable": "MY_TOKEN", "rule": "secret.name",
                                               "message": "looks secret"}],
                                    resolved_env=[{"name": "LR", "value": "0.1",
                                                   "source": "user"}]))

    result = run("show", "t1")

    assert result.code == 0
    rows = result.out.splitlines()
    assert any(r.startswith("status") and "failed" in r for r in rows)
    assert any(r.startswith("outcome") and "exit code 3; step 2 exited 3" in r for r in rows)
    assert any(r.startswith("created") and "2026-12-01" in r for r in rows)
    assert "MY_TOKEN: looks secret (secret.name)" in result.out
    assert any("LR" in r and "0.1" in r and "user" in r for r in rows)


def test_follow_asks_with_the_etag_and_keeps_the_task_on_a_304(api: FakeApi, run,
                                                               task_file: Path):
    accept(api)
    running = task("running")
    running.headers = {"ETag": '"1-aaaaaaaaaaaaaaaa"'}
    done = task("succeeded", exit_code=0)
    done.headers = {"ETag": '"1-bbbbbbbbbbbbbbbb"'}
    api.on("GET", "/tasks/t1", running, Answer(304, headers=running.headers), done)
    api.on("GET", "/tasks/t1/logs", Log(200, "hi\n"))

    result = run("submit", str(task_file), "--follow")

    assert (result.code, result.out) == (0, "hi\n")
    sent = [s.headers.get("If-None-Match") for s in api.requests_to("GET", "/tasks/t1")]
    assert sent == [None, '"1-aaaaaaaaaaaaaaaa"', '"1-aaaaaaaaaaaaaaaa"']
    assert result.err.count("revision 1: running") == 1


def test_submit_replicas_sends_them_and_overrides_the_file(api: FakeApi, run, tmp_path: Path):
    path = tmp_path / "ddp.yaml"
    path.write_text(TASK_YAML + "replicas: 2\n", encoding="utf-8")
    accept(api)

    result = run("submit", str(path), "--replicas", "3", "--procs-per-replica", "2")

    assert result.code == 0
    assert (api.seen[0].body["replicas"], api.seen[0].body["procs_per_replica"]) == (3, 2)


def test_submit_refuses_identity_variables_before_calling_the_api(
        api: FakeApi, run, task_file: Path, tmp_path: Path):
    (tmp_path / ".env").write_text("RANK=0\nMASTER_PORT=1\n", encoding="utf-8")

    result = run("submit", str(task_file), "--env-file", str(tmp_path / ".env"))

    assert result.code == 2 and api.seen == []
    assert "RANK" in result.err and "MASTER_PORT" in result.err
    assert "per replica" in result.err


def test_logs_of_one_replica_asks_for_it(api: FakeApi, run):
    api.on("GET", "/tasks/t1/logs", Answer(200, "rank 1 ready\n"))

    result = run("logs", "t1", "--replica", "1")

    assert (result.code, result.out) == (0, "rank 1 ready\n")
    assert api.seen[0].query == {"replica": "1"}


def test_preview_with_replicas_asks_for_them_and_says_what_differs(
        api: FakeApi, run, task_file: Path):
    api.on("POST", "/env/preview", Answer(200, {
        "ok": True, "policy_version": 4, "warnings": [], "errors": [], "replicas": 3,
        "variables": [{"name": "RANK", "value": "0", "source": "platform"}],
        "differs": [{"name": "RANK", "values": "the replica's index: 0 in replica 0 ... 2 "
                                               "in replica 2"}]}))

    result = run("preview", str(task_file), "--replicas", "3", "--nodes", "3")

    assert result.code == 0 and api.seen[0].body["replicas"] == 3
    assert api.seen[0].body["nodes"] == 3
    assert "RANK differs per replica: the replica's index" in result.err


IDENTITY_ROWS = [{"name": n, "value": v, "source": "platform"} for n, v in (
    ("TASK_ID", "t1"), ("TASK_REPLICA", "0"), ("TASK_REPLICAS", "3"), ("RANK", "0"),
    ("WORLD_SIZE", "3"), ("MASTER_ADDR", "127.0.0.1"), ("PET_NODE_RANK", "0"))]


@pytest.mark.parametrize("command", [("show", "t1"), ("env", "get", "t1")])
def test_show_and_env_get_list_the_identity_and_say_what_other_replicas_hold(
        api: FakeApi, run, command: tuple[str, ...]):
    api.on("GET", "/tasks/t1", task("running", replicas=3, resolved_env=[
        *IDENTITY_ROWS, {"name": "HF_TOKEN", "value": "********", "source": "user",
                         "secret": True}]))

    result = run(*command)

    assert result.code == 0
    rows = result.out.splitlines()
    for variable in IDENTITY_ROWS:
        assert any(f" {variable['name']} " in f" {r} " and f" {variable['value']} " in r
                   and "platform" in r for r in rows), variable
    assert "replica 0 of 3 shown: in replica k, TASK_REPLICA, RANK, PET_NODE_RANK are k" \
        in result.out


def test_a_task_of_one_replica_has_no_note_about_other_replicas(api: FakeApi, run):
    api.on("GET", "/tasks/t1", task("running", replicas=1, resolved_env=IDENTITY_ROWS))

    assert "replica 0 of" not in run("env", "get", "t1").out


def test_an_api_error_and_a_failed_task_print_their_reasons_as_lines(api: FakeApi, run,
                                                                     task_file: Path):
    api.on("GET", "/tasks/t1", task("failed", exit_code=1,
                                    reason="step 1 exited 1\nlast line: out of memory"))
    api.on("GET", "/tasks/t2", api_error(422, "policy_conflict", "refused\nsee the policy", {
        "variable": "DATA_ROOT", "rule": "policy.protected",
        "message": "DATA_ROOT is protected: shared storage\nask #infra for a bucket"}))

    shown = run("show", "t1")
    refused = run("env", "get", "t2")
    accept(api)
    api.on("GET", "/tasks/t1/logs", Log(200, ""))
    followed = run("submit", str(task_file), "--follow")

    assert "\\n" not in shown.out + refused.err + followed.err
    rows = [r.rstrip() for r in shown.out.splitlines()]
    at = next(i for i, r in enumerate(rows) if r.startswith("outcome"))
    assert rows[at].endswith("exit code 1; step 1 exited 1")
    assert rows[at + 1].strip() == "last line: out of memory"
    assert rows[at + 1].index("last") == rows[at].index("exit")  # under the value
    assert refused.err.splitlines()[:4] == [
        f"error: refused [policy_conflict; 422 from {api.base}/api/v1/tasks/t2]",
        "  see the policy",
        "  DATA_ROOT: DATA_ROOT is protected: shared storage (policy.protected)",
        "    ask #infra for a bucket"]
    assert "task t1 failed: exit code 1; step 1 exited 1\n  last line: out of memory" \
        in followed.err


def test_a_yaml_error_of_several_lines_is_printed_as_lines(run, tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n", encoding="utf-8")

    result = run("submit", str(bad))

    assert result.code == 4
    assert "\\n" not in result.err and len(result.err.splitlines()) > 1
    assert all(r.startswith("  ") for r in result.err.splitlines()[1:])


def accept_patch(api: FakeApi) -> None:
    api.on("PATCH", "/tasks/t1/env", Answer(202, {"id": "t1", "revision": 2,
                                                  "status": "pending", "url": "/x"}))


def test_env_set_env_file_sends_its_variables_as_typed_and_marks_secrets(
        api: FakeApi, run, tmp_path: Path):
    (tmp_path / ".env").write_text("# kept as text\nNOTE='$(HOME) stays ${HOME}'\n"
                                   "export HF_TOKEN=from-the-file\n", encoding="utf-8")
    accept_patch(api)

    result = run("env", "set", "t1", "LR=0.5", "--env-file", str(tmp_path / ".env"),
                 "--secret", "HF_TOKEN")

    assert result.code == 0, result.err
    assert api.seen[0].body == {"set": [
        {"name": "LR", "value": "0.5"}, {"name": "NOTE", "value": "$(HOME) stays ${HOME}"},
        {"name": "HF_TOKEN", "value": "from-the-file", "secret": True}], "unset": []}


def test_env_set_refuses_a_name_both_in_the_file_and_given_naming_it(api: FakeApi, run,
                                                                     tmp_path: Path):
    (tmp_path / ".env").write_text("LR=0.1\nNOTE=x\n", encoding="utf-8")

    result = run("env", "set", "t1", "LR=0.5", "--env-file", str(tmp_path / ".env"))

    assert result.code == 2 and api.seen == []
    assert "the env was rejected" in result.err
    assert "LR" in result.err and "NOTE" not in result.err


def test_env_set_refuses_a_file_line_that_is_no_binding_before_sending(api: FakeApi, run,
                                                                       tmp_path: Path):
    (tmp_path / ".env").write_text("LR=0.1\nnot a binding\n", encoding="utf-8")

    result = run("env", "set", "t1", "--env-file", str(tmp_path / ".env"))

    assert result.code == 2 and api.seen == []
    assert "line 2" in result.err


def test_preview_of_a_script_the_task_file_carries_sends_that_path_once(
        api: FakeApi, run, tmp_path: Path):
    (tmp_path / "train.py").write_text("import os\nos.environ['LR']\n", encoding="utf-8")
    (tmp_path / "prepare.sh").write_text("echo $DATA\n", encoding="utf-8")
    (tmp_path / "task.yaml").write_text(
        "name: demo\nsteps: [[python3, train.py]]\nfiles:\n"
        "  - {path: train.py, source: train.py}\n", encoding="utf-8")
    api.on("POST", "/env/preview", Answer(200, {"ok": True, "policy_version": 1,
                                                "variables": [], "warnings": [],
                                                "errors": []}))

    result = run("preview", str(tmp_path / "task.yaml"), "--script",
                 str(tmp_path / "train.py"), "--script", str(tmp_path / "prepare.sh"))

    assert result.code == 0, result.err
    sent = api.seen[0].body["files"]
    assert [f["path"] for f in sent] == ["train.py", "prepare.sh"]
    assert sent[0]["content"] == "import os\nos.environ['LR']\n"


UNREAD = {"variable": "LR", "rule": "doctor.script_unread",
          "message": "LR is set by the task but no script reads it (a typo?); the scripts "
                     "read LEARNING_RATE"}
REPORT = {"scripts": [{"path": "train.py", "language": "python", "reads": ["LEARNING_RATE"]}],
          "missing": [], "unread": [], "unknowable": [],
          "from_defaults": [{"name": "EPOCHS", "message": "train.py line 4 reads EPOCHS: set "
                                                          "by a default of platform"}]}


def test_logs_follow_goes_on_into_the_revision_that_supersedes_the_one_followed(
        api: FakeApi, run):
    api.on("GET", "/tasks/t1", task("running"), task("running"), task("pending", 2),
           task("running", 2), task("succeeded", 2, exit_code=0))
    api.on("GET", "/tasks/t1/logs", RevisionLogs(200, {1: "one\n"}),
           RevisionLogs(200, {1: "one\nstopped\n", 2: ""}),
           RevisionLogs(200, {1: "one\nstopped\n", 2: "two\n"}),
           RevisionLogs(200, {1: "one\nstopped\n", 2: "two\ndone\n"}))

    result = run("logs", "t1", "--follow")

    assert (result.code, result.out) == (0, "one\nstopped\ntwo\ndone\n")
    said = [result.err.index(s) for s in (
        "revision 1: running", "revision 1 was superseded by revision 2",
        "revision 2: pending", "revision 2: succeeded", "task t1 succeeded")]
    assert said == sorted(said), result.err
    asked = [(s.query["revision"], s.query["offset"])
             for s in api.requests_to("GET", "/tasks/t1/logs")]
    assert asked[0] == ("1", "0") and ("1", "4") in asked and ("2", "0") in asked
    assert asked[-1] == ("2", "9")


def test_a_follow_exits_with_the_outcome_of_the_revision_that_ended_the_task(
        api: FakeApi, run, task_file: Path):
    accept(api)
    api.on("GET", "/tasks/t1", task("running"), task("failed", 2, exit_code=4))
    api.on("GET", "/tasks/t1/logs", RevisionLogs(200, {1: "", 2: "bad\n"}))

    result = run("submit", str(task_file), "--follow")

    assert (result.code, result.out) == (1, "bad\n")
    assert "revision 1 was superseded by revision 2" in result.err
    assert "exit code 4" in result.err


def test_follow_prints_the_doctors_findings_once_resolved_and_not_again_at_the_end(
        api: FakeApi, run, task_file: Path):
    accept(api)
    policy = {"variable": "NCCL_DEBUG", "rule": "policy.default", "message": "kept WARN"}
    resolved = {"doctor": REPORT, "warnings": [UNREAD, policy]}
    api.on("GET", "/tasks/t1", task("pending"), task("running", **resolved),
           task("failed", exit_code=1, **resolved))
    api.on("GET", "/tasks/t1/logs", Log(200, ""), Log(200, "Traceback\n"))

    result = run("submit", str(task_file), "--follow")

    assert result.code == 1 and result.out == "Traceback\n"
    assert result.err.count("LR is set by the task but no script reads it") == 1
    assert result.err.count("doctor: read train.py") == 1
    assert result.err.index("revision 1: running") < result.err.index("doctor: read train.py") \
        < result.err.index("no script reads it") < result.err.index("task t1 failed")
    assert result.err.index("no script reads it") < result.err.index("kept WARN")
    # Printed before the output: the first log read comes after the resolved task's read.
    reads = [(s.method, s.path.rsplit("/", 1)[-1]) for s in api.seen if s.method == "GET"]
    assert reads[:3] == [("GET", "t1"), ("GET", "logs"), ("GET", "t1")]


def test_env_set_prints_the_doctors_findings_on_what_it_changed_once_resolved(
        api: FakeApi, run):
    api.on("PATCH", "/tasks/t1/env", Answer(202, {"id": "t1", "revision": 2,
                                                  "status": "pending", "url": "/x"}))
    other = {**UNREAD, "variable": "BATCH", "message": "BATCH is set by the task but no "
                                                       "script reads it"}
    api.on("GET", "/tasks/t1", task("pending", 2), task("validated", 2),
           task("resolved", 2, doctor=REPORT, warnings=[UNREAD, other]))

    result = run("env", "set", "t1", "LR=0.005")

    assert result.code == 0, result.err
    assert "doctor, revision 2 (LR):" in result.err
    assert "LR: LR is set by the task but no script reads it (a typo?); the scripts read " \
           "LEARNING_RATE (doctor.script_unread)" in result.err
    assert "BATCH" not in result.err  # unchanged: not this change's finding
    assert len(api.requests_to("GET", "/tasks/t1")) == 3


def test_env_unset_says_a_default_now_satisfies_a_read_or_that_nothing_was_found(
        api: FakeApi, run):
    api.on("PATCH", "/tasks/t1/env", Answer(202, {"id": "t1", "revision": 3,
                                                  "status": "pending", "url": "/x"}))
    api.on("GET", "/tasks/t1", task("running", 3, doctor=REPORT, warnings=[UNREAD]))

    unset = run("env", "unset", "t1", "EPOCHS")
    quiet = run("env", "unset", "t1", "NOTE")

    assert unset.code == quiet.code == 0
    assert "doctor, revision 3 (EPOCHS):" in unset.err
    assert "train.py line 4 reads EPOCHS: set by a default of platform" in unset.err
    assert "LR" not in unset.err.split("doctor, revision 3")[1]
    assert "doctor, revision 3: read train.py; nothing to say of NOTE" in quiet.err


def test_env_set_says_when_the_revision_is_not_resolved_in_time_or_was_rejected(
        api: FakeApi, run):
    api.on("PATCH", "/tasks/t1/env", Answer(202, {"id": "t1", "revision": 2,
                                                  "status": "pending", "url": "/x"}))
    api.on("GET", "/tasks/t1", task("pending", 2))
    waited = run("env", "set", "t1", "LR=1")
    missing = {"variable": "HUB_REPO", "rule": "doctor.script_unset",
               "message": "train.py line 8 reads HUB_REPO, which this task does not set"}
    api.on("GET", "/tasks/t1", task("rejected", 2, doctor=REPORT, errors=[missing]))
    rejected = run("env", "unset", "t1", "HUB_REPO")

    assert waited.code == rejected.code == 0
    assert "revision 2 is still pending after 30 s: `taskenv show t1` lists the doctor's " \
           "findings once it is resolved" in waited.err
    assert "doctor, revision 2 (HUB_REPO):" in rejected.err
    assert "task t1 revision 2 was rejected:" in rejected.err
