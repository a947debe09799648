"""The doctor in a real headless Chromium, on the real stack (Redis, API, Celery workers).

While a user types into the new-task form, a likely typo of a documented name and a
value outside the documented ones show beside their row, naming the likely name and the
documented values, without blocking; an entry an admin adds on the catalog page is
advised on at once; a task created with a typo carries the advice to its page, and the
insights page counts the name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.integration.conftest import Stack
from tests.integration.test_browser import CHROMIUM_ARGS, chromium, context, log_in

pytestmark = [pytest.mark.integration, pytest.mark.browser]
__all__ = ["CHROMIUM_ARGS", "chromium", "context"]  # the browser fixtures
ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts" / "screenshots"


def user_page(context: BrowserContext, stack: Stack, owner: str) -> Page:
    page = context.new_page()
    log_in(page, stack, stack.new_token(owner))
    return page


def test_findings_show_beside_the_rows_while_typing(stack: Stack,
                                                    context: BrowserContext) -> None:
    page = user_page(context, stack, "dora")
    page.goto(stack.base + "/ui/tasks/new")
    row = page.locator("#env-rows tr").nth(0)

    page.fill("[name=env-0-name]", "NCCL_DEBGU")
    page.fill("[name=env-0-value]", "INFO")
    advice = row.locator(".live-problems")
    expect(advice).to_contain_text("did you mean NCCL_DEBUG")
    expect(advice).to_contain_text("doctor.near_miss")
    expect(advice.locator("li.warning")).to_have_count(1)  # a warning, not an error
    expect(page.locator("#preview-state")).to_contain_text("Would be accepted")

    page.fill("[name=env-0-name]", "NCCL_DEBUG")
    page.fill("[name=env-0-value]", "verbose")
    expect(advice).to_contain_text("VERSION, WARN, INFO, TRACE")
    expect(advice).to_contain_text("doctor.value")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "doctor-new-task.png"), full_page=True)

    page.fill("[name=env-0-value]", "INFO")  # fixed: the advice goes
    expect(row.locator(".live-problems")).to_have_count(0)
    listed = stack.call("GET", "/api/v1/tasks?limit=100").json()["items"]
    assert all(t["owner"] != "dora" for t in listed)  # nothing was submitted


def test_an_admins_catalog_entry_is_advised_on_at_once(stack: Stack,
                                                       context: BrowserContext) -> None:
    admin = context.new_page()
    log_in(admin, stack, stack.admin_token)
    admin.goto(stack.base + "/ui/catalog")
    admin.fill("#catalog-form [name=name]", "GRADIENT_ACCUMULATION")
    admin.fill("#catalog-form [name=description]", "micro-batches per optimizer step")
    admin.select_option("#catalog-form [name=type]", "int")
    admin.fill("#catalog-form [name=min]", "1")
    with admin.expect_navigation():
        admin.click("#catalog-form button[type=submit]")
    expect(admin.locator("#catalog")).to_contain_text("GRADIENT_ACCUMULATION")

    page = user_page(context, stack, "eli")
    page.goto(stack.base + "/ui/tasks/new")
    page.fill("[name=env-0-name]", "GRADIENT_ACCUMULATON")
    page.fill("[name=env-0-value]", "4")
    expect(page.locator("#env-rows tr").nth(0).locator(".live-problems")).to_contain_text(
        "did you mean GRADIENT_ACCUMULATION (micro-batches per optimizer step)")
    page.fill("[name=env-0-name]", "GRADIENT_ACCUMULATION")
    page.fill("[name=env-0-value]", "0")
    expect(page.locator("#env-rows tr").nth(0).locator(".live-problems")).to_contain_text(
        "below the documented minimum 1")


def test_a_created_task_carries_the_advice_to_its_page_and_the_insights(
        stack: Stack, context: BrowserContext) -> None:
    made = stack.create({"name": "typo", "steps": [["true"]],
                         "env": [{"name": "CUDA_LAUNCH_BLOKING", "value": "1"}]})
    assert "did you mean CUDA_LAUNCH_BLOCKING" in made["advice"][0]["message"]
    done = stack.wait(made["id"])
    assert done["status"] == "succeeded"  # advice never blocks
    assert [w["variable"] for w in done["warnings"]] == ["CUDA_LAUNCH_BLOKING"]
    page = context.new_page()
    log_in(page, stack, stack.admin_token)
    page.goto(f"{stack.base}/ui/tasks/{made['id']}")
    expect(page.locator(".doctor-advice")).to_contain_text("did you mean CUDA_LAUNCH_BLOCKING")
    page.screenshot(path=str(ARTIFACTS / "doctor-task.png"), full_page=True)
    page.goto(stack.base + "/ui/insights")
    expect(page.locator("#near-misses-1")).to_contain_text("CUDA_LAUNCH_BLOKING")
    expect(page.locator("#near-misses-1")).to_contain_text("CUDA_LAUNCH_BLOCKING")


def test_a_script_typed_into_the_form_is_read_against_the_env_while_typing(
        stack: Stack, context: BrowserContext) -> None:
    page = user_page(context, stack, "fay")
    page.goto(stack.base + "/ui/tasks/new")
    page.fill("[name=env-0-name]", "LR")
    page.fill("[name=env-0-value]", "0.1")
    page.fill("[name=file-0-path]", "train.py")
    page.fill("[name=file-0-content]",
              "import os\nlr = float(os.environ['LEARNING_RATE'])\n"
              "stage = os.environ.get('STAGE', 'pretrain')\n"
              "w = os.environ['W_' + stage]\n")
    rest = page.locator("#preview-warnings")
    expect(rest).to_contain_text("train.py line 2 reads LEARNING_RATE, which this task does "
                                 "not set and the script gives no default; did you mean LR?")
    expect(page.locator("#env-rows tr").nth(0).locator(".live-problems")).to_contain_text(
        "LR is set by the task but no script reads it")
    expect(page.locator("#preview-doctor")).to_contain_text("Scripts read, never run: train.py")
    expect(page.locator("#preview-doctor")).to_contain_text("built at run time ('W_' + stage)")
    expect(page.locator("#preview-state")).to_contain_text("Would be accepted")  # advice only
    page.fill("[name=file-0-content]", "import os\nlr = float(os.environ['LR'])\n")
    expect(rest).not_to_contain_text("LEARNING_RATE")
    expect(page.locator("#env-rows tr").nth(0).locator(".live-problems")).to_have_count(0)
