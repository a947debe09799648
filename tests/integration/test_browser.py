"""The web console in a real headless Chromium, against the real stack.

An admin sets the policy on the policy page; a user creates a two-step task on the
new-task page, sees it rejected for setting a protected variable, creates it again,
watches it succeed with the resolved env and the steps' output, and then changes the
env on the task page, which makes revision 2.

Chromium is Debian's (/usr/bin/chromium), driven by Playwright for Python; Playwright's
own browser download is never used.  CI installs both: this test is not skipped.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from tests.integration.conftest import FINAL, Stack

pytestmark = [pytest.mark.integration, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "task.png"
REASON = "no peer-to-peer link on these GPUs"
SECRET = "hf_browser-secret-52b7e0"
# Two scripts in one container: a shell step and a Python step, each printing what it sees.
STEPS = "\n".join([
    "sh -c 'echo \"prepare: LEARNING_RATE=$LEARNING_RATE DATA_DIR=$DATA_DIR "
    "NCCL_P2P_DISABLE=$NCCL_P2P_DISABLE NOTE=$NOTE\"'",
    "python3 -c \"import os; print('train:', *[k + '=' + os.environ.get(k, '-') for k in "
    "('LEARNING_RATE', 'DATA_DIR', 'NCCL_P2P_DISABLE', 'NOTE', 'BATCH_SIZE')], "
    "'HF_TOKEN_LEN=' + str(len(os.environ.get('HF_TOKEN', ''))))\"",
])


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def context(chromium: Browser) -> Iterator[BrowserContext]:
    """A fresh cookie jar: one person's browser."""
    ctx = chromium.new_context(viewport={"width": 1280, "height": 900})
    yield ctx
    ctx.close()


def submit(page: Page, button: str) -> None:
    """Click a submit button and wait for the page the server answers with."""
    with page.expect_navigation():
        page.get_by_role("button", name=button).click()


def log_in(page: Page, stack: Stack, token: str) -> None:
    page.goto(stack.base + "/ui/login")
    page.fill("input[name=token]", token)
    submit(page, "Log in")
    expect(page).to_have_url(re.compile(r"/ui/tasks$"))


def fill_rows(page: Page, prefix: str, rows: list[tuple[str, str, bool]]) -> None:
    for index, (name, value, secret) in enumerate(rows):
        page.fill(f"[name={prefix}-{index}-name]", name)
        page.fill(f"[name={prefix}-{index}-value]", value)
        if secret:
            page.check(f"[name={prefix}-{index}-secret]")


def create_task(page: Page, stack: Stack, env: list[tuple[str, str, bool]]) -> None:
    page.goto(stack.base + "/ui/tasks/new")
    page.fill("[name=name]", "two-steps")
    page.fill("[name=steps]", STEPS)
    rows = page.locator("#env-rows tr")
    before = rows.count()
    page.get_by_role("button", name="More rows").click()  # JS adds a row, no round trip
    expect(rows).to_have_count(before + 1)
    fill_rows(page, "env", env)
    submit(page, "Create task")
    expect(page.locator("h1")).to_have_text("two-steps")


def wait_final(page: Page, revision: int, timeout: float = 60.0) -> str:
    """Reload the task page, as a person would, until the revision has finished."""
    deadline = time.monotonic() + timeout
    while True:
        status = page.inner_text("#status")
        if page.inner_text("#revision") == str(revision) and status in FINAL:
            return status
        assert time.monotonic() < deadline, f"still {status} after {timeout}s"
        time.sleep(0.3)
        page.reload()


def provenance(page: Page, name: str) -> tuple[str, str]:
    """The resolved env table's source and overrode cells for one variable."""
    row = page.locator("#resolved tbody tr").filter(
        has=page.locator("td:first-child", has_text=re.compile(f"^{name}$")))
    return row.locator("td").nth(2).inner_text(), row.locator("td").nth(3).inner_text()


