"""A task's env over its life, and a project's policy, in a real headless Chromium on the stack.

A user changes a variable of a running task in the env editor and chooses "Save and
restart": the page follows revision 2 to ``running`` with the new value in its resolved
env and in its output, and the diff page shows the variable's old and new value.  A
project maintainer previews the impact of a policy draft before saving it; a member
sees a project rule's violation beside the row on the new-task form before submitting,
fixes it, and follows the task to ``succeeded``.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from tests.integration.conftest import Stack
from tests.integration.test_browser import CHROMIUM_ARGS, chromium, context, log_in, submit

pytestmark = [pytest.mark.integration, pytest.mark.browser]
__all__ = ["CHROMIUM_ARGS", "chromium", "context"]  # the browser fixtures

LIVE_WAIT_MS = 90_000  # the machine is shared: launching a step can take a while
RULE = "a learning rate below 1, written 0.x"


def signed_in(context: BrowserContext, stack: Stack, token: str) -> Page:
    page = context.new_page()
    log_in(page, stack, token)
    return page


def env_row(page: Page, name: str) -> Locator:
    """The env editor's row of one stored variable (its name is shown, not editable)."""
    return page.locator("form.env-form tbody tr").filter(
        has=page.get_by_text(name, exact=True))


def resolved_value(page: Page, name: str) -> Locator:
    row = page.locator("#resolved tbody tr").filter(has=page.get_by_text(name, exact=True))
    return row.locator("td").nth(1)


def revision_cells(page: Page, revision: int) -> Locator:
    row = page.locator("#revisions tbody tr").filter(
        has=page.get_by_role("link", name=str(revision), exact=True))
    return row.locator("td")


# --- change a running task's env and restart ------------------------------------------

def test_a_running_task_restarted_with_a_changed_variable_runs_revision_2_and_shows_the_diff(
        stack: Stack, context: BrowserContext) -> None:
    token = stack.new_token("rhea")
    task = stack.create({"name": "restart-me", "steps": [["env"], ["sleep", "60"]],
                         "env": [{"name": "LEARNING_RATE", "value": "0.01"},
                                 {"name": "EPOCHS", "value": "3"}]}, token=token)
    try:
        page = signed_in(context, stack, token)
        page.goto(f"{stack.base}/ui/tasks/{task['id']}")
        expect(page.locator("#status")).to_have_text("running", timeout=LIVE_WAIT_MS)
        expect(page.locator("#log")).to_contain_text("LEARNING_RATE=0.01", timeout=LIVE_WAIT_MS)

        env_row(page, "LEARNING_RATE").get_by_role("textbox", name="value").fill("0.02")
        submit(page, "Save and restart")
        expect(page.locator(".flash.ok")).to_contain_text("revision 2")

        expect(page.locator("#revision")).to_have_text("2", timeout=LIVE_WAIT_MS)
        expect(page.locator("#status")).to_have_text("running", timeout=LIVE_WAIT_MS)
        expect(resolved_value(page, "LEARNING_RATE")).to_have_text("0.02")
        expect(resolved_value(page, "EPOCHS")).to_have_text("3")
        expect(page.get_by_role("heading", name="Logs revision 2")).to_be_visible()
        expect(page.locator("#log")).to_contain_text("LEARNING_RATE=0.02", timeout=LIVE_WAIT_MS)
        assert "LEARNING_RATE=0.01" not in page.inner_text("#log")
        # One run at a time: the first was stopped before the second was launched.
        expect(revision_cells(page, 1).nth(1)).to_have_text("cancelled")
        expect(revision_cells(page, 2).nth(2)).to_have_text("restart")

        # The labels wrap the selects, so each select's name ends with its chosen revision.
        page.get_by_role("combobox", name=re.compile(r"^From revision")).select_option("1")
        page.get_by_role("combobox", name=re.compile(r"^to\b")).select_option("2")
        submit(page, "Show the diff")
        expect(page.locator("h1")).to_contain_text("revision 1 → 2")
        changed = page.locator("#diff tbody tr.changed").filter(
            has=page.get_by_text("LEARNING_RATE", exact=True))
        expect(changed.locator("td")).to_have_text(["~", "LEARNING_RATE", "0.01", "0.02", "user"])
        # Besides it, only what the platform sets per revision differs.
        others = page.locator("#diff tbody tr").filter(
            has_not=page.get_by_text("LEARNING_RATE", exact=True))
        assert {others.nth(i).locator("td").nth(4).inner_text()
                for i in range(others.count())} <= {"platform"}
        expect(page.locator("#diff")).not_to_contain_text("EPOCHS")

        with page.expect_navigation():
            page.get_by_role("link", name="restart-me").click()
        page.get_by_text("Cancel this task…").click()
        submit(page, "Yes, cancel it")
        expect(page.locator("#status")).to_have_text("cancelled")
    finally:  # nothing is left running, whatever failed above
        stack.call("POST", f"/api/v1/tasks/{task['id']}/cancel", token=token)


