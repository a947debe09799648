"""The console's layout as a new user meets it, measured in a real headless Chromium on the
real stack (Redis, the API, Celery workers): element boxes and computed styles at 375 px,
a phone, and at 1280 px.

At 375 px the task list shows every column of a task, its Created time too, with nothing
to scroll sideways for. The new-task form's env preview shows each value across the width
of a phone, never a character per line; it sits beside the env rows on a wide screen, on
the new-task form and in a task's env editor, and under them on a phone; a warning in it
(a script's read the env does not satisfy) is amber, an error (a bad .env line) red. A
running task with many variables, many warnings and a script shows its log on the first
screen at 375 x 667 and at 1280 x 800, its warnings one line until opened. The catalog
page shows each entry's type, values, range, description, source and layer, on a phone
too, and a source is a link only when it is a web address.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from shared.keys import Keys
from tests.integration.conftest import Stack
from tests.integration.test_browser import CHROMIUM_ARGS, chromium, context, log_in

pytestmark = [pytest.mark.integration, pytest.mark.browser]
__all__ = ["CHROMIUM_ARGS", "chromium", "context"]  # the browser fixtures

LIVE_WAIT_MS = 90_000  # the machine is shared: launching a step can take a while
PHONE = {"width": 375, "height": 667}
# style.css's colours: an error's (--bad, --bad-bg) and a warning's (amber).
BAD, BAD_BG = "rgb(165, 42, 31)", "rgb(253, 240, 238)"
WARN_LINE, WARN_BG, WARN_TEXT = "rgb(201, 154, 6)", "rgb(255, 247, 224)", "rgb(107, 82, 0)"
WIDE = {"width": 1280, "height": 800}


def box(page: Page, selector: str) -> dict[str, float]:
    """The bounding box of the first element ``selector`` names, in viewport pixels."""
    found = page.locator(selector).first.bounding_box()
    assert found is not None, f"{selector} is not rendered"
    return {**found, "right": found["x"] + found["width"],
            "bottom": found["y"] + found["height"]}


def off_screen(page: Page, selector: str) -> list[str]:
    """The elements ``selector`` (a Playwright selector) names that are not wholly inside
    the viewport's width, or not rendered at all."""
    return page.locator(selector).evaluate_all("""(found) => found
        .filter((el) => { const r = el.getBoundingClientRect();
                          return r.width === 0 || r.left < 0 || r.right > innerWidth; })
        .map((el) => el.textContent.trim().slice(0, 40))""")


def style(page: Page, selector: str, *props: str) -> dict[str, Any]:
    return page.locator(selector).first.evaluate(
        "(el, props) => Object.fromEntries(props.map((p) => [p, getComputedStyle(el)[p]]))",
        list(props))


def test_the_task_list_shows_every_column_on_a_phone(stack: Stack, chromium: Browser) -> None:
    token = stack.new_token("nell")
    for name in ("a-long-running-training-task", "eval"):
        stack.create({"name": name, "steps": [["true"]], "env": []}, token=token)
    ctx = chromium.new_context(viewport=PHONE)
    page = ctx.new_page()
    log_in(page, stack, stack.admin_token)  # an admin's list has the most columns (Owner)
    page.goto(stack.base + "/ui/tasks")
    row = "#tasks tbody tr:has(a:text-is('a-long-running-training-task'))"
    expect(page.locator(row)).to_have_count(1)

    created = page.locator(f"{row} time")
    expect(created).to_be_in_viewport(ratio=1)  # the Created time, whole, on the screen
    assert off_screen(page, "#tasks tbody td") == []  # no column is off to the side
    expect(page.locator(".scroll-hint.shown")).to_have_count(0)  # nothing to scroll for
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert box(page, f"{row} td[data-label=owner]")["right"] <= PHONE["width"]

    page.set_viewport_size(WIDE)  # a wide screen keeps the table, one line per task
    expect(page.locator("#tasks thead")).to_be_visible()
    tops = page.locator(f"{row} td").evaluate_all(
        "(cells) => cells.map((c) => Math.round(c.getBoundingClientRect().top))")
    assert len(set(tops)) == 1, tops
    ctx.close()


def lines(page: Page, selector: str) -> list[int]:
    """How many lines each inline element ``selector`` names is drawn on."""
    return page.evaluate("""(selector) => [...document.querySelectorAll(selector)]
        .map((el) => el.getClientRects().length)""", selector)


LONG_VALUE = "/mnt/datasets/imagenet-21k/train"


