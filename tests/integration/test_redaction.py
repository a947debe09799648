"""A step that prints its secrets in pieces never gets them into the task's logs."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

PEM = ("-----BEGIN PRIVATE KEY-----\n"
       "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7kq9vXg3nT0Zb\n"
       "1cZl0dWlq8Yx1c2yQxJm0s8M7bqk4l3ZpC1dQ9fGv2xW0sK8mZ3nR5tYb7uJ1oPq\n"
       "-----END PRIVATE KEY-----\n")
POLICY_SECRET = "first-line-of-a-policy-secret\nsecond-line-of-it"
# Prints each secret cut in two, flushing between the halves (so they leave the sandbox
# in separate writes), then a single line of the key on its own.
PRINT_IN_PIECES = """
import os, sys, time
for name in ("SSH_KEY", "REGISTRY_PASSWORD"):
    value = os.environ[name]
    half = len(value) // 2
    sys.stdout.write("start " + value[:half]); sys.stdout.flush(); time.sleep(0.3)
    sys.stdout.write(value[half:] + " end\\n"); sys.stdout.flush()
print("one line:", os.environ["SSH_KEY"].splitlines()[1], flush=True)
print("done", flush=True)
"""


def fragments(secret: str) -> list[str]:
    """Pieces of a secret long enough to mean it leaked (its long lines, its halves)."""
    half = len(secret) // 2
    return [secret, secret[:half], secret[half:],
            *(line for line in secret.splitlines() if len(line) >= 8)]


def test_a_pem_and_a_policy_secret_printed_in_pieces_never_reach_the_logs(stack: Stack):
    stack.set_policy({"protected": [], "defaults": [
        {"name": "REGISTRY_PASSWORD", "value": POLICY_SECRET, "secret": True}]})
    alice = stack.new_token("alice")
    task = stack.create({"name": "prints-its-key", "steps": [["python3", "-c", PRINT_IN_PIECES]],
                         "env": [{"name": "SSH_KEY", "value": PEM, "secret": True}]},
                        token=alice)
    doc = stack.wait(task["id"])
    logs = stack.call("GET", task["url"] + "/logs", token=alice).text

    assert doc["status"] == "succeeded", doc
    assert logs.count("start [secret] end\n") == 2, logs
    assert "one line: [secret]\n" in logs and logs.endswith("done\n"), logs
    for secret in (PEM, POLICY_SECRET):
        for piece in fragments(secret):
            assert piece not in logs, f"{piece!r} leaked into the logs"


def test_a_secret_too_short_to_hide_is_refused_at_once(stack: Stack):
    resp = stack.call("POST", "/api/v1/tasks", json={
        "name": "short", "steps": [["true"]],
        "env": [{"name": "PIN", "value": "abc", "secret": True}]})
    assert resp.status_code == 422, resp.text
    assert [(p["rule"], p["variable"], p["limit"]) for p in resp.json()["errors"]] == [
        ("secret.too_short", "PIN", 8)]


# Prints the secret the ways a step gets it past an exact match: base64 after prefixes of
# each length, URL-encoded, inside a JSON document of the env.
PRINT_ENCODED = """
import base64, json, os, urllib.parse
value = os.environ["API_PASSWORD"]
for prefix in ("", "u:", "user:"):
    print("b64", base64.b64encode((prefix + value).encode()).decode(), flush=True)
print("url", urllib.parse.quote(value, safe=""), flush=True)
print("json", json.dumps({"API_PASSWORD": value}), flush=True)
print("done", flush=True)
"""
ENCODABLE = 'pa"ss/w0rd +&é\\tail-0123'


def test_a_secret_printed_encoded_never_reaches_the_logs(stack: Stack):
    import base64
    import json
    import urllib.parse

    alice = stack.new_token("alice")
    task = stack.create({"name": "prints-encoded", "steps": [["python3", "-c", PRINT_ENCODED]],
                         "env": [{"name": "API_PASSWORD", "value": ENCODABLE, "secret": True}]},
                        token=alice)
    doc = stack.wait(task["id"])
    logs = stack.call("GET", task["url"] + "/logs", token=alice).text

    assert doc["status"] == "succeeded", doc
    assert logs.endswith("done\n") and logs.count("[secret]") >= 5, logs
    shown = [base64.b64encode(ENCODABLE.encode()).decode()[:12],
             urllib.parse.quote(ENCODABLE, safe=""), json.dumps(ENCODABLE)[1:-1], ENCODABLE,
             base64.b64encode(ENCODABLE.encode()[2:]).decode()[4:16]]
    for form in shown:
        assert form not in logs, f"{form!r} leaked into the logs"
