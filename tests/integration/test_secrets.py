"""Secrets reach the task and nowhere else: not a response, a log line or a Redis key."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
import redis

from shared.policy.store import PolicyStore
from shared.redis_conn import connect
from shared.secrets import Cipher, new_key
from shared.store.tasks import TaskStore
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

USER_SECRET = "hf_user-secret-4f9a1c77e2"
POLICY_SECRET = "wandb-platform-key-93be51d0"
CHECK = """
import hashlib, os, sys
for name, want in (("HF_TOKEN", sys.argv[1]), ("WANDB_API_KEY", sys.argv[2])):
    got = hashlib.sha256(os.environ[name].encode()).hexdigest()
    print(name, "match" if got == want else "MISMATCH")
print("printing the secret on purpose:", os.environ["HF_TOKEN"])
"""


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def every_redis_byte(client: redis.Redis) -> bytes:
    """Every key and value, whatever its type, as raw bytes."""
    out = []
    for key in client.scan_iter(count=1000):
        out.append(key)
        kind = client.type(key)
        if kind == b"string":
            out.append(client.get(key) or b"")
        elif kind == b"hash":
            out += [b for kv in client.hgetall(key).items() for b in kv]
        elif kind == b"list":
            out += client.lrange(key, 0, -1)
        elif kind == b"set":
            out += list(client.smembers(key))
        elif kind == b"zset":
            out += client.zrange(key, 0, -1)
        elif kind == b"stream":
            out += [b for _, fields in client.xrange(key) for kv in fields.items() for b in kv]
        out.append(client.dump(key) or b"")
    return b"\n".join(out)


def test_secrets_reach_the_process_and_are_never_stored_or_shown_in_clear(
        stack: Stack):
    responses: list[str] = []

    def call(method: str, path: str, **kwargs):
        resp = stack.call(method, path, **kwargs)
        responses.append(resp.text)
        return resp

    call("PUT", "/api/v1/policy", json={"protected": [], "defaults": [
        {"name": "WANDB_API_KEY", "value": POLICY_SECRET, "secret": True}]})
    alice = stack.new_token("alice")
    resp = call("POST", "/api/v1/tasks", token=alice, json={
        "name": "with-secrets",
        "steps": [["python3", "-c", CHECK, sha(USER_SECRET), sha(POLICY_SECRET)]],
        "env": [{"name": "HF_TOKEN", "value": USER_SECRET, "secret": True},
                {"name": "API_TOKEN", "value": "not-secret-but-named-like-one"}]})
    task = resp.json()
    doc = stack.wait(task["id"])
    for path in (task["url"], task["url"] + "/logs", "/api/v1/tasks", "/api/v1/policy",
                 "/api/v1/policy/versions/1", "/api/v1/audit"):
        call("GET", path, token=stack.admin_token)
    call("GET", task["url"], token=alice)
    call("POST", "/api/v1/env/preview", token=alice,
         json={"env": [{"name": "HF_TOKEN", "value": USER_SECRET, "secret": True}]})

    assert doc["status"] == "succeeded", doc
    shown = {v["name"]: v for v in doc["resolved_env"]}
    assert shown["HF_TOKEN"]["value"] == shown["WANDB_API_KEY"]["value"] == "********"
    assert [w["variable"] for w in doc["warnings"]] == ["API_TOKEN"]  # looks secret, is not
    logs = stack.call("GET", task["url"] + "/logs").text
    assert "printing the secret on purpose: [secret]" in logs
    assert "HF_TOKEN match\nWANDB_API_KEY match\n" in logs  # the step saw both, exactly
    haystacks = {
        "API responses": "\n".join(responses).encode(),
        "process logs": stack.logs.read_bytes(),
        "Redis": every_redis_byte(stack.redis),
    }
    for where, text in haystacks.items():
        for secret in (USER_SECRET, POLICY_SECRET):
            assert secret.encode() not in text, f"{secret} found in {where}"


def rotate(stack: Stack, keys: str) -> str:
    env = {**os.environ, **stack.env, "TASKENV_SECRET_KEYS": keys}
    done = subprocess.run([sys.executable, "-m", "api.cli", "rotate-secrets"], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stderr


def test_rotation_reseals_every_revision_and_policy_version(stack: Stack):
    stack.set_policy({"protected": [], "defaults": [
        {"name": "WANDB_API_KEY", "value": POLICY_SECRET, "secret": True}]})
    task = stack.create({"name": "rotated", "steps": [["true"]],
                         "env": [{"name": "HF_TOKEN", "value": USER_SECRET, "secret": True}]})
    stack.wait(task["id"])
    resp = stack.call("PATCH", task["url"] + "/env", json={
        "set": [{"name": "HF_TOKEN", "value": USER_SECRET + "-2", "secret": True}]})
    assert resp.status_code == 202, resp.text
    stack.wait(task["id"], revision=2)
    old, new = stack.env["TASKENV_SECRET_KEYS"], new_key()

    try:
        assert "policy versions" in rotate(stack, f"{new},{old}")
        # The old key is dropped: every sealed value still opens with the new one alone.
        client = connect(stack.env["TASKENV_REDIS_URL"])
        prefix, cipher = stack.env["TASKENV_KEY_PREFIX"], Cipher([new])
        tasks, policies = TaskStore(client, prefix, cipher), PolicyStore(client, prefix, cipher)
        values = [tasks.revision(task["id"], n)["env"][0]["value"] for n in (1, 2)]
        assert values == [USER_SECRET, USER_SECRET + "-2"]
        assert tasks.revision(task["id"], 2)["resolved"]
        assert policies.versions()
        for version in policies.versions():
            assert policies.get(version).defaults[0].value == POLICY_SECRET
        assert policies.current().defaults[0].value == POLICY_SECRET
    finally:
        rotate(stack, f"{old},{new}")  # the running stack knows only the old key