def test_the_env_preview_on_the_new_task_form(stack: Stack, chromium: Browser) -> None:
    ctx = chromium.new_context(viewport=PHONE)
    page = ctx.new_page()
    token = stack.new_token("noor")
    log_in(page, stack, token)
    page.goto(stack.base + "/ui/tasks/new")
    page.fill("[name=env-0-name]", "DATA_ROOT")
    page.fill("[name=env-0-value]", LONG_VALUE)
    preview = page.locator("#preview-env")
    expect(preview).to_contain_text(LONG_VALUE)

    # On a phone each value runs across the panel: a few words a line, not a character.
    values = "#preview-env tbody td:nth-child(2) code"
    assert page.locator(values).count() > 5
    assert max(lines(page, values)) <= 2, lines(page, values)
    assert box(page, values)["width"] > 0.6 * box(page, "#preview")["width"]
    assert off_screen(page, "#preview-env tbody td:not(.none)") == []
    expect(page.locator("#preview .scroll-hint.shown")).to_have_count(0)
    # Under the rows on a phone, before the .env file box.
    rows, panel = box(page, "#env-rows"), box(page, "#preview")
    assert panel["y"] >= rows["bottom"] and abs(panel["x"] - rows["x"]) < 20, (rows, panel)
    assert panel["bottom"] <= box(page, "fieldset.env-file")["y"]

    page.set_viewport_size(WIDE)  # beside the rows, its top level with the first of them
    beside(page, "#env-rows")

    # A warning no row names, right under "Would be accepted": a warning's colours.
    page.fill("[name=file-0-path]", "train.py")
    page.fill("[name=file-0-content]", "import os\nprint(os.environ['EPOCHS'])\n")
    warnings, errors = page.locator("#preview-warnings"), page.locator("#preview-problems")
    expect(warnings).to_contain_text("reads EPOCHS")
    expect(page.locator("#preview-state")).to_contain_text("Would be accepted")
    expect(page.locator("#preview-state")).to_contain_text("2 warnings")  # DATA_ROOT's unread
    expect(errors).to_be_hidden()
    warned = style(page, "#preview-warnings", "backgroundColor", "borderTopColor")
    warned_text = style(page, "#preview-warnings li", "color")["color"]
    assert warned == {"backgroundColor": WARN_BG, "borderTopColor": WARN_LINE}, warned
    assert warned_text == WARN_TEXT

    page.fill("#env_file", "not a line of a .env file\n")  # an error no row names: red
    expect(errors).to_be_visible()
    expect(page.locator("#preview-state")).to_contain_text("Would be rejected")
    refused = style(page, "#preview-problems", "backgroundColor", "borderTopColor")
    assert refused == {"backgroundColor": BAD_BG, "borderTopColor": BAD}, refused
    assert style(page, "#preview-problems li", "color")["color"] != warned_text

    task = stack.create({"name": "edited", "steps": [["sleep", "0"]],
                         "env": [{"name": f"VAR_{i}", "value": str(i)} for i in range(12)]},
                        token=token)
    page.goto(f"{stack.base}/ui/tasks/{task['id']}")
    page.fill("[name=new-0-name]", "DATA_ROOT")
    page.fill("[name=new-0-value]", LONG_VALUE)
    expect(preview).to_contain_text(LONG_VALUE)
    beside(page, "form.env-form table.editor tbody")
    ctx.close()


def beside(page: Page, rows_selector: str) -> None:
    """The preview panel is to the right of the rows, its top level with the first row."""
    rows, panel = box(page, rows_selector), box(page, "#preview")
    first = box(page, f"{rows_selector} tr")
    assert panel["x"] >= rows["right"], (rows, panel)
    assert rows["y"] - 60 <= panel["y"] <= first["bottom"], (first, panel)
    assert panel["right"] <= WIDE["width"]


# Enough variables that the resolved env and the editor are long, as on a real task, and
# likely typos of documented names: each is a warning on the task page.
MANY = [{"name": f"HYPERPARAMETER_NUMBER_{i:02d}", "value": str(i)} for i in range(30)]
TYPOS = ["NCCL_DEBGU", "CUDA_LAUNCH_BLOKING", "OMP_NUM_THREAD", "NCCL_P2P_DISABEL",
         "HF_HUB_OFLINE"]
OUTPUT = [f"epoch {i} started" for i in range(1, 7)]


