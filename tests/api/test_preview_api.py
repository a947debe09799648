"""/api/v1/env/preview: what a task would get, with nothing stored or launched."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from flask.testing import FlaskClient

from shared.env.envlist import EnvVar
from shared.policy.model import Policy, Protected
from shared.policy.store import PolicyStore
from shared.secrets import MASK

PREVIEW = "/api/v1/env/preview"
ErrorShape = Callable[..., None]


@pytest.fixture
def with_policy(policies: PolicyStore) -> Policy:
    return policies.put(Policy(
        defaults=(EnvVar("NCCL_DEBUG", "WARN"), EnvVar("DB_PASSWORD", "pw-default", True)),
        protected=(Protected("HTTPS_PROXY", "egress goes through the proxy", "http://proxy"),
                   Protected("CUDA_VISIBLE_DEVICES", "the scheduler sets it"),
                   Protected("REGISTRY_TOKEN", "platform registry", "tok-protected", True))))


def preview(client: FlaskClient, env: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    response = client.post(PREVIEW, json={"env": env, **extra})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in result["variables"]}


def test_preview_shows_every_variable_with_its_source(client: FlaskClient,
                                                      with_policy: Policy) -> None:
    result = preview(client, [{"name": "NCCL_DEBUG", "value": "INFO"},
                              {"name": "LR", "value": "$(HOME)"}], name="resnet")
    assert result["ok"] is True and result["errors"] == []
    assert result["policy_version"] == with_policy.version
    got = {n: (v["value"], v["source"], v["overrode"]) for n, v in by_name(result).items()}
    assert got["NCCL_DEBUG"] == ("INFO", "user", ["default"])
    assert got["LR"] == ("$(HOME)", "user", [])
    assert got["HTTPS_PROXY"] == ("http://proxy", "protected", [])
    assert got["DB_PASSWORD"] == (MASK, "default", [])
    assert got["REGISTRY_TOKEN"] == (MASK, "protected", [])
    assert got["TASK_NAME"] == ("resnet", "platform", [])
    assert got["TASK_POLICY_VERSION"][0] == str(with_policy.version)
    assert "CUDA_VISIBLE_DEVICES" not in got


def test_preview_of_a_protected_variable_names_it_and_the_reason(client: FlaskClient,
                                                                 with_policy: Policy) -> None:
    result = preview(client, [{"name": "HTTPS_PROXY", "value": "http://mine"},
                              {"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])
    assert result["ok"] is False
    errors = {e["variable"]: e for e in result["errors"]}
    assert set(errors) == {"HTTPS_PROXY", "CUDA_VISIBLE_DEVICES"}
    assert "egress goes through the proxy" in errors["HTTPS_PROXY"]["message"]
    assert "the scheduler sets it" in errors["CUDA_VISIBLE_DEVICES"]["message"]


def test_preview_of_a_platform_variable_is_an_error(client: FlaskClient) -> None:
    result = preview(client, [{"name": "TASK_ID", "value": "mine"}])
    assert result["ok"] is False
    assert [(e["rule"], e["variable"]) for e in result["errors"]] == [
        ("platform.reserved", "TASK_ID")]


def test_preview_in_drop_mode_warns_and_shows_the_protected_value(
        client: FlaskClient, policies: PolicyStore) -> None:
    policies.put(Policy(protected=(Protected("HTTPS_PROXY", "egress", "http://proxy"),),
                        on_conflict="drop"))
    result = preview(client, [{"name": "HTTPS_PROXY", "value": "http://mine"}])
    assert result["ok"] is True
    [warning] = result["warnings"]
    assert warning["variable"] == "HTTPS_PROXY" and "egress" in warning["message"]
    assert by_name(result)["HTTPS_PROXY"]["value"] == "http://proxy"
    assert by_name(result)["HTTPS_PROXY"]["overrode"] == ["user"]


def test_preview_reports_every_validation_problem(client: FlaskClient) -> None:
    result = preview(client, [{"name": "1BAD", "value": "x"}, {"name": "DUP", "value": "1"},
                              {"name": "DUP", "value": "2"}, {"name": "NUL", "value": "\x00"}])
    assert result["ok"] is False and result["variables"] == []
    assert {(e["rule"], e["variable"]) for e in result["errors"]} == {
        ("name.shell", "1BAD"), ("name.duplicate", "DUP"), ("value.nul", "NUL")}


def test_preview_advises_marking_secret_looking_variables(client: FlaskClient) -> None:
    result = preview(client, [{"name": "WANDB_API_KEY", "value": "k"}])
    assert result["ok"] is True
    assert [(w["rule"], w["variable"]) for w in result["warnings"]] == [
        ("secret.suggested", "WANDB_API_KEY")]


def test_preview_masks_the_users_secrets(client: FlaskClient) -> None:
    response = client.post(PREVIEW, json={"env": [
        {"name": "HF_TOKEN", "value": "hf-user-secret", "secret": True}]})
    assert by_name(response.get_json())["HF_TOKEN"]["value"] == MASK
    assert b"hf-user-secret" not in response.get_data()


def test_preview_against_an_older_policy_version(client: FlaskClient,
                                                 policies: PolicyStore) -> None:
    policies.put(Policy(defaults=(EnvVar("D", "old"),)))
    policies.put(Policy(defaults=(EnvVar("D", "new"),)))
    assert by_name(preview(client, []))["D"]["value"] == "new"
    old = preview(client, [], policy_version=1)
    assert old["policy_version"] == 1 and by_name(old)["D"]["value"] == "old"


def test_preview_against_a_missing_policy_version_is_404(client: FlaskClient,
                                                         error_shape: ErrorShape) -> None:
    response = client.post(PREVIEW, json={"env": [], "policy_version": 5})
    assert response.status_code == 404
    error_shape(response.get_json(), "not_found")


def test_preview_stores_and_enqueues_nothing(client: FlaskClient, with_policy: Policy,
                                             redis_client: fakeredis.FakeRedis,
                                             enqueued: Any) -> None:
    before = {k: redis_client.type(k) for k in redis_client.keys("*")}
    preview(client, [{"name": "LR", "value": "0.1"}, {"name": "T", "value": "s", "secret": True}])
    preview(client, [{"name": "1BAD", "value": "x"}])
    after = {k: redis_client.type(k) for k in redis_client.keys("*")}
    assert after == before
    assert redis_client.keys("taskenv:task*") == []
    assert enqueued.calls == []


def test_preview_with_a_malformed_body_is_422(client: FlaskClient,
                                              error_shape: ErrorShape) -> None:
    response = client.post(PREVIEW, json={"env": "A=1", "unknown": True})
    assert response.status_code == 422
    error_shape(response.get_json())
    assert {p.get("field") for p in response.get_json()["errors"]} >= {"env", "unknown"}


def test_preview_is_open_to_users(client_for: Callable[..., FlaskClient]) -> None:
    response = client_for("alice").post(PREVIEW, json={"env": [{"name": "A", "value": "1"}]})
    assert response.status_code == 200


def test_preview_of_text_that_is_not_valid_unicode_is_not_a_server_error(
        client: FlaskClient) -> None:
    # JSON can carry a lone surrogate escape; Python's json module decodes it as is.
    response = client.post(PREVIEW, data='{"env": [{"name": "A", "value": "\\ud800"}]}',
                           content_type="application/json")
    assert response.status_code in (200, 422)
    assert response.get_json()["errors"]
