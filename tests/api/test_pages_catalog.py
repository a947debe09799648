"""The catalog page on fakeredis: every field an entry documents, and a source that is a
link only when it is a web address."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from html import unescape

import fakeredis
from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import Browser

# Sources an edit is refused today, as an entry stored before that rule may still hold.
NOT_WEB = ["javascript:alert(document.cookie)", "JavaScript:alert(1)", " javascript:alert(1)",
           "data:text/html,<script>alert(1)</script>", "https:no-slashes",
           "see the wiki page Training/Rates", "vbscript:msgbox(1)"]


def stored(app: Flask, redis_client: fakeredis.FakeRedis, *entries: dict) -> None:
    """Entries written straight into the platform's layer, past the API's checks."""
    key = app.extensions["taskenv"].keys.catalog("platform")
    for entry in entries:
        redis_client.hset(key, entry["name"], json.dumps(entry))


def row(page: str, name: str) -> str:
    start = page.index(f'<code class="var">{name}</code>')
    return page[start:page.index("</tr>", start)]


def test_the_catalog_page_shows_type_values_range_description_and_source(
        app: Flask, redis_client: fakeredis.FakeRedis,
        browser: Callable[..., Browser]) -> None:
    stored(app, redis_client,
           {"name": "WARMUP_STEPS", "description": "steps before the full learning rate",
            "type": "int", "min": 0.0, "max": 10000.0, "source": "https://example.org/warmup"},
           {"name": "PRECISION", "description": "the training's number format", "type": "enum",
            "values": ["fp32", "bf16"], "case_insensitive": True},
           {"name": "DROPOUT", "type": "float", "max": 0.5, "source": "HTTPS://EXAMPLE.ORG/d"})
    page = browser("alice").get("/ui/catalog").text
    assert '<th scope="col">Type</th>' in page and '<th scope="col">Description</th>' in page

    warmup = row(page, "WARMUP_STEPS")
    assert ">int, <span class=\"range\">0 to 10000</span>" in warmup
    assert "steps before the full learning rate" in warmup
    assert '<a href="https://example.org/warmup" title="https://example.org/warmup"' in warmup
    assert ">example.org</a>" in warmup
    precision = row(page, "PRECISION")
    assert "enum" in precision and "fp32, bf16 <small>(any case)</small>" in precision
    assert "the training&#39;s number format" in precision
    assert 'class="source none"' in precision  # no source: a dash, hidden on a phone
    dropout = row(page, "DROPOUT")
    assert "float, <span class=\"range\">at most 0.5</span>" in dropout
    assert '<a href="HTTPS://EXAMPLE.ORG/d"' in dropout
    # The built-in entries, as before: values, description and their upstream page.
    nccl = row(page, "NCCL_DEBUG")
    assert "VERSION, WARN, INFO, TRACE" in nccl and "How much NCCL logs." in nccl
    assert 'href="https://docs.nvidia.com/deeplearning/nccl' in nccl


def test_a_source_that_is_no_web_address_is_text_never_a_link(
        app: Flask, redis_client: fakeredis.FakeRedis,
        browser: Callable[..., Browser]) -> None:
    stored(app, redis_client, *({"name": f"ODD_SOURCE_{i}", "source": source}
                                for i, source in enumerate(NOT_WEB)))
    page = browser("alice").get("/ui/catalog").text
    hrefs = [unescape(h) for h in re.findall(r'href="([^"]*)"', page)]
    assert not [h for h in hrefs if not h.startswith(("/", "#", "https://", "http://"))], hrefs
    for i, source in enumerate(NOT_WEB):
        cell = row(page, f"ODD_SOURCE_{i}")
        assert "<a " not in cell, cell
        assert f'<span class="text">{source.replace("<", "&lt;").replace(">", "&gt;")}</span>' \
            in cell, cell
    assert "<script>alert(1)" not in page


def test_what_a_policy_says_of_a_documented_variable_shows_beside_its_description(
        client: FlaskClient, browser: Callable[..., Browser]) -> None:
    policy = {"defaults": [], "protected": [], "rules": [
        {"name": "NCCL_DEBUG", "description": "keep it at WARN on the shared cluster"}]}
    assert client.put("/api/v1/policy", json=policy).status_code == 200
    nccl = row(browser("alice").get("/ui/catalog").text, "NCCL_DEBUG")
    assert "How much NCCL logs." in nccl and "VERSION, WARN, INFO, TRACE" in nccl
    assert "The policy: keep it at WARN on the shared cluster" in nccl
