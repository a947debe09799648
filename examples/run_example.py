"""Drive the linear-regression example against a running taskenv (``make run``).

Runs in a project of its own, ``examples`` (made if missing), whose policy it sets:
the platform's policy is left as it is.  Shows a rejected task, runs the real one (its
two scripts travel with it as the task's files) and prints its logs.  Uses only the
public HTTP API, with an admin's token; the server is ``TASKENV_URL``, else
``http://127.0.0.1:$TASKENV_PORT`` (8080 by default), as for ``make run``.
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
    except (urllib.error.URLError, OSError) as err:
        raise SystemExit(f"cannot reach taskenv at {BASE} ({getattr(err, 'reason', err)}): "
                         "is `make run` going? Give its port as TASKENV_PORT (or the whole "
                         "address as TASKENV_URL), as make run was given it.") from None


PROJECT = "examples"


def load(name: str) -> dict:
    """One of the example's JSON files; a file's ``source`` (a path beside it) becomes its
    ``content``, as the CLI's task file does.  Steps run where none of this machine's
    files are: the scripts travel in the task."""
    body = json.loads((HERE / "linear-regression" / name).read_text())
    for file in body.get("files", []):
        if "source" in file:
            file["content"] = (HERE / "linear-regression" / file.pop("source")).read_text()
    return body


def own_project() -> None:
    """The example's project and its policy; the platform's policy is not touched."""
    # The admin of ``make run`` (var/admin.token, owner "admin") runs the tasks in it.
    status, body = call("POST", "/api/v1/projects", {"name": PROJECT, "members": ["admin"]})
    if status not in (201, 409):  # 409: made by an earlier run
        raise SystemExit(f"cannot make project {PROJECT}: HTTP {status} {body}")
    status, body = call("PUT", f"/api/v1/projects/{PROJECT}/policy",
                        without_platform_protected(load("policy.json")))
    if status != 200:
        raise SystemExit(f"cannot set project {PROJECT}'s policy: HTTP {status} {body}")
    print(f"project {PROJECT}: its policy is version {json.loads(body).get('version')} "
          "(the platform's policy is left as it is)")


def without_platform_protected(policy: dict) -> dict:
    """The project's policy less what the platform protects already: a project may not
    name a variable the platform protects (its protection holds in every project)."""
    status, body = call("GET", "/api/v1/policy")
    if status != 200:
        raise SystemExit(f"cannot read the platform's policy: HTTP {status} {body}")
    locked = {entry["name"] for entry in json.loads(body).get("protected", [])}
    for name in sorted(locked & {entry["name"] for entry in policy["protected"]}):
        print(f"{name}: protected by the platform already, so not by the project")
    return {**policy, "protected": [e for e in policy["protected"] if e["name"] not in locked]}


def versions(doc: dict) -> str:
    """The policy versions the task was resolved with, each named by its scope."""
    pinned = doc.get("policy_versions") or {"platform": doc.get("policy_version")}
    return ", ".join(f"{scope.replace(':', ' ')} v{version}"
                     for scope, version in sorted(pinned.items()))


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
    own_project()
    locked = run(load("task-sets-locked.json"))
    print(f"task setting a locked variable: {locked['status']}")
    for error in locked["errors"]:
        print(f"  {error['variable']}: {error['message']}")
    doc = run(load("task.json"))
    print(f"training task: {doc['status']} (policies: {versions(doc)})")
    for var in doc["resolved_env"]:
        print(f"  {var['name']:<22} {var['source']:<9} {var['value']!r}")
    print(call("GET", doc["url"] + "/logs")[1])
    return 0 if doc["status"] == "succeeded" and locked["status"] == "rejected" else 1


if __name__ == "__main__":
    sys.exit(main())
