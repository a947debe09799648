"""Endpoint variables: where a program sends credentials or fetches code is the platform's
call.  A project's policy may not give one a value unless the platform's policy allows that
project that name; a version stored before the rule is withheld where it is used."""

from __future__ import annotations

from typing import Any

import pytest

from shared.access.projects import NAME
from shared.env.envlist import EnvVar, Limits
from shared.policy.conditions import TaskFacts
from shared.policy.endpoints import DEFAULT, DEFAULT_ENDPOINTS, PROJECT_NAME, EndpointVariables
from shared.policy.hooks import DEFAULT as HOOKS
from shared.policy.hooks import DEFAULT_HOOKS, StartupHooks
from shared.policy.model import Policy, Resolution, check_policy, platform_env, resolve_scopes
from shared.policy.scope_checks import check_scope_policy, project_conflicts
from shared.policy.scopes import Chain

LIMITS = Limits()
PLATFORM = Policy.from_dict({"version": 3, "defaults": [], "protected": []})
# The names the issue listed, every one of which reached members' tasks.
LISTED = ["HF_ENDPOINT", "WANDB_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
          "https_proxy", "no_proxy", "all_proxy", "NO_PROXY", "ALL_PROXY", "PIP_FIND_LINKS",
          "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "PATH", "CC", "CXX",
          "OMPI_MCA_plm_rsh_agent", "PAGER", "LESSOPEN", "MAKEFILES", "NCCL_CONF_FILE",
          "HOSTALIASES", "TORCHINDUCTOR_CACHE_DIR", "MLFLOW_TRACKING_URI", "CONDA_CHANNELS",
          "NPM_CONFIG_REGISTRY", "EDITOR", "VISUAL", "TORCH_HOME", "HF_HOME",
          "TRANSFORMERS_CACHE", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "SSH_ASKPASS",
          "AWS_ENDPOINT_URL_S3", "TRITON_PTXAS_PATH"]


def allowing(*pairs: tuple[str, str], version: int = 4) -> Policy:
    return Policy.from_dict({"version": version, "defaults": [], "protected": [],
                             "endpoint_allowances": [{"project": p, "name": n, "reason": "mirror"}
                                                     for p, n in pairs]})


def draft(*defaults: tuple[str, str], **data: Any) -> dict[str, Any]:
    return {"defaults": [{"name": n, "value": v} for n, v in defaults], "protected": [], **data}


def refused(problems: list[Any]) -> dict[str, Any]:
    return {p.variable: p for p in problems if p.rule == "layer.endpoint_variable"}


def test_every_default_entry_says_what_it_does_and_where_that_is_documented() -> None:
    for pattern, why in DEFAULT.items():
        assert len(why) > 20 and why.endswith(")"), pattern


def test_no_entry_repeats_a_start_up_hook() -> None:
    for pattern in DEFAULT:
        assert pattern not in HOOKS and DEFAULT_HOOKS.match(pattern) is None, pattern
    # pip's index, the trust stores, git's commands and NCCL's plugins stay hooks.
    for hook in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE",
                 "CURL_CA_BUNDLE", "GIT_SSH_COMMAND", "GIT_ASKPASS", "NCCL_NET_PLUGIN"):
        assert DEFAULT_HOOKS.match(hook) and DEFAULT_ENDPOINTS.match(hook) is None


@pytest.mark.parametrize("name", LISTED)
def test_a_project_default_of_each_is_refused_with_the_rule_the_variable_and_why(
        name: str) -> None:
    problems = check_scope_policy(draft((name, "https://evil.example/")), Chain.of(PLATFORM),
                                  LIMITS, project="vision")
    found = refused(problems)
    assert list(found) == [name], problems
    problem = found[name]
    assert problem.field == "defaults[0].value"
    assert name in problem.message and str(DEFAULT_ENDPOINTS.why(name)) in problem.message
    assert "credentials" in problem.message and "endpoint_allowances" in problem.message


