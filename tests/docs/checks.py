"""What a reader sees after some blocks, checked (tests/docs/runner.py runs them).

A check is attached to a block by its document, the heading it is under and its place
among the command blocks under that heading (1 for the first).  A generator's part
before ``yield`` runs before the block, the rest after it; an assertion that fails is
a failure of the block.  Every key here must name a block (tests/docs/test_documents.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tests.docs.runner import Check, Run

CHECKS: dict[tuple[str, str, int], Check] = {}


def check(doc: str, heading: str, n: int = 1):  # type: ignore[no-untyped-def]
    def attach(function: Check) -> Check:
        CHECKS[(doc, heading, n)] = function
        return function
    return attach


@check("README.md", "Walk-through with curl")
def walkthrough_shows_each_revisions_output_and_runs_both_scripts(run: Run) -> None:
    task = run.var("TASK")
    assert re.fullmatch(r"[0-9a-f]{32}", task), f"TASK is {task!r}"
    patched = next((out for out in run.outputs if re.search(r'"revision":\s*2\b', out)), "")
    assert patched, "step 6: the PATCH's answer names revision 2"
    masked = r'"name":\s*"HF_TOKEN",\s*"secret":\s*true,\s*"value":\s*"\*{8}"'
    assert re.search(masked, run.output), "step 5: HF_TOKEN shows as ********"
    # What the reader saw: revision 1's output, both scripts', before the change of step 6
    # made revision 2 (which stops a revision still running), then revision 2's.
    first = run.output.index("prepare sees LEARNING_RATE=0.01")
    assert run.output.index("train sees [", first) < run.output.index("revision 2 succeeded")
    assert "prepare sees LEARNING_RATE=0.005" in run.output[run.output.index(patched):]
    doc = run.wait(task, revision=2)
    assert doc["status"] == "succeeded", doc
    revisions = run.api("GET", f"/api/v1/tasks/{task}/revisions").json()["items"]
    assert [r["state"] for r in revisions] == ["succeeded", "succeeded"], revisions
    logs = run.api("GET", f"/api/v1/tasks/{task}/logs").text
    assert "prepare sees LEARNING_RATE=0.005" in logs, logs
    assert "train sees" in logs and "HF_TOKEN" in logs and "1,2" in logs, logs
    assert "hf_example" not in run.output + logs  # the secret shows nowhere


@check("README.md", "Walk-through with curl", 2)
def example_runs_both_scripts_in_its_own_project(run: Run) -> Iterator[None]:
    platform = run.api("GET", "/api/v1/policy").json()
    yield
    out = run.output
    # After the walk-through the platform protects what the example's project would:
    # the project leaves those out, and the task that sets one is still refused.
    assert "CUDA_VISIBLE_DEVICES: protected by the platform already" in out, out
    assert "CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES is protected" in out, out
    training = next(line for line in out.splitlines() if line.startswith("training task"))
    assert "platform v" in training and "project examples v" in training, training
    seen = [line for line in out.splitlines() if "variables in my environment" in line]
    assert len(seen) == 2, out  # both scripts ran
    for line in seen:
        names = set(line.split(":", 2)[2].split())
        # defaults, the user's variables, the locked value and the platform's identity
        assert {"DATA_DIR", "NUM_SAMPLES", "LEARNING_RATE", "EPOCHS", "NCCL_P2P_DISABLE",
                "TASK_ID", "TASK_NAME", "TASK_ENV_REVISION"} <= names, line
        # nothing from the worker's own environment (its TASKENV_* settings, for one)
        assert not any(name.startswith("TASKENV_") for name in names), line
        assert "CUDA_VISIBLE_DEVICES" not in names, line
    assert "RUN_NOTE='$(HOME) `id` a;b — 数据 stays literal'" in out, out
    assert "mse=" in out, out
    assert run.api("GET", "/api/v1/policy").json() == platform, "the platform's policy changed"
    assert run.api("GET", "/api/v1/projects/examples/policy").json()["defaults"], "no defaults"
    status, again = run.reader.shell.run("make example")
    assert status == 0, again  # a second run works too


# docs/policy.md's worked example: the platform's policy it replaces, to compare with the
# one its last block puts back.
WORKED: dict[str, object] = {}


def policy_entries(policy: dict[str, object]) -> dict[str, object]:
    return {k: policy.get(k) for k in ("defaults", "protected", "rules", "on_conflict")}


@check("docs/policy.md", "A worked example")
def worked_example_keeps_the_platforms_policy(run: Run) -> Iterator[None]:
    WORKED["before"] = policy_entries(run.api("GET", "/api/v1/policy").json())
    yield
    saved = run.api("GET", "/api/v1/policy").json()
    assert [r["name"] for r in saved["rules"]] == ["NUM_WORKERS"], saved


@check("docs/policy.md", "A worked example", 2)
def worked_example_project_policy_without_a_protected_list_is_saved(run: Run) -> Iterator[None]:
    before = run.api("GET", "/api/v1/projects/vision/policy").json()["version"]
    yield
    assert "Missing data" not in run.output, run.output
    saved = run.api("GET", "/api/v1/projects/vision/policy").json()
    # The file gives no protected list: saved as an empty one, in one new version.
    assert (saved["version"], saved["protected"]) == (before + 1, []), saved
    assert [d["name"] for d in saved["defaults"]] == ["NCCL_DEBUG", "NCCL_IB_DISABLE"], saved
    assert [r["name"] for r in saved["rules"]] == ["DATA_ROOT"], saved


@check("docs/policy.md", "A worked example", 3)
def worked_example_preview_names_both_scopes_versions(run: Run) -> None:
    platform = run.api("GET", "/api/v1/policy").json()["version"]
    project = run.api("GET", "/api/v1/projects/vision/policy").json()["version"]
    assert f"policy: platform v{platform}, project vision v{project}" in run.output, run.output
    assert f"platform default (by project vision v{project})" in run.output, run.output


@check("docs/policy.md", "A worked example", 5)
def worked_example_puts_the_platforms_policy_back(run: Run) -> None:
    after = policy_entries(run.api("GET", "/api/v1/policy").json())
    assert after == WORKED["before"], (after, WORKED["before"])
