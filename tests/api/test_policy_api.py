"""/api/v1/policy: versioned, immutable policies that only admins change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient

from shared.policy.store import PolicyStore
from shared.secrets import MASK

POLICY = "/api/v1/policy"
ErrorShape = Callable[..., None]


def policy(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "defaults": [{"name": "NCCL_DEBUG", "value": "WARN"}],
        "protected": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128",
                       "reason": "egress goes through the proxy"},
                      {"name": "CUDA_VISIBLE_DEVICES", "reason": "the scheduler sets it"}],
        "on_conflict": "reject",
    }
    data.update(changes)
    return data


def put(client: FlaskClient, data: dict[str, Any]) -> dict[str, Any]:
    response = client.put(POLICY, json=data)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_no_policy_yet_is_version_zero(client: FlaskClient) -> None:
    current = client.get(POLICY).get_json()
    assert current["version"] == 0
    assert current["defaults"] == [] and current["protected"] == []
    assert client.get(f"{POLICY}/versions").get_json() == {"current": 0, "versions": []}


def test_put_creates_version_one_then_two(client: FlaskClient) -> None:
    first = put(client, policy())
    second = put(client, policy(on_conflict="drop"))
    assert (first["version"], second["version"]) == (1, 2)
    assert first["author"] == "admin" and first["created_at"].endswith("Z")
    assert first["defaults"] == [{"name": "NCCL_DEBUG", "value": "WARN"}]
    assert first["protected"][1] == {"name": "CUDA_VISIBLE_DEVICES",
                                     "reason": "the scheduler sets it"}
    # The PUT also says which project policies it conflicts with: none here.
    assert {**client.get(POLICY).get_json(), "project_conflicts": []} == second


def test_versions_lists_every_version_and_the_current_one(client: FlaskClient) -> None:
    put(client, policy())
    put(client, policy(defaults=[]))
    assert client.get(f"{POLICY}/versions").get_json() == {"current": 2, "versions": [1, 2]}


def test_an_old_version_is_returned_unchanged(client: FlaskClient) -> None:
    first = put(client, policy())
    put(client, policy(defaults=[{"name": "NCCL_DEBUG", "value": "INFO"}], protected=[]))
    response = client.get(f"{POLICY}/versions/1")
    assert response.status_code == 200
    assert {**response.get_json(), "project_conflicts": []} == first


def test_version_zero_is_the_empty_policy(client: FlaskClient) -> None:
    put(client, policy())
    empty = client.get(f"{POLICY}/versions/0").get_json()
    assert empty["version"] == 0 and empty["defaults"] == [] and empty["protected"] == []


def test_a_missing_version_is_404(client: FlaskClient, error_shape: ErrorShape) -> None:
    put(client, policy())
    response = client.get(f"{POLICY}/versions/7")
    assert response.status_code == 404
    error_shape(response.get_json(), "not_found")


def test_an_inconsistent_policy_is_422_naming_each_variable(
        client: FlaskClient, policies: PolicyStore, error_shape: ErrorShape) -> None:
    data = {
        "defaults": [{"name": "TASK_ID", "value": "x"}, {"name": "BOTH", "value": "d"},
                     {"name": "1BAD", "value": "y"}],
        "protected": [{"name": "BOTH", "value": "p", "reason": "locked"},
                      {"name": "NO_REASON", "reason": "  "}],
    }
    response = client.put(POLICY, json=data)
    assert response.status_code == 422
    body = response.get_json()
    error_shape(body, "policy_invalid")
    named = {(p["rule"], p.get("variable")) for p in body["errors"]}
    assert named == {("policy.platform_reserved", "TASK_ID"), ("policy.ambiguous", "BOTH"),
                     ("name.shell", "1BAD"), ("policy.reason_required", "NO_REASON")}
    for problem in body["errors"]:
        assert problem["variable"] in problem["message"]
    assert policies.versions() == []


def test_policy_shape_errors_are_422_naming_the_field(client: FlaskClient,
                                                      error_shape: ErrorShape) -> None:
    response = client.put(POLICY, json={"protected": [{"name": "P"}], "on_conflict": "maybe",
                                        "extra": 1})
    assert response.status_code == 422
    error_shape(response.get_json())
    fields = {p.get("field") for p in response.get_json()["errors"]}
    assert {"protected.0.reason", "on_conflict", "extra"} <= fields


def test_a_default_with_a_non_string_name_is_422_not_a_server_error(
        client: FlaskClient, error_shape: ErrorShape) -> None:
    response = client.put(POLICY, json={"defaults": [{"name": ["A"], "value": "x"}],
                                        "protected": []})
    assert response.status_code == 422
    body = response.get_json()
    error_shape(body, "unprocessable_entity")
    assert [e["field"] for e in body["errors"]] == ["defaults.0.name"]


def test_secret_policy_values_are_masked(client: FlaskClient) -> None:
    data = policy(defaults=[{"name": "DB_PASSWORD", "value": "pw-in-policy", "secret": True}],
                  protected=[{"name": "REGISTRY_TOKEN", "value": "tok-in-policy",
                              "reason": "platform registry", "secret": True}])
    responses = [client.put(POLICY, json=data), client.get(POLICY),
                 client.get(f"{POLICY}/versions/1")]
    for response in responses:
        body = response.get_json()
        assert body["defaults"][0]["value"] == MASK
        assert body["protected"][0]["value"] == MASK
        assert b"pw-in-policy" not in response.get_data()
        assert b"tok-in-policy" not in response.get_data()


def test_a_secret_policy_value_without_a_key_is_refused(
        admin_client_with: Callable[..., FlaskClient], policies: PolicyStore,
        error_shape: ErrorShape) -> None:
    client = admin_client_with(secret_keys="")
    response = client.put(POLICY, json=policy(
        defaults=[{"name": "DB_PASSWORD", "value": "pw-in-policy", "secret": True}]))
    assert response.status_code == 422
    error_shape(response.get_json(), "secrets_unavailable")
    assert client.get(f"{POLICY}/versions").get_json()["versions"] == []


def test_only_admins_may_read_or_change_the_policy(
        client_for: Callable[..., FlaskClient], error_shape: ErrorShape) -> None:
    user = client_for("alice")
    for response in (user.get(POLICY), user.put(POLICY, json=policy()),
                     user.get(f"{POLICY}/versions"), user.get(f"{POLICY}/versions/0")):
        assert response.status_code == 403
        error_shape(response.get_json(), "forbidden")


# --- per-node defaults: when: {node: glob} --------------------------------------------

def test_a_per_node_default_is_saved_and_what_may_not_depend_on_the_node_is_refused(
        client: FlaskClient) -> None:
    saved = put(client, {"defaults": [
        {"name": "NCCL_SOCKET_IFNAME", "value": "ib0", "when": {"node": "gpu-*"}},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth1", "when": {"node": "cpu-*"}}],
        "protected": []})
    assert [d["when"] for d in saved["defaults"]] == [{"node": "gpu-*"}, {"node": "cpu-*"}]
    refused = client.put(POLICY, json={
        "defaults": [{"name": "HF_TOKEN", "value": "hf_a-long-secret-value", "secret": True,
                      "when": {"node": "gpu-*"}},
                     {"name": "SITE", "value": "a", "when": {"node": 3}}],
        "protected": [{"name": "NCCL_IB_HCA", "value": "mlx5", "reason": "fabric",
                       "when": {"node": "gpu-*"}}],
        "rules": [{"name": "SITE", "pattern": "^[a-z]+$", "when": {"node": "gpu-*"}}]})
    assert refused.status_code == 422, refused.get_json()
    found = {(p["rule"], p.get("field")) for p in refused.get_json()["errors"]}
    assert {("when.node_secret", "defaults[0].when.node"),
            ("when.invalid", "defaults[1].when.node"),
            ("when.node_kind", "protected[0].when.node")} <= found, found
    assert client.get(POLICY).get_json()["version"] == saved["version"]  # nothing saved


# The policies of docs/policy.md's worked example, as written there: the project's gives
# no protected list, the platform's no other list empty.
PLATFORM_EXAMPLE = {
    "defaults": [{"name": "NCCL_DEBUG", "value": "WARN"}],
    "protected": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128",
                   "reason": "egress goes through the proxy"}],
    "rules": [{"name": "NUM_WORKERS", "min": 1, "max": 64,
               "description": "a node has 64 cores"}]}
PROJECT_EXAMPLE = {
    "defaults": [{"name": "NCCL_DEBUG", "value": "INFO"},
                 {"name": "NCCL_IB_DISABLE", "value": "0", "when": {"gpus": ">=1"}}],
    "rules": [{"name": "DATA_ROOT", "required": True,
               "description": "jobs read their data from a project volume"}]}


def test_an_omitted_list_is_an_empty_one_on_every_policy_endpoint(client: FlaskClient) -> None:
    assert client.post("/api/v1/projects", json={"name": "vision"}).status_code == 201
    project = "/api/v1/projects/vision/policy"

    platform = put(client, PLATFORM_EXAMPLE)
    saved = client.put(project, json=PROJECT_EXAMPLE)
    only_protected = client.post(f"{POLICY}/impact", json={"protected": [
        {"name": "NUM_WORKERS", "reason": "the scheduler sets it"}]})
    drafted = client.post(f"{project}/impact", json=PROJECT_EXAMPLE)

    assert platform["rules"][0]["name"] == "NUM_WORKERS"
    assert saved.status_code == 200, saved.get_json()
    assert saved.get_json()["protected"] == [] and len(saved.get_json()["defaults"]) == 2
    assert only_protected.status_code == drafted.status_code == 200, only_protected.get_json()
    assert client.get(project).get_json()["rules"][0]["name"] == "DATA_ROOT"


def test_a_policy_with_neither_list_is_422_naming_the_rule_and_saves_nothing(
        client: FlaskClient, policies: PolicyStore, error_shape: ErrorShape) -> None:
    assert client.post("/api/v1/projects", json={"name": "vision"}).status_code == 201
    put(client, policy())
    project = "/api/v1/projects/vision/policy"

    answers = [client.put(POLICY, json={}),
               client.put(POLICY, json={"rules": [{"name": "LR", "max": 1}]}),
               client.put(project, json={"on_conflict": "drop"}),
               client.post(f"{POLICY}/impact", json={}),
               client.post(f"{project}/impact", json={"strict_env": True})]

    for response in answers:
        assert response.status_code == 422, response.get_json()
        body = response.get_json()
        error_shape(body)
        [problem] = body["errors"]
        assert problem["field"] == "defaults" and problem["rule"] == "schema"
        assert "give defaults, protected or both" in problem["message"]
    assert policies.versions() == [1]  # the platform's policy is as it was
    assert client.get(f"{project}/versions").get_json()["versions"] == []
