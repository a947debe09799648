"""List cursors are opaque: a client can neither read the platform's sequence nor forge one."""

from __future__ import annotations

from collections.abc import Callable

from flask.testing import FlaskClient

TASKS = "/api/v1/tasks"


def test_pages_follow_an_opaque_cursor(client: FlaskClient,
                                       create_task: Callable[..., str]) -> None:
    made = [create_task(name=f"t{i}") for i in range(3)]
    seen, cursor, cursors = [], None, []
    while True:
        query = "?limit=1" + (f"&cursor={cursor}" if cursor else "")
        data = client.get(TASKS + query).get_json()
        seen += [t["id"] for t in data["items"]]
        cursor = data["next_cursor"]
        if cursor is None:
            break
        cursors.append(cursor)

    assert seen == made[::-1]
    assert len(cursors) == 2
    for cursor in cursors:
        assert isinstance(cursor, str) and not cursor.isdigit() and len(cursor) > 40
    assert cursors[0] != cursors[1]


def test_a_tampered_cursor_is_a_400_in_the_one_error_shape(
        client: FlaskClient, create_task: Callable[..., str], error_shape) -> None:
    for i in range(2):
        create_task(name=f"t{i}")
    cursor = client.get(TASKS + "?limit=1").get_json()["next_cursor"]
    tampered = cursor[:-4] + ("AAAA" if not cursor.endswith("AAAA") else "BBBB")

    for bad in (tampered, "1", "not-a-cursor"):
        resp = client.get(f"{TASKS}?cursor={bad}")
        assert resp.status_code == 400, bad
        error_shape(resp.get_json(), "bad_request")


def test_the_openapi_document_says_cursors_are_strings(client: FlaskClient) -> None:
    spec = client.get("/api/v1/openapi.json").get_json()
    params = spec["paths"]["/api/v1/tasks"]["get"]["parameters"]
    [cursor] = [p for p in params if p["name"] == "cursor"]
    assert cursor["schema"]["type"] == "string"
    page = spec["components"]["schemas"]["TaskPage"]["properties"]["next_cursor"]
    assert page["type"] == "string"