# --- a project's policy, previewed, saved and applied on the form ---------------------

def make_project(stack: Stack) -> tuple[str, str]:
    """Project "vision": one maintainer, one member with a finished task, and a rule."""
    maintainer, member = stack.new_token("maya"), stack.new_token("milo")
    made = stack.call("POST", "/api/v1/projects",
                      json={"name": "vision", "members": ["milo"], "maintainers": ["maya"]})
    assert made.status_code == 201, made.text
    rule = {"name": "LEARNING_RATE", "pattern": r"0\.[0-9]+", "description": RULE}
    put = stack.call("PUT", "/api/v1/projects/vision/policy",
                     json={"defaults": [], "protected": [], "rules": [rule]})
    assert put.status_code == 200, put.text
    earlier = stack.create({"name": "earlier", "steps": [["true"]], "project": "vision",
                            "env": [{"name": "LEARNING_RATE", "value": "0.1"}]}, token=member)
    assert stack.wait(earlier["id"])["status"] == "succeeded"
    return maintainer, member


def test_a_maintainer_previews_and_saves_and_a_member_fixes_a_rule_violation_before_submit(
        stack: Stack, chromium: Browser) -> None:
    maintainer, member = make_project(stack)

    editor_ctx = chromium.new_context(viewport={"width": 1280, "height": 900})
    editor = signed_in(editor_ctx, stack, maintainer)
    editor.goto(stack.base + "/ui/projects")
    with editor.expect_navigation():
        editor.get_by_role("link", name="edit the policy").click()
    expect(editor.locator("h1")).to_have_text("Policy of project vision")
    editor.fill("[name=defaults-0-name]", "BATCH_SIZE")
    editor.fill("[name=defaults-0-value]", "64")
    submit(editor, "Preview impact")
    impact = editor.get_by_role("status").filter(
        has=editor.get_by_role("heading", name="If this draft is saved"))
    expect(impact).to_contain_text("Tasks considered: 1")
    expect(impact).to_contain_text("would be rejected: 0")
    change = impact.get_by_role("table", name="Value changes").locator("tbody tr")
    expect(change).to_have_count(1)
    expect(change.locator("td")).to_have_text(["BATCH_SIZE", "(unset)", "64", "1", "1"])
    assert stack.call("GET", "/api/v1/projects/vision/policy").json()["version"] == 1

    submit(editor, "Confirm and save")
    expect(editor.locator(".flash.ok")).to_contain_text("Policy version 2 saved")
    expect(editor.get_by_text(re.compile(r"^Version 2, by maya"))).to_be_visible()
    editor_ctx.close()

    member_ctx = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = signed_in(member_ctx, stack, member)
    page.goto(stack.base + "/ui/tasks/new")
    page.get_by_label("Name", exact=True).fill("ruled")
    page.get_by_label("Project").select_option("vision")
    page.fill("#steps", "sh -c 'echo LEARNING_RATE=$LEARNING_RATE BATCH_SIZE=$BATCH_SIZE'")
    page.fill("[name=env-0-name]", "LEARNING_RATE")
    page.fill("[name=env-0-value]", "fast")

    row = page.locator("#env-rows tr").first
    expect(row.locator(".live-problems")).to_contain_text(RULE, timeout=LIVE_WAIT_MS)
    expect(row.locator(".live-problems")).to_contain_text("rule.pattern")
    expect(page.locator("#preview-state")).to_contain_text("Would be rejected")
    listed = stack.call("GET", "/api/v1/tasks?limit=100", token=member).json()["items"]
    assert [t["name"] for t in listed] == ["earlier"]  # nothing was submitted

    page.fill("[name=env-0-value]", "0.05")
    expect(row.locator(".live-problems")).to_have_count(0, timeout=LIVE_WAIT_MS)
    expect(page.locator("#preview-state")).to_contain_text("Would be accepted")
    expect(page.locator("#preview-env tbody tr").filter(has_text="BATCH_SIZE")
           ).to_contain_text("project:vision")

    submit(page, "Create task")
    expect(page.locator("h1")).to_have_text("ruled")
    expect(page.locator("#status")).to_have_text("succeeded", timeout=LIVE_WAIT_MS)
    expect(page.locator("#log")).to_contain_text("LEARNING_RATE=0.05 BATCH_SIZE=64",
                                                 timeout=LIVE_WAIT_MS)
    member_ctx.close()
