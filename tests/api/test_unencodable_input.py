"""Text no process can be given is refused at the door, and text already stored is shown.

JSON's ``"\\ud800"`` decodes to a lone surrogate, which UTF-8 cannot encode: a name,
an argument or a path holding one can never reach a process (the runner dies encoding
it).  Every string of every request is checked once (``api.schemas.Strict``): a ``422``
names each field, all of them in one answer.  A record stored before that rule still
lists and shows, its text escaped, never a 500.  A path component longer than a
filesystem name may be (``NAME_MAX``, 255 bytes of UTF-8) is refused the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.store.tasks import TaskStore
from tests.api.conftest import Browser, task_body

LONE = "\ud800"


def post_raw(client: FlaskClient, body: dict[str, Any], path: str = "/api/v1/tasks") -> Any:
    """The body as JSON text with ``\\ud800`` escapes, as a client would send it."""
    return client.post(path, data=json.dumps(body), content_type="application/json")


def fields_named(response: Any) -> set[str]:
    return {p.get("field") for p in response.get_json()["errors"]}


def test_every_unencodable_string_of_a_task_is_named_at_once(client: FlaskClient) -> None:
    body = task_body(name=f"res{LONE}net", workdir=f"runs/{LONE}",
                     steps=[["python3", f"train{LONE}.py"]],
                     env=[{"name": f"L{LONE}R", "value": "0.1"},
                          {"name": "LR", "value": f"0.{LONE}"}],
                     files=[{"path": f"a{LONE}.sh", "content": "echo"},
                            {"path": "b.sh", "content": f"echo {LONE}"}],
                     env_file=f"X={LONE}\n")
    response = post_raw(client, body)

    assert response.status_code == 422, response.get_json()
    assert fields_named(response) >= {
        "name", "workdir", "steps.0.1", "env.0.name", "env.1.value", "files.0.path",
        "files.1.content", "env_file"}
    for problem in response.get_json()["errors"]:
        assert "UTF-8" in problem["message"], problem
        assert LONE not in problem["message"]  # the message shows it escaped


@pytest.mark.parametrize("field, value", [
    ("name", f"x{LONE}"), ("workdir", f"w{LONE}"), ("steps", [[f"a{LONE}"]]),
    ("env", [{"name": "A", "value": f"{LONE}"}]),
    ("env", [{"name": f"{LONE}", "value": "v", "secret": False}]),
    ("files", [{"path": "p", "content": f"{LONE}"}]),
    ("image", f"img{LONE}"), ("project", f"p{LONE}")])
def test_each_field_alone_is_a_422_naming_it(client: FlaskClient, field: str,
                                              value: Any) -> None:
    response = post_raw(client, task_body(**{field: value}))

    assert response.status_code == 422, response.get_json()
    assert all(f is not None and f.startswith(field) for f in fields_named(response))


def test_a_surrogate_in_a_low_surrogate_or_a_pair_split_is_refused_too(
        client: FlaskClient) -> None:
    for text in ("\udc80", "\udbff", "a\ud83d"):  # a pair's first half alone
        assert post_raw(client, task_body(name=text)).status_code == 422
    # A whole pair is a character like any other.
    assert post_raw(client, task_body(name="run \U0001f600")).status_code == 202


def test_the_other_writes_refuse_it_too(client: FlaskClient,
                                        create_task: Callable[..., str]) -> None:
    task_id = create_task()
    patched = client.patch(f"/api/v1/tasks/{task_id}/env",
                           data=json.dumps({"set": [{"name": "LR", "value": LONE}],
                                            "unset": [f"X{LONE}"]}),
                           content_type="application/json")
    assert patched.status_code == 422
    assert fields_named(patched) >= {"set.0.value", "unset.0"}
    previewed = post_raw(client, {"env": [{"name": "A", "value": LONE}]},
                         "/api/v1/env/preview")
    assert previewed.status_code == 422 and fields_named(previewed) == {"env.0.value"}
    policy = client.put("/api/v1/policy", data=json.dumps(
        {"defaults": [{"name": "A", "value": LONE}], "protected": [],
         "rules": [{"name": "B", "min": LONE}]}), content_type="application/json")
    assert policy.status_code == 422
    assert fields_named(policy) >= {"defaults.0.value", "rules.0.min"}


def test_a_dict_key_that_cannot_be_encoded_is_named_escaped(client: FlaskClient) -> None:
    response = post_raw(client, {**task_body(), f"k{LONE}": 1})

    assert response.status_code == 422
    assert json.dumps(response.get_json())  # and the answer itself is encodable
    response.get_data(as_text=False).decode("utf-8")


# --- the console's form -----------------------------------------------------------------

def test_the_new_task_form_with_bytes_that_are_not_utf8_is_a_422_naming_the_field(
        browser: Callable[..., Browser]) -> None:
    """A browser always sends UTF-8 (it turns a lone surrogate into U+FFFD itself); a
    form whose bytes are not (``%ED%A0%80`` is a surrogate's UTF-8 form) is refused,
    naming the field, rather than read with U+FFFD in their place."""
    b = browser()
    form = "csrf={}&form_id=abcdefghijklmnop&name=res%ED%A0%80net&steps=python3+train.py"
    response = b.client.post("/ui/tasks/new", data=form.format(b.csrf()),
                             content_type="application/x-www-form-urlencoded")

    assert response.status_code == 422, response.text[:500]
    assert "name" in response.text and "UTF-8" in response.text


def test_the_new_task_form_refuses_a_path_component_too_long(
        browser: Callable[..., Browser]) -> None:
    b = browser()
    response = b.post("/ui/tasks/new", {"form_id": "abcdefghijklmnop", "name": "n",
                                        "steps": "sh x.sh", "file-0-path": "y" * 300,
                                        "file-0-content": "echo"})
    assert response.status_code == 422
    assert "255 bytes" in response.text


# --- records stored before the rule ---------------------------------------------------------

@pytest.fixture
def stored_with_a_surrogate(client: FlaskClient, tasks: TaskStore,
                            client_for: Callable[..., FlaskClient]) -> str:
    """A member's task in project vision whose name, argv and workdir hold a lone
    surrogate, written through the store as an older version of the API let it be."""
    made = client.post("/api/v1/projects", json={"name": "vision", "members": ["ann"],
                                                 "maintainers": ["mia"]})
    assert made.status_code == 201
    task_id = client_for("ann").post("/api/v1/tasks", json=task_body()).get_json()["id"]

    def spoil(doc: dict[str, Any]) -> dict[str, Any]:
        return {**doc, "name": f"res{LONE}net", "steps": [["python3", f"t{LONE}.py"]],
                "workdir": f"w{LONE}"}

    assert tasks.update(task_id, spoil) is not None
    assert tasks.get(task_id)["name"] == f"res{LONE}net"
    return str(task_id)


@pytest.mark.parametrize("who", ["mia", "admin"])
def test_a_project_list_holding_such_a_record_answers_200(
        who: str, stored_with_a_surrogate: str, client: FlaskClient,
        client_for: Callable[..., FlaskClient], browser: Callable[..., Browser]) -> None:
    api = client if who == "admin" else client_for(who)
    b = browser(who)
    task_id = stored_with_a_surrogate
    answers = [api.get(f"/api/v1/tasks/{task_id}"), api.get(f"/api/v1/tasks/{task_id}/revisions"),
               b.get("/ui/tasks?project=vision"), b.get(f"/ui/tasks/{task_id}"),
               b.get("/ui/tasks/live?project=vision"), b.get(f"/ui/tasks/{task_id}/live")]
    if who == "admin":
        answers += [api.get("/api/v1/tasks"), b.get("/ui/tasks")]
    for response in answers:
        assert response.status_code == 200, (response.request.path, response.status_code)
        response.get_data().decode("utf-8")  # well-formed UTF-8 throughout
    listed = b.get("/ui/tasks?project=vision").text
    assert "res\\ud800net" in listed  # escaped, as the JSON shows it


def test_its_owner_lists_and_reads_it_too(stored_with_a_surrogate: str,
                                          browser: Callable[..., Browser]) -> None:
    b = browser("ann")
    for path in ("/ui/tasks", f"/ui/tasks/{stored_with_a_surrogate}"):
        assert b.get(path).status_code == 200, path


# --- a path component longer than a filesystem name ------------------------------------------

def test_a_path_component_over_255_bytes_is_refused_naming_the_field_and_the_limit(
        client: FlaskClient) -> None:
    long = "x" * 300
    workdir = client.post("/api/v1/tasks", json=task_body(workdir=f"runs/{long}/a"))
    assert workdir.status_code == 422, workdir.get_json()
    [problem] = workdir.get_json()["errors"]
    assert problem["field"] == "workdir" and "255 bytes" in problem["message"]

    files = client.post("/api/v1/tasks", json=task_body(
        files=[{"path": f"{long}/a.sh", "content": "e"}, {"path": "ok.sh", "content": "e"},
               {"path": f"b/{long}", "content": "e"}]))
    assert files.status_code == 422, files.get_json()
    problems = files.get_json()["errors"]
    assert [p["field"] for p in problems] == ["files[0].path", "files[2].path"]
    assert all("255 bytes" in p["message"] and p["limit"] == 255 for p in problems)


def test_255_bytes_are_counted_in_utf8_not_characters(client: FlaskClient) -> None:
    fits, over = "é" * 127, "é" * 128  # 254 and 256 bytes
    assert client.post("/api/v1/tasks", json=task_body(workdir=fits)).status_code == 202
    assert client.post("/api/v1/tasks", json=task_body(workdir=over)).status_code == 422
    made = client.post("/api/v1/tasks", json=task_body(
        files=[{"path": f"d/{over}", "content": "x"}]))
    assert made.status_code == 422
    assert [p["field"] for p in made.get_json()["errors"]] == ["files[0].path"]


def test_every_problem_of_the_files_and_the_env_comes_in_one_answer(
        client: FlaskClient) -> None:
    response = client.post("/api/v1/tasks", json=task_body(
        env=[{"name": "1BAD", "value": "x" * (200 * 1024)}],
        files=[{"path": "y" * 256, "content": "e"}]))

    assert response.status_code == 422
    rules = {p["rule"] for p in response.get_json()["errors"]}
    assert {"file.path", "value.max_bytes", "name.shell"} <= rules
