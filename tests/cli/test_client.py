"""The HTTP client against a real local server: headers, paths, the one error shape."""

from __future__ import annotations

import pytest

from cli.client import Client, api_root
from cli.errors import ApiError
from cli.main import main
from tests.cli.fake_api import Answer, FakeApi, api_error


def test_api_root_accepts_the_server_with_or_without_the_prefix():
    assert api_root("http://h:1") == "http://h:1/api/v1"
    assert api_root("http://h:1/api/v1/") == "http://h:1/api/v1"


def test_requests_carry_the_bearer_token_and_quote_ids(api: FakeApi):
    api.on("GET", "/tasks/a%2Fb", Answer(200, {"id": "a/b"}))

    doc = Client(api.base, "tok").task("a/b")

    assert doc == {"id": "a/b"}
    assert api.seen[0].headers["Authorization"] == "Bearer tok"
    assert api.seen[0].path == "/api/v1/tasks/a%2Fb"


def test_an_api_error_keeps_code_message_and_every_problem(api: FakeApi):
    problems = [{"variable": "A", "rule": "name.syntax", "message": "bad name"},
                {"field": "steps", "rule": "schema", "message": "required"}]
    api.on("POST", "/tasks", api_error(422, "env_invalid", "the env is not valid", *problems))

    with pytest.raises(ApiError) as caught:
        Client(api.base, "tok").create_task({"name": "x"}, idempotency_key="k1")

    err = caught.value
    assert (err.status, err.code, err.message, err.problems) == (
        422, "env_invalid", "the env is not valid", problems)
    assert err.url == api.base + "/api/v1/tasks"
    assert api.seen[0].headers["Idempotency-Key"] == "k1"


def test_an_answer_that_is_not_the_api_still_becomes_an_api_error(api: FakeApi):
    api.on("GET", "/policy", Answer(502, "<html>bad gateway</html>"))

    with pytest.raises(ApiError) as caught:
        Client(api.base, "tok").policy()

    assert (caught.value.code, caught.value.message) == ("http_502", "<html>bad gateway</html>")
    assert caught.value.transient


def test_a_network_error_names_the_url():
    with pytest.raises(ApiError) as caught:
        Client("http://127.0.0.1:9", "tok", timeout=2).tokens()

    assert caught.value.status is None and caught.value.transient
    assert "cannot reach http://127.0.0.1:9/api/v1/tokens" in caught.value.message


def test_the_cli_prints_an_api_error_one_line_per_problem_and_exits_5(api: FakeApi, run):
    api.on("GET", "/tasks", api_error(403, "forbidden", "admins only",
                                      {"variable": "X", "rule": "r", "message": "m"}))

    result = run("tasks")

    assert result.code == 5
    assert f"error: admins only [forbidden; 403 from {api.base}/api/v1/tasks" in result.err
    assert "  X: m (r)" in result.err


def test_a_url_that_is_not_http_is_reported_not_raised(capsys: pytest.CaptureFixture[str]):
    code = main(["--url", "nonsense", "--token", "t", "tasks"])

    assert code == 5
    assert "not a valid http(s) URL" in capsys.readouterr().err
