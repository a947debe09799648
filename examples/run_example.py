"""Drive the linear-regression example against a running taskenv (``make run``).

Sets the example policy, shows a rejected task, runs the real one and prints its
logs.  Uses only the public HTTP API.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE = os.environ.get("TASKENV_URL", f"http://127.0.0.1:{os.environ.get('TASKENV_PORT', '8080')}")


def token() -> str:
    """TASKENV_TOKEN, else the admin token ``make run`` wrote to var/admin.token."""
    if os.environ.get("TASKENV_TOKEN"):
        return os.environ["TASKENV_TOKEN"]
    return (HERE.parent / "var" / "admin.token").read_text().strip()


def call(method: str, path: str, body: object | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method,  # noqa: S310
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {token()}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - a local URL
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def load(name: str) -> dict:
    """One of the example's JSON files; a step argument ``{file:NAME}`` becomes NAME's text.

    Steps run in a sandbox that sees none of this machine's files: scripts travel in the task.
    """
    body = json.loads((HERE / "linear-regression" / name).read_text())
    for step in body.get("steps", []):
        step[:] = [inline(arg) for arg in step]
    return body


def inline(arg: str) -> str:
    if arg.startswith("{file:") and arg.endswith("}"):
        return (HERE / "linear-regression" / arg[len("{file:"):-1]).read_text()
    return arg


def run(task: dict) -> dict:
    status, body = call("POST", "/api/v1/tasks", task)
    assert status == 202, body
    url = json.loads(body)["url"]
    while True:
        doc = json.loads(call("GET", url)[1])
        if doc["status"] in ("succeeded", "failed", "rejected"):
            return doc
        time.sleep(0.2)


def main() -> int:
    status, body = call("PUT", "/api/v1/policy", load("policy.json"))
    print(f"policy: HTTP {status}, version {json.loads(body).get('version')}")
    locked = run(load("task-sets-locked.json"))
    print(f"task setting a locked variable: {locked['status']}")
    for error in locked["errors"]:
        print(f"  {error['variable']}: {error['message']}")
    doc = run(load("task.json"))
    print(f"training task: {doc['status']} (policy v{doc['policy_version']})")
    for var in doc["resolved_env"]:
        print(f"  {var['name']:<22} {var['source']:<9} {var['value']!r}")
    print(call("GET", doc["url"] + "/logs")[1])
    return 0 if doc["status"] == "succeeded" and locked["status"] == "rejected" else 1


if __name__ == "__main__":
    sys.exit(main())