def test_every_default_entry_is_refused_as_a_project_default() -> None:
    names = [pattern.replace("*", "S3") for pattern in DEFAULT]
    data = draft(*((name, "https://evil.example/") for name in names))
    found = refused(check_scope_policy(data, PLATFORM, LIMITS, project="vision"))
    assert sorted(found) == sorted(names)


def test_every_one_is_named_at_once_and_a_protected_value_counts_a_reservation_does_not() -> None:
    data = draft(("HF_ENDPOINT", "https://hub.evil"), ("PATH", "/data/bin:/usr/bin"),
                 ("LR", "0.1"),
                 protected=[{"name": "https_proxy", "value": "http://evil:3128", "reason": "r"},
                            {"name": "WANDB_BASE_URL", "reason": "members may not redirect"}])
    problems = check_scope_policy(data, PLATFORM, LIMITS, project="vision")
    assert {(p.variable, p.field) for p in problems} == {
        ("HF_ENDPOINT", "defaults[0].value"), ("PATH", "defaults[1].value"),
        ("https_proxy", "protected[0].value")}


def test_names_are_case_sensitive() -> None:
    assert DEFAULT_ENDPOINTS.match("https_proxy") == "https_proxy"
    for other in ("Https_Proxy", "path", "Path", "HF_ENDPOINTS", "MY_PATH", "CCACHE_DIR"):
        assert DEFAULT_ENDPOINTS.match(other) is None, other


def test_the_platform_policy_may_set_them() -> None:
    data = draft(("HF_ENDPOINT", "https://hub.internal"), ("HTTPS_PROXY", "http://proxy:3128"),
                 ("PATH", "/opt/tools/bin:/usr/bin"))
    assert check_policy(data, LIMITS) == []
    platform = Policy.from_dict({**data, "version": 2})
    project = Policy.from_dict({"version": 1, "scope": "project:vision", "defaults": [],
                                "protected": []})
    result = resolve([], platform, project)
    assert result.ok and result.warnings == []
    assert result.as_env()["HF_ENDPOINT"] == "https://hub.internal"
    assert project_conflicts({"vision": project}, platform, LIMITS) == []


def test_an_allowance_lets_exactly_the_allowed_names_through_for_exactly_that_project() -> None:
    platform = allowing(("vision", "HF_ENDPOINT"), ("audio", "WANDB_BASE_URL"))
    data = draft(("HF_ENDPOINT", "https://hub.vision"), ("WANDB_BASE_URL", "https://wb.vision"),
                 ("https_proxy", "http://vision:3128"))
    assert set(refused(check_scope_policy(data, platform, LIMITS, project="vision"))) == {
        "WANDB_BASE_URL", "https_proxy"}
    assert set(refused(check_scope_policy(data, platform, LIMITS, project="audio"))) == {
        "HF_ENDPOINT", "https_proxy"}
    # A project named by no allowance, or a draft whose project is unknown: nothing allowed.
    assert set(refused(check_scope_policy(data, platform, LIMITS, project="speech"))) == {
        "HF_ENDPOINT", "WANDB_BASE_URL", "https_proxy"}
    assert set(refused(check_scope_policy(data, platform, LIMITS))) == {
        "HF_ENDPOINT", "WANDB_BASE_URL", "https_proxy"}
    # The stored version's own scope names its project when the caller does not.
    stored = Policy.from_dict({**data, "scope": "project:vision", "version": 1}).to_dict()
    assert set(refused(check_scope_policy(stored, platform, LIMITS))) == {
        "WANDB_BASE_URL", "https_proxy"}


def test_an_allowed_value_reaches_the_task_and_an_unallowed_one_is_withheld() -> None:
    vision = stored("vision", ("HF_ENDPOINT", "https://hub.vision"),
                    ("WANDB_BASE_URL", "https://wb.vision"))
    result = resolve([], allowing(("vision", "HF_ENDPOINT")), vision)
    env = result.as_env()
    assert env["HF_ENDPOINT"] == "https://hub.vision" and "WANDB_BASE_URL" not in env
    assert [(w.rule, w.variable) for w in result.warnings] == [
        ("policy.endpoint_variable", "WANDB_BASE_URL")]