def test_policy_task_and_env_edit_through_the_pages(
        stack: Stack, context: BrowserContext, chromium: Browser, tmp_path: Path) -> None:
    # An admin sets a default and a protected variable with a reason.
    admin = context.new_page()
    log_in(admin, stack, stack.admin_token)
    admin.goto(stack.base + "/ui/policy")
    fill_rows(admin, "defaults", [("DATA_DIR", "/mnt/data", False),
                                  ("OMP_NUM_THREADS", "4", False)])
    admin.fill("[name=protected-0-name]", "NCCL_P2P_DISABLE")
    admin.fill("[name=protected-0-value]", "1")
    admin.fill("[name=protected-0-reason]", REASON)
    submit(admin, "Save policy")
    expect(admin.locator(".flash.ok")).to_contain_text("saved")

    # A user, in another browser, sets the protected variable: rejected, with the reason.
    user_ctx = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = user_ctx.new_page()
    console_errors: list[str] = []  # a CSP violation (say, an inline script) lands here
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    log_in(page, stack, stack.new_token("dana"))
    env = [("LEARNING_RATE", "0.01", False), ("NOTE", "$(HOME) stays literal", False),
           ("HF_TOKEN", SECRET, True), ("OMP_NUM_THREADS", "8", False)]
    create_task(page, stack, [*env, ("NCCL_P2P_DISABLE", "0", False)])
    assert wait_final(page, 1) == "rejected"
    errors = page.inner_text("#errors")
    assert "NCCL_P2P_DISABLE" in errors and "policy.protected" in errors and REASON in errors

    # Without it: succeeded, every step saw the default, the user's values and the locked one.
    create_task(page, stack, env)
    assert wait_final(page, 1) == "succeeded", page.inner_text("main")
    assert {n: provenance(page, n) for n in ("DATA_DIR", "NCCL_P2P_DISABLE", "LEARNING_RATE",
                                              "OMP_NUM_THREADS", "TASK_ID")} == {
        "DATA_DIR": ("default", "—"), "NCCL_P2P_DISABLE": ("protected", "—"),
        "LEARNING_RATE": ("user", "—"), "OMP_NUM_THREADS": ("user", "default"),
        "TASK_ID": ("platform", "—")}
    log = page.inner_text("#log")
    assert ("prepare: LEARNING_RATE=0.01 DATA_DIR=/mnt/data NCCL_P2P_DISABLE=1 "
            "NOTE=$(HOME) stays literal") in log
    assert ("train: LEARNING_RATE=0.01 DATA_DIR=/mnt/data NCCL_P2P_DISABLE=1 "
            f"NOTE=$(HOME) stays literal BATCH_SIZE=- HF_TOKEN_LEN={len(SECRET)}") in log
    assert SECRET not in page.content()

    # Change the env on the page: modify one, delete one, add one; the secret is left empty.
    page.fill("[name=env-0-value]", "0.005")
    page.check("[name=env-1-delete]")
    fill_rows(page, "new", [("BATCH_SIZE", "64", False)])
    submit(page, "Save as a new revision")
    expect(page.locator(".flash.ok")).to_contain_text("Revision 2 created")
    assert wait_final(page, 2) == "succeeded", page.inner_text("main")
    log = page.inner_text("#log")
    assert "prepare: LEARNING_RATE=0.005 DATA_DIR=/mnt/data NCCL_P2P_DISABLE=1 NOTE=\n" in log
    assert ("train: LEARNING_RATE=0.005 DATA_DIR=/mnt/data NCCL_P2P_DISABLE=1 NOTE=- "
            f"BATCH_SIZE=64 HF_TOKEN_LEN={len(SECRET)}") in log
    assert SECRET not in page.content()

    assert console_errors == []
    page.screenshot(path=str(tmp_path / "task.png"), full_page=True)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    if os.environ.get("TASKENV_UPDATE_SCREENSHOTS"):  # refresh the README's picture
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    user_ctx.close()


def test_the_new_task_form_works_without_javascript(stack: Stack, chromium: Browser) -> None:
    ctx = chromium.new_context(java_script_enabled=False)
    page = ctx.new_page()
    log_in(page, stack, stack.new_token("erin"))
    page.goto(stack.base + "/ui/tasks/new")
    page.fill("[name=name]", "no-js")
    page.fill("[name=env-0-name]", "KEPT")
    page.fill("[name=env-0-value]", "typed before more rows")
    rows = page.locator("#env-rows tr").count()
    submit(page, "More rows")  # without JS the server sends the form back, longer
    assert page.locator("#env-rows tr").count() > rows
    assert page.input_value("[name=name]") == "no-js"
    assert page.input_value("[name=env-0-value]") == "typed before more rows"
    page.fill("[name=steps]", "true")
    submit(page, "Create task")
    assert wait_final(page, 1) == "succeeded"
    ctx.close()
