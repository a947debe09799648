"""The console's everyday paths in a real headless Chromium, against the real stack.

A user picks revision 1 on a task page and sees revision 1 everywhere on it; follows a
running task whose log is on the first screen at 375 and 1280 px, with cancel but no
rerun beside it, and an env editor that fits a phone; watches a rejected task say why
nothing ran; lands on an unknown console page and gets a page, not JSON.  An admin
deletes a policy row and reads a long reason whole; the insights page counts a task's
new revisions so that its states add up.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.integration.conftest import Stack
from tests.integration.test_browser import CHROMIUM_ARGS, chromium, context, log_in, submit

pytestmark = [pytest.mark.integration, pytest.mark.browser]
__all__ = ["CHROMIUM_ARGS", "chromium", "context"]  # the browser fixtures

LIVE_WAIT_MS = 90_000  # the machine is shared: launching a step can take a while
WIDTHS = (375, 1280)
HEIGHT = 900
REASON = ("no peer-to-peer link on these GPUs: the interconnect of rack 7 drops P2P transfers "
          "above 2 GiB, so the platform turns it off for every task until the firmware of "
          "the A100 nodes is updated in March")
# Enough variables that the resolved env and the editor are long, as on a real task.
MANY = [{"name": f"HYPERPARAMETER_NUMBER_{i:02d}", "value": str(i)} for i in range(30)]


def signed_in(context: BrowserContext, stack: Stack, token: str) -> Page:
    page = context.new_page()
    log_in(page, stack, token)
    return page


def resolved_value(page: Page, name: str) -> str:
    row = page.locator("#resolved tbody tr").filter(has=page.get_by_text(name, exact=True))
    return row.locator("td").nth(1).inner_text()


def broken_names(page: Page) -> list[str]:
    """Variable names drawn on more than one line (an inline box broken in two)."""
    return page.evaluate("""() => [...document.querySelectorAll("code.name, code.var")]
        .filter((el) => el.getClientRects().length > 1).map((el) => el.textContent)""")


def outside(page: Page, selector: str, width: int) -> list[str]:
    """The elements ``selector`` names whose box pokes out of a ``width`` px screen."""
    return page.evaluate("""([selector, width]) => [...document.querySelectorAll(selector)]
        .filter((el) => { const box = el.getBoundingClientRect();
                          return box.left < 0 || box.right > width; })
        .map((el) => el.name || el.outerHTML.slice(0, 60))""", [selector, width])


# --- one revision throughout the page ---------------------------------------------------

def test_picking_revision_1_shows_revision_1_everywhere_on_the_page(
        stack: Stack, context: BrowserContext) -> None:
    token = stack.new_token("ravi")
    task = stack.create({"name": "two-revisions", "env": [
        {"name": "LEARNING_RATE", "value": "0.01"}],
        "steps": [["sh", "-c", "echo rate=$LEARNING_RATE"]]}, token=token)
    stack.wait(task["id"])
    changed = stack.call("PATCH", f"/api/v1/tasks/{task['id']}/env", token=token,
                         json={"set": [{"name": "LEARNING_RATE", "value": "0.02"}]})
    assert changed.status_code == 202, changed.text
    stack.wait(task["id"], 2)

    page = signed_in(context, stack, token)
    page.goto(f"{stack.base}/ui/tasks/{task['id']}")
    expect(page.locator("#log")).to_contain_text("rate=0.02")
    picker = page.get_by_role("navigation", name="Revisions of this task")
    with page.expect_navigation():
        picker.get_by_role("link", name="1", exact=True).click()

    expect(page.locator("#revision")).to_have_text("1")
    expect(page.locator("#status")).to_have_text("succeeded")
    expect(page.locator("#earlier-revision")).to_contain_text("not the latest")
    assert resolved_value(page, "LEARNING_RATE") == "0.01"
    assert resolved_value(page, "TASK_ENV_REVISION") == "1"
    expect(page.locator("#log")).to_contain_text("rate=0.01")
    expect(page.locator("#log")).not_to_contain_text("rate=0.02")
    expect(page.get_by_role("heading", name="Logs revision 1")).to_be_visible()
    expect(page.locator("form.env-form")).to_have_count(0)  # the editor changes the latest
    expect(picker.get_by_role("link", name="1", exact=True)).to_have_attribute(
        "aria-current", "page")

    with page.expect_navigation():
        page.get_by_role("link", name="Show the latest revision").click()
    expect(page.locator("#revision")).to_have_text("2")
    assert resolved_value(page, "LEARNING_RATE") == "0.02"
    expect(page.locator("#log")).to_contain_text("rate=0.02")


# --- a running task: its log first, cancel but no rerun, an editor that fits ------------

def test_a_running_tasks_log_is_on_the_first_screen_with_cancel_and_no_rerun(
        stack: Stack, context: BrowserContext) -> None:
    token = stack.new_token("rosa")
    task = stack.create({"name": "a-long-running-training-task", "env": MANY,
                         "steps": [["sh", "-c", "echo epoch 1 started; sleep 120"]]},
                        token=token)
    try:
        page = signed_in(context, stack, token)
        page.goto(f"{stack.base}/ui/tasks/{task['id']}")
        expect(page.locator("#status")).to_have_text("running", timeout=LIVE_WAIT_MS)
        expect(page.locator("#log")).to_contain_text("epoch 1 started", timeout=LIVE_WAIT_MS)
        assert page.evaluate("document.documentElement.scrollHeight") > 2 * HEIGHT
        rerun = page.get_by_role("button", name=re.compile(r"^Rerun"))

        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": HEIGHT})
            page.evaluate("window.scrollTo(0, 0)")
            expect(page.locator("#log")).to_be_in_viewport()  # no scrolling to reach it
            expect(page.get_by_text("Cancel this task…")).to_be_visible()
            expect(rerun).to_have_count(0)
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            assert broken_names(page) == [], width
            # The editor's value boxes and its secret and delete boxes are all on screen.
            assert outside(page, "form.env-form textarea, form.env-form input:not([type=hidden])",
                           width) == [], width

        page.set_viewport_size({"width": 375, "height": HEIGHT})
        hint = page.locator("#revisions-section .scroll-hint")
        expect(hint).to_be_visible()  # the revisions table is wider than a phone
        expect(hint).to_have_text(re.compile("Scroll sideways"))
        page.set_viewport_size({"width": 1280, "height": HEIGHT})
        expect(hint).to_be_hidden()

        page.get_by_text("Cancel this task…").click()
        submit(page, "Yes, cancel it")
        expect(page.locator("#status")).to_have_text("cancelled")
        expect(rerun).to_have_count(1)  # once it has ended, and only then
        expect(page.get_by_text("Cancel this task…")).to_have_count(0)
    finally:  # nothing is left running, whatever failed above
        stack.call("POST", f"/api/v1/tasks/{task['id']}/cancel", token=token)


def test_a_rejected_task_says_why_nothing_ran_as_the_page_follows_it(
        stack: Stack, context: BrowserContext) -> None:
    stack.set_policy({"defaults": [], "protected": [
        {"name": "NCCL_P2P_DISABLE", "value": "1", "reason": REASON}]})
    page = signed_in(context, stack, stack.new_token("remy"))
    page.goto(stack.base + "/ui/tasks/new")
    page.fill("[name=name]", "refused")
    page.fill("[name=steps]", "echo never")
    page.fill("[name=env-0-name]", "NCCL_P2P_DISABLE")
    page.fill("[name=env-0-value]", "0")
    submit(page, "Create task")

    expect(page.locator("#status")).to_have_text("rejected", timeout=LIVE_WAIT_MS)
    log = page.locator("#log")
    expect(log).to_contain_text("Nothing ran: revision 1 was rejected before launch",
                                timeout=LIVE_WAIT_MS)
    expect(log).to_contain_text("NCCL_P2P_DISABLE: policy.protected")
    expect(log).not_to_contain_text("no output yet")
    expect(page.locator("#errors")).to_contain_text(REASON)


def test_an_unknown_console_page_is_a_page_not_json(stack: Stack, chromium: Browser) -> None:
    ctx = chromium.new_context(viewport={"width": 375, "height": HEIGHT})
    page = ctx.new_page()
    for signed in (False, True):
        if signed:
            log_in(page, stack, stack.new_token("ugo"))
        response = page.goto(stack.base + "/ui/taks/mistyped")
        assert response is not None and response.status == 404
        assert response.headers["content-type"].startswith("text/html")
        expect(page.get_by_role("heading", level=1)).to_have_text("404 — Not Found")
        expect(page.locator(".error-message")).to_contain_text("/ui/taks/mistyped")
    with page.expect_navigation():
        page.get_by_role("link", name="Back to the tasks").click()
    expect(page).to_have_url(re.compile(r"/ui/tasks$"))
    ctx.close()


# --- the policy page ---------------------------------------------------------------------

def test_an_admin_deletes_a_policy_row_and_reads_a_long_reason_whole(
        stack: Stack, chromium: Browser) -> None:
    stack.set_policy({"defaults": [{"name": "DATA_DIR", "value": "/mnt/data"},
                                   {"name": "OMP_NUM_THREADS", "value": "4"}],
                      "protected": [{"name": "NCCL_P2P_DISABLE", "value": "1",
                                     "reason": REASON}]})
    ctx = chromium.new_context(viewport={"width": 1280, "height": HEIGHT})
    page = signed_in(ctx, stack, stack.admin_token)
    page.goto(stack.base + "/ui/policy")
    reason = page.locator("textarea[name=protected-0-reason]")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": HEIGHT})
        expect(reason).to_have_value(REASON)
        assert reason.evaluate("el => el.scrollHeight <= el.clientHeight + 1 && "
                               "el.scrollWidth <= el.clientWidth + 1"), width  # all of it
        assert broken_names(page) == [], width

    page.get_by_role("checkbox", name="delete DATA_DIR").check()
    submit(page, "Save policy")

    expect(page.locator(".flash.ok")).to_contain_text("saved")
    defaults = page.locator("#defaults input[name$='-name']")
    expect(defaults.first).to_have_value("OMP_NUM_THREADS")
    assert "DATA_DIR" not in [defaults.nth(i).input_value() for i in range(defaults.count())]
    saved = stack.call("GET", "/api/v1/policy").json()
    assert [d["name"] for d in saved["defaults"]] == ["OMP_NUM_THREADS"]
    assert saved["protected"][0]["reason"] == REASON
    ctx.close()


# --- insights ----------------------------------------------------------------------------

def test_the_insights_states_add_up_for_tasks_with_new_revisions(
        stack: Stack, context: BrowserContext) -> None:
    made = stack.call("POST", "/api/v1/projects", json={
        "name": "counted", "members": ["iris"], "maintainers": ["iris"]})
    assert made.status_code == 201, made.text
    token = stack.new_token("iris")
    task = stack.create({"name": "counted", "project": "counted", "steps": [["true"]],
                         "env": [{"name": "LEARNING_RATE", "value": "0.1"}]}, token=token)
    stack.wait(task["id"])
    page = signed_in(context, stack, token)
    page.goto(f"{stack.base}/ui/tasks/{task['id']}")
    page.locator("textarea[name=env-0-value]").fill("0.2")
    submit(page, "Save as a new revision")
    stack.wait(task["id"], 2)
    submit(page, "Rerun")
    stack.wait(task["id"], 3)

    with page.expect_navigation():
        page.get_by_role("link", name="Insights").click()
    expect(page.locator("h1")).to_contain_text("project counted")
    for state in ("pending", "validated", "resolved", "succeeded"):  # three revisions,
        today = page.locator("#states tr", has_text=state).locator("td").first  # each
        expect(today).to_have_text("3")  # through every state, its first (pending) too
    expect(page.locator("#states-how")).to_contain_text("Every revision starts in pending")