def stored(project: str, *defaults: tuple[str, str], **data: Any) -> Policy:
    """A version saved before the rule (nothing checked it)."""
    return Policy.from_dict({**draft(*defaults, **data), "version": 7,
                             "scope": f"project:{project}"})


def resolve(user: list[EnvVar], *chain: Policy, pinned: list[dict[str, Any]] | None = None,
            hooks: StartupHooks = DEFAULT_HOOKS) -> Resolution:
    return resolve_scopes(user, chain, platform_env("t1", "job", 1, chain[0].version),
                          TaskFacts(project="vision"), hooks, pinned=pinned or ())


def test_a_stored_old_version_is_withheld_with_a_warning_and_its_reservation_kept() -> None:
    old = stored("vision", ("HF_ENDPOINT", "https://hub.evil"), ("LR", "0.1"),
                 protected=[{"name": "PATH", "value": "/data/bin:/usr/bin", "reason": "tools"}])
    result = resolve([], PLATFORM, old)
    env = result.as_env()
    assert "HF_ENDPOINT" not in env and "PATH" not in env and env["LR"] == "0.1"
    warnings = {str(w.variable): w for w in result.warnings}
    assert set(warnings) == {"HF_ENDPOINT", "PATH"}
    for name, warning in warnings.items():
        assert warning.rule == "policy.endpoint_variable"
        assert "project vision's policy v7" in warning.message
        assert str(DEFAULT_ENDPOINTS.why(name)) in warning.message
    # Members still cannot set the name the entry protected.
    mine = resolve([EnvVar("PATH", "/home/me/bin")], PLATFORM, old)
    assert [(e.rule, e.variable) for e in mine.errors] == [("policy.protected", "PATH")]
    # And the platform's next save names the project whose stored version does it.
    conflicts = project_conflicts({"vision": old}, PLATFORM, LIMITS)
    assert [c.variables() for c in conflicts] == [["HF_ENDPOINT", "PATH"]]


def test_withdrawing_an_allowance_withholds_the_value_from_the_next_task_and_names_it() -> None:
    vision = stored("vision", ("HF_ENDPOINT", "https://hub.vision"))
    assert resolve([], allowing(("vision", "HF_ENDPOINT")), vision).warnings == []
    withdrawn = allowing(version=5)
    result = resolve([], withdrawn, vision)
    assert "HF_ENDPOINT" not in result.as_env()
    assert [w.variable for w in result.warnings] == ["HF_ENDPOINT"]
    assert [c.project for c in project_conflicts({"vision": vision}, withdrawn, LIMITS)] == [
        "vision"]


def test_a_pinned_rerun_does_not_bring_back_a_withheld_project_value() -> None:
    """A revision resolved before the rule kept the project's value; rerunning it pinned
    must not inject it again.  The platform's own pinned value stays."""
    pinned = [{"name": "HF_ENDPOINT", "value": "https://hub.evil", "secret": False,
               "scope": "project:vision", "policy_version": 2},
              {"name": "BASH_ENV", "value": "/data/rc", "secret": False,
               "scope": "project:vision", "policy_version": 2},
              {"name": "PATH", "value": "/opt/bin:/usr/bin", "secret": False,
               "scope": "platform", "policy_version": 1},
              {"name": "LR", "value": "0.1", "secret": False, "scope": "project:vision",
               "policy_version": 2}]
    result = resolve([], PLATFORM, stored("vision"), pinned=pinned)
    env = result.as_env()
    assert "HF_ENDPOINT" not in env and "BASH_ENV" not in env
    assert env["PATH"] == "/opt/bin:/usr/bin" and env["LR"] == "0.1"
    assert {(w.rule, w.variable) for w in result.warnings} == {
        ("policy.endpoint_variable", "HF_ENDPOINT"), ("policy.startup_hook", "BASH_ENV")}
    allowed = resolve([], allowing(("vision", "HF_ENDPOINT")), stored("vision"), pinned=pinned)
    assert allowed.as_env()["HF_ENDPOINT"] == "https://hub.evil"