def test_a_running_tasks_log_is_on_the_first_screen_however_many_variables_and_warnings(
        stack: Stack, chromium: Browser) -> None:
    token = stack.new_token("nico")
    task = stack.create({
        "name": "a-long-running-training-task",
        "env": MANY + [{"name": name, "value": "1"} for name in TYPOS],
        "files": [{"path": "train.py", "content": "import os\nprint(os.environ['LR'])\n"}],
        "steps": [["sh", "-c", "; ".join(f"echo {line}" for line in OUTPUT) + "; sleep 120"]],
    }, token=token)
    ctx = chromium.new_context(viewport=PHONE)
    try:
        page = ctx.new_page()
        log_in(page, stack, token)
        page.goto(f"{stack.base}/ui/tasks/{task['id']}")
        log = page.locator("#log")
        expect(page.locator("#status")).to_have_text("running", timeout=LIVE_WAIT_MS)
        expect(log).to_contain_text(OUTPUT[-1], timeout=LIVE_WAIT_MS)
        line = float(style(page, "#log", "lineHeight")["lineHeight"].removesuffix("px"))
        for viewport in (PHONE, WIDE):
            page.set_viewport_size(viewport)
            page.evaluate("window.scrollTo(0, 0)")
            assert page.evaluate("document.documentElement.scrollHeight") > 3 * viewport["height"]
            top = box(page, "#log")["y"]
            # Five lines of output, at least, without scrolling.
            assert viewport["height"] - top >= 5 * line, (viewport, top)
            assert box(page, "#doctor")["y"] > top  # the pre-flight read comes after the log

        warnings = page.locator("#warnings")  # one line until opened, at either width
        expect(warnings.locator("summary")).to_contain_text(
            re.compile(r"^\d+ warnings"))  # as many as variables no script reads, and more
        assert int(warnings.locator("summary strong").inner_text().split()[0]) > len(TYPOS)
        for viewport in (PHONE, WIDE):
            page.set_viewport_size(viewport)
            assert box(page, "#warnings summary")["height"] < 2 * line * 1.5, viewport
        warnings.locator("summary").click()  # opened: each warning, amber, not red
        item = warnings.locator("li", has_text="did you mean NCCL_DEBUG")
        expect(item).to_be_visible()
        assert style(page, "#warnings li", "color")["color"] == WARN_TEXT
        assert style(page, "#warnings", "backgroundColor")["backgroundColor"] == WARN_BG
    finally:  # nothing is left running, whatever failed above
        ctx.close()
        stack.call("POST", f"/api/v1/tasks/{task['id']}/cancel", token=token)


def test_the_catalog_shows_every_field_of_an_entry_at_375_and_1280_px(
        stack: Stack, chromium: Browser) -> None:
    made = stack.call("PUT", "/api/v1/catalog/entries/WARMUP_STEPS", json={
        "description": "optimizer steps before the full learning rate", "type": "int",
        "min": 0, "max": 10000, "source": "https://example.org/docs/warmup"})
    assert made.status_code == 200, made.text
    # Stored before sources had to be web addresses (an edit is refused one today).
    stack.redis.hset(Keys(stack.env["TASKENV_KEY_PREFIX"]).catalog("platform"), "OLD_ENTRY",
                     json.dumps({"name": "OLD_ENTRY", "description": "kept from before",
                                 "type": "enum", "values": ["on", "off"],
                                 "source": "javascript:alert(document.cookie)"}))
    ctx = chromium.new_context(viewport=PHONE)
    page = ctx.new_page()
    log_in(page, stack, stack.new_token("nina"))
    page.goto(stack.base + "/ui/catalog")
    warmup = "#catalog tr:has(code:text-is('WARMUP_STEPS'))"
    old = "#catalog tr:has(code:text-is('OLD_ENTRY'))"
    expect(page.locator(warmup)).to_contain_text("int, 0 to 10000")
    expect(page.locator(warmup)).to_contain_text("optimizer steps before the full learning rate")
    expect(page.locator(f"{warmup} td.source a")).to_have_attribute(
        "href", "https://example.org/docs/warmup")
    expect(page.locator(old)).to_contain_text("on, off")
    expect(page.locator(f"{old} td.source")).to_have_text("javascript:alert(document.cookie)")
    expect(page.locator(f"{old} td.source a")).to_have_count(0)  # text, not a link
    assert page.evaluate("""() => [...document.querySelectorAll("#catalog a")]
        .filter((a) => !["http:", "https:"].includes(a.protocol)).length""") == 0

    for viewport in (PHONE, WIDE):
        page.set_viewport_size(viewport)
        for entry in (warmup, old):  # every field on the screen, none off to the side
            page.locator(entry).scroll_into_view_if_needed()
            assert off_screen(page, f"{entry} td:not(.none)") == [], (viewport, entry)
            expect(page.locator(f"{entry} td.description")).to_be_in_viewport(ratio=1)
        expect(page.locator(".scroll-hint.shown")).to_have_count(0)
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
    tops = page.locator(f"{warmup} td").evaluate_all(  # at 1280, a table: one line an entry
        "(cells) => cells.map((c) => Math.round(c.getBoundingClientRect().top))")
    assert len(set(tops)) == 1, tops
    ctx.close()
