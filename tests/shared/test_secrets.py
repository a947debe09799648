"""How secret values are shown: masked in responses, left empty in forms."""

from __future__ import annotations

from shared.env.envlist import EnvVar
from shared.policy.model import Policy, Protected
from shared.secrets import MASK, blanked, masked, masked_policy


def test_a_secret_entry_is_masked_and_its_sealed_form_left_out() -> None:
    assert masked({"name": "T", "sealed": "gAAAA-ciphertext", "secret": True}) == {
        "name": "T", "value": MASK, "secret": True}
    assert masked({"name": "T", "value": "clear-1234", "secret": True})["value"] == MASK


def test_a_plain_entry_and_a_resolved_variable_keep_their_values() -> None:
    variable = {"name": "LR", "value": "0.1", "source": "user", "overrode": [], "secret": False}
    assert masked({"name": "LR", "value": "0.1"}) == {"name": "LR", "value": "0.1"}
    assert masked(variable) == variable


def test_a_policy_is_masked_but_a_reserved_name_gets_no_value() -> None:
    policy = Policy(defaults=(EnvVar("KEY", "k-123456", secret=True), EnvVar("DIR", "/d")),
                    protected=(Protected("TOKEN", "set here", "t-123456", secret=True),
                               Protected("GPUS", "the scheduler's", secret=True)))
    shown = masked_policy(policy.to_dict())
    assert [d["value"] for d in shown["defaults"]] == [MASK, "/d"]
    assert shown["protected"][0]["value"] == MASK and "value" not in shown["protected"][1]
    assert "k-123456" not in str(shown) and "t-123456" not in str(shown)


def test_a_form_shows_a_secret_field_empty() -> None:
    assert blanked({"name": "T", "value": "clear-1234", "secret": "on"}) == {
        "name": "T", "value": "", "secret": True}
    assert blanked({"name": "P", "reason": "r"}) == {
        "name": "P", "reason": "r", "value": "", "secret": False}
    assert blanked({"name": "D", "value": "/d"})["value"] == "/d"