def test_a_user_may_set_one_in_their_own_task() -> None:
    result = resolve([EnvVar("HF_ENDPOINT", "https://my.mirror")], PLATFORM, stored("vision"))
    assert result.ok and result.as_env()["HF_ENDPOINT"] == "https://my.mirror"


def test_a_name_the_platform_protects_is_refused_once_for_that() -> None:
    platform = Policy.from_dict({"version": 1, "defaults": [], "protected": [
        {"name": "HTTPS_PROXY", "value": "http://proxy:3128", "reason": "egress"}]})
    problems = check_scope_policy(draft(("HTTPS_PROXY", "http://mine")), platform, LIMITS,
                                  project="vision")
    assert [(p.rule, p.variable) for p in problems] == [
        ("layer.platform_protected", "HTTPS_PROXY")]


def test_the_list_is_a_setting_in_the_hooks_grammar() -> None:
    assert EndpointVariables.from_setting("").patterns == DEFAULT
    assert StartupHooks.from_setting("default").endpoints == DEFAULT_ENDPOINTS
    mine = StartupHooks.from_setting("default", "default, MY_API_URL, CORP_*, -PATH")
    assert mine.endpoints.match("MY_API_URL") == "MY_API_URL"
    assert mine.endpoints.match("CORP_REGISTRY") == "CORP_*"
    assert mine.endpoints.match("PATH") is None and mine.endpoints.match("HF_ENDPOINT")
    assert mine.match("BASH_ENV") == "BASH_ENV"  # the hooks are their own setting
    problems = check_scope_policy(draft(("CORP_REGISTRY", "x"), ("PATH", "/bin")), PLATFORM,
                                  LIMITS, mine, project="vision")
    assert [(p.rule, p.variable) for p in problems] == [
        ("layer.endpoint_variable", "CORP_REGISTRY")]
    assert "endpoint_variables setting" in problems[0].message


def test_only_the_platform_may_allow_and_an_allowance_names_one_project_and_one_name() -> None:
    # A project's policy granting itself one is refused.
    problems = check_scope_policy(draft(endpoint_allowances=[
        {"project": "vision", "name": "HF_ENDPOINT"}]), PLATFORM, LIMITS, project="vision")
    assert [p.rule for p in problems] == ["layer.endpoint_allowance"]
    # The platform's own are checked for shape, every problem at once.
    problems = check_policy(draft(endpoint_allowances=[
        {"project": "vision", "name": "HF_*"}, {"project": "Not A Project", "name": "PATH"},
        {"project": "vision", "name": "PATH"}, {"project": "vision", "name": "PATH"}, "x"]),
        LIMITS)
    assert {(p.rule, p.field) for p in problems} == {
        ("policy.endpoint_allowance", "endpoint_allowances[0].name"),
        ("policy.endpoint_allowance", "endpoint_allowances[1].project"),
        ("policy.endpoint_allowance", "endpoint_allowances[3]"),
        ("policy.endpoint_allowance", "endpoint_allowances[4]")}


def test_an_allowance_never_lets_a_start_up_hook_through() -> None:
    platform = allowing(("vision", "BASH_ENV"), ("vision", "PIP_INDEX_URL"))
    problems = check_scope_policy(draft(("BASH_ENV", "/x"), ("PIP_INDEX_URL", "https://i")),
                                  platform, LIMITS, project="vision")
    assert {(p.rule, p.variable) for p in problems} == {
        ("layer.startup_hook", "BASH_ENV"), ("layer.startup_hook", "PIP_INDEX_URL")}
    result = resolve([], platform, stored("vision", ("BASH_ENV", "/x")))
    assert "BASH_ENV" not in result.as_env()


def test_an_allowance_names_a_project_as_projects_are_named() -> None:
    assert PROJECT_NAME.pattern == NAME.pattern


def test_a_policy_without_allowances_reads_as_before() -> None:
    assert "endpoint_allowances" not in PLATFORM.to_dict()
    kept = allowing(("vision", "HF_ENDPOINT"))
    assert Policy.from_dict(kept.to_dict()) == kept
    assert kept.allowed_endpoints("vision") == {"HF_ENDPOINT"}
    assert kept.allowed_endpoints("audio") == frozenset()
