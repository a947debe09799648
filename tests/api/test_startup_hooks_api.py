"""A project maintainer cannot make members' tasks run code: start-up hook variables get a
value from the platform's policy only.  Attacks as the review made them, through the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from tests.api.conftest import task_body

# Each attack prints the member's secret into a log the maintainer reads.
ATTACKS: list[tuple[str, dict[str, Any], set[str]]] = [
    ("bash_env", {"defaults": [{"name": "BASH_ENV", "value": "$(env >&2)"}]}, {"BASH_ENV"}),
    ("xtrace", {"defaults": [{"name": "SHELLOPTS", "value": "xtrace"},
                             {"name": "PS4", "value": "$(env >&2)"}]}, {"SHELLOPTS", "PS4"}),
    ("warnings_browser", {"defaults": [
        {"name": "PYTHONWARNINGS", "value": "ignore::antigravity.x"},
        {"name": "BROWSER", "value": "sh -c 'env >&2' %s"}]}, {"PYTHONWARNINGS", "BROWSER"}),
    ("protected_values", {"protected": [
        {"name": "LD_PRELOAD", "value": "/data/evil.so", "reason": "faster"},
        {"name": "NODE_OPTIONS", "value": "--require /data/x.js", "reason": "tracing"},
        {"name": "PERL5OPT", "value": "-Mevil", "reason": "r"},
        {"name": "PYTHONPATH", "value": "/data/mods", "reason": "r"}]},
     {"LD_PRELOAD", "NODE_OPTIONS", "PERL5OPT", "PYTHONPATH"}),
    ("families_and_trust", {"defaults": [
        {"name": "GIT_CONFIG_COUNT", "value": "1"},
        {"name": "GIT_CONFIG_KEY_0", "value": "core.sshCommand"},
        {"name": "LD_AUDIT", "value": "/x.so"},
        {"name": "SSL_CERT_FILE", "value": "/data/ca.pem"},
        {"name": "REQUESTS_CA_BUNDLE", "value": "/data/ca.pem"},
        {"name": "NCCL_NET_PLUGIN", "value": "/data/net.so"},
        {"name": "CUDA_INJECTION64_PATH", "value": "/data/inj.so"},
        {"name": "PYTHONBREAKPOINT", "value": "os.system"},
        {"name": "GLIBC_TUNABLES", "value": "glibc.malloc.check=3"}]},
     {"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "LD_AUDIT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
      "NCCL_NET_PLUGIN", "CUDA_INJECTION64_PATH", "PYTHONBREAKPOINT", "GLIBC_TUNABLES"}),
]


@pytest.fixture
def carol(client: FlaskClient, client_for: Callable[..., FlaskClient]) -> FlaskClient:
    """The maintainer of project vision, whose member is alice."""
    made = client.post("/api/v1/projects", json={"name": "vision", "members": ["alice"],
                                                 "maintainers": ["carol"]})
    assert made.status_code == 201, made.get_json()
    return client_for("carol")


def with_reasons(policy: dict[str, Any]) -> dict[str, Any]:
    return {"defaults": [], "protected": [], **policy}


@pytest.mark.parametrize(("attack", "policy", "names"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_maintainer_cannot_inject_a_startup_hook_and_each_is_named(
        carol: FlaskClient, error_shape: Callable[..., None], attack: str,
        policy: dict[str, Any], names: set[str]) -> None:
    for path in ("/api/v1/projects/vision/policy", "/api/v1/projects/vision/policy/impact"):
        method = carol.put if path.endswith("policy") else carol.post
        refused = method(path, json=with_reasons(policy))
        assert refused.status_code == 422, refused.get_json()
        body = refused.get_json()
        error_shape(body)
        hooks = [e for e in body["errors"] if e["rule"] == "layer.startup_hook"]
        assert {e["variable"] for e in hooks} == names  # every one, at once
        for e in hooks:
            assert e["variable"] in e["message"] and "at start" in e["message"]
            assert "only the platform" in e["message"].lower()
    assert carol.get("/api/v1/projects/vision/policy").get_json()["version"] == 0


def test_a_maintainer_may_protect_a_hook_without_a_value(
        carol: FlaskClient, client_for: Callable[..., FlaskClient]) -> None:
    saved = carol.put("/api/v1/projects/vision/policy", json={"defaults": [], "protected": [
        {"name": "LD_PRELOAD", "reason": "members may not preload"},
        {"name": "BASH_ENV", "reason": "no start-up files"}]})
    assert saved.status_code == 200, saved.get_json()
    alice = client_for("alice")
    preview = alice.post("/api/v1/env/preview", json={
        "env": [{"name": "BASH_ENV", "value": "/home/me/.rc"}]}).get_json()
    assert not preview["ok"]
    assert [(e["rule"], e["variable"]) for e in preview["errors"]] == \
        [("policy.protected", "BASH_ENV")]


def test_the_platform_may_inject_one_and_a_user_may_set_one_in_their_own_task(
        client: FlaskClient, client_for: Callable[..., FlaskClient]) -> None:
    saved = client.put("/api/v1/policy", json={"defaults": [
        {"name": "LD_LIBRARY_PATH", "value": "/usr/local/cuda/lib64"}], "protected": []})
    assert saved.status_code == 200, saved.get_json()
    bob = client_for("bob")
    shown = bob.post("/api/v1/env/preview", json={
        "env": [{"name": "PYTHONPATH", "value": "/work/src"}]}).get_json()
    assert shown["ok"], shown
    got = {v["name"]: (v["value"], v["source"]) for v in shown["variables"]}
    assert got["LD_LIBRARY_PATH"] == ("/usr/local/cuda/lib64", "default")
    assert got["PYTHONPATH"] == ("/work/src", "user")


def test_a_stored_version_that_injects_one_never_reaches_a_task(
        carol: FlaskClient, client_for: Callable[..., FlaskClient], policies: PolicyStore,
        tasks: TaskStore) -> None:
    """A version saved before such policies were refused stays (versions are immutable):
    the value is withheld where the version is used, with a warning naming it."""
    old = policies.scoped("project:vision").put(Policy.from_dict({
        "defaults": [{"name": "BASH_ENV", "value": "$(env >&2)"},
                     {"name": "LR", "value": "0.1"}],
        "protected": [{"name": "PS4", "value": "$(env >&2)", "reason": "debug"}]}))
    assert old.version == 1
    alice = client_for("alice")
    shown = alice.post("/api/v1/env/preview", json={"env": []}).get_json()
    names = {v["name"]: v["value"] for v in shown["variables"]}
    assert "BASH_ENV" not in names and "PS4" not in names and names["LR"] == "0.1"
    assert {(w["rule"], w["variable"]) for w in shown["warnings"]} == {
        ("policy.startup_hook", "BASH_ENV"), ("policy.startup_hook", "PS4")}
    # The reservation stays: a member still cannot set the name the entry protected.
    refused = alice.post("/api/v1/env/preview", json={"env": [{"name": "PS4", "value": "+ "}]})
    assert [e["variable"] for e in refused.get_json()["errors"]] == ["PS4"]
    # The manifest a member's task would be submitted as holds neither.
    made = alice.post("/api/v1/tasks", json=task_body())
    manifest = alice.get(made.get_json()["url"] + "/manifest")
    assert manifest.status_code == 200, manifest.get_json()
    assert "BASH_ENV" not in manifest.get_data(as_text=True)
    # And saving the platform policy names the project whose stored version does it.
    saved = client_for("root", role="admin").put("/api/v1/policy",
                                                 json={"defaults": [], "protected": []})
    conflicts = saved.get_json()["project_conflicts"]
    assert [(c["project"], sorted(p["variable"] for p in c["problems"])) for c in conflicts] \
        == [("vision", ["BASH_ENV", "PS4"])]


def test_the_list_is_a_platform_setting_with_families(
        admin_client_with: Callable[..., FlaskClient]) -> None:
    admin = admin_client_with(startup_hooks="default,MY_TOOL_*,-SSL_CERT_FILE")
    made = admin.post("/api/v1/projects", json={"name": "lab", "members": [],
                                                "maintainers": []})
    assert made.status_code == 201
    refused = admin.put("/api/v1/projects/lab/policy", json={"protected": [], "defaults": [
        {"name": "MY_TOOL_PLUGIN", "value": "x"}, {"name": "SSL_CERT_FILE", "value": "/ca"},
        {"name": "BASH_ENV", "value": "/x"}]})
    assert refused.status_code == 422
    assert {e["variable"] for e in refused.get_json()["errors"]} == {"MY_TOOL_PLUGIN", "BASH_ENV"}
