"""A distributed task in the console, in a real headless Chromium on a dry-run stack: the
form's preview refuses an identity variable beside its row and says what differs per
replica; the task page picks one replica's log."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.integration.test_browser import CHROMIUM_ARGS, chromium, context, log_in, submit
from tests.integration.test_replicas_dryrun import dry_stack
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.browser]
__all__ = ["CHROMIUM_ARGS", "chromium", "context", "dry_stack"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts" / "screenshots"


def test_the_form_refuses_rank_says_what_differs_and_the_page_picks_a_replica(
        dry_stack: Stack, context: BrowserContext) -> None:
    page = context.new_page()
    log_in(page, dry_stack, dry_stack.new_token("uma"))
    page.goto(dry_stack.base + "/ui/tasks/new")
    page.fill("[name=name]", "ddp")
    page.fill("[name=replicas]", "3")
    page.fill("[name=steps]", "python3 train.py")
    page.fill("[name=env-0-name]", "RANK")
    page.fill("[name=env-0-value]", "2")

    row = page.locator("#env-rows tr").nth(0)
    expect(row.locator(".live-problems")).to_contain_text("platform.identity")
    expect(row.locator(".live-problems")).to_contain_text("per replica")
    expect(page.locator("#preview-differs")).to_contain_text("RANK: the replica's index")
    expect(page.locator("#preview-env")).to_contain_text("WORLD_SIZE")

    page.fill("[name=env-0-name]", "LR")
    expect(row.locator(".live-problems")).to_have_count(0)
    submit(page, "Create task")
    expect(page.locator("#status")).to_have_text("succeeded", timeout=60_000)
    expect(page.locator("#facts")).to_contain_text("0: 0, 1: 0, 2: 0")
    expect(page.locator("#log")).to_contain_text("[replica 2] TASK_REPLICA=2")

    page.locator("#replica-picker a", has_text=re.compile(r"^1$")).click()
    expect(page.locator("#log")).to_contain_text("TASK_REPLICA=1 TASK_REPLICAS=3")
    expect(page.locator("#log")).not_to_contain_text("[replica")
    expect(page.locator("#log")).not_to_contain_text("TASK_REPLICA=2")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "task-replicas.png"), full_page=True)
