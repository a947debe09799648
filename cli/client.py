"""A thin client of the taskenv HTTP API (``/api/v1``): one method per call the CLI makes.

Every failure surfaces as :class:`cli.errors.ApiError`, carrying the API's error
shape, or a ``network`` error that names the URL it could not reach.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests

from cli.errors import ApiError

API_PREFIX = "/api/v1"
TIMEOUT_SECONDS = 30.0


def api_root(url: str) -> str:
    """``http://host:8080``, with or without a trailing ``/api/v1``, as the API's root."""
    root = url.rstrip("/")
    if root.endswith(API_PREFIX):
        root = root[: -len(API_PREFIX)]
    return root + API_PREFIX


def segment(value: str | int) -> str:
    """A path segment: an id typed by a user never reaches another path."""
    return quote(str(value), safe="")


def error_from(resp: requests.Response) -> ApiError:
    """The API's ``{code, message, errors}``, or the best a non-API answer allows."""
    try:
        data = resp.json()
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        problems = [p for p in data.get("errors") or [] if isinstance(p, dict)]
        return ApiError(resp.url, resp.status_code, str(data.get("code", "error")),
                        data["message"], problems)
    text = resp.text.strip()[:300] or resp.reason or "no details"
    return ApiError(resp.url, resp.status_code, f"http_{resp.status_code}", text)


class Client:
    def __init__(self, url: str, token: str | None, session: requests.Session | None = None,
                 timeout: float = TIMEOUT_SECONDS) -> None:
        self.root = api_root(url)
        self.session = session or requests.Session()
        self.timeout = timeout
        self._token = token
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def __repr__(self) -> str:
        return f"Client({self.root!r})"

    def call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = self.root + path
        try:
            resp = self.session.request(method, url, timeout=self.timeout, **kwargs)
        except requests.RequestException as exc:
            raise ApiError(url, None, "network",
                           f"cannot reach {url}: {self.describe(exc)}") from exc
        if resp.status_code >= 400:
            raise self.without_token(error_from(resp))
        return resp

    def without_token(self, error: ApiError) -> ApiError:
        """An answer that echoes the token back (a debugging proxy, say) never prints it."""
        token = self._token
        if not token:
            return error

        def hide(value: Any) -> Any:
            return value.replace(token, "[token]") if isinstance(value, str) else value

        error.message = hide(error.message)
        error.problems = [{k: hide(v) for k, v in p.items()} for p in error.problems]
        return error

    def describe(self, exc: requests.RequestException) -> str:
        if isinstance(exc, requests.Timeout):
            return f"no answer within {self.timeout:g} s"
        if isinstance(exc, requests.ConnectionError):
            return "connection failed (is the server running, and is the URL right?)"
        if isinstance(exc, (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                            requests.exceptions.InvalidSchema)):
            return "not a valid http(s) URL"
        return type(exc).__name__

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        resp = self.call(method, path, **kwargs)
        try:
            return resp.json()
        except ValueError as exc:
            raise ApiError(resp.url, resp.status_code, "bad_response",
                           f"{resp.url} did not answer with JSON") from exc

    # tasks
    def create_task(self, body: dict[str, Any],
                    idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self.json("POST", "/tasks", json=body, headers=headers)

    def task(self, task_id: str) -> dict[str, Any]:
        return self.json("GET", f"/tasks/{segment(task_id)}")

    def task_if_changed(self, task_id: str,
                        etag: str | None) -> tuple[dict[str, Any] | None, str | None]:
        """The task, or None when it is as ``etag`` left it (a ``304``); and its ETag."""
        headers = {"If-None-Match": etag} if etag else {}
        resp = self.call("GET", f"/tasks/{segment(task_id)}", headers=headers)
        if resp.status_code == 304:
            return None, etag
        try:
            doc: dict[str, Any] = resp.json()
        except ValueError as exc:
            raise ApiError(resp.url, resp.status_code, "bad_response",
                           f"{resp.url} did not answer with JSON") from exc
        return doc, resp.headers.get("ETag")

    def tasks_page(self, status: str | None, cursor: int | None,
                   limit: int = 100) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        if cursor is not None:
            params["cursor"] = cursor
        return self.json("GET", "/tasks", params=params)

    def logs(self, task_id: str, revision: int | None = None,
             replica: int | None = None) -> str:
        params = {"revision": revision} if revision else {}
        if replica is not None:
            params["replica"] = replica
        resp = self.call("GET", f"/tasks/{segment(task_id)}/logs", params=params)
        resp.encoding = resp.encoding or "utf-8"
        return resp.text

    def logs_since(self, task_id: str, revision: int, offset: int,
                   replica: int | None = None) -> tuple[str, int, int]:
        """The output after ``offset`` bytes (of every replica's log: one replica's lines
        with ``replica``): (text, where to go on, bytes dropped unread)."""
        params: dict[str, Any] = {"revision": revision, "offset": offset}
        if replica is not None:
            params["replica"] = replica
        resp = self.call("GET", f"/tasks/{segment(task_id)}/logs", params=params)
        resp.encoding = "utf-8"
        try:
            after = int(resp.headers["Log-Offset"])
            skipped = int(resp.headers.get("Log-Skipped", "0"))
        except (KeyError, ValueError) as exc:
            raise ApiError(resp.url, resp.status_code, "bad_response",
                           f"{resp.url} did not say where its log goes on (Log-Offset)") from exc
        return resp.text, after, skipped

    def cancel(self, task_id: str) -> dict[str, Any]:
        return self.json("POST", f"/tasks/{segment(task_id)}/cancel")

    def rerun(self, task_id: str, revision: int | None, pin: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"pin": pin}
        if revision is not None:
            body["revision"] = revision
        return self.json("POST", f"/tasks/{segment(task_id)}/rerun", json=body)

    def revisions(self, task_id: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.json(
            "GET", f"/tasks/{segment(task_id)}/revisions")["items"]
        return items

    def revision(self, task_id: str, number: int) -> dict[str, Any]:
        return self.json("GET", f"/tasks/{segment(task_id)}/revisions/{segment(number)}")

    def check_token(self) -> None:
        """One cheap call any valid token may make: a 401 here means the token is wrong."""
        self.call("GET", "/tasks", params={"limit": 1})

    def patch_env(self, task_id: str, set_: list[dict[str, Any]],
                  unset: list[str]) -> dict[str, Any]:
        return self.json("PATCH", f"/tasks/{segment(task_id)}/env",
                         json={"set": set_, "unset": unset})

    def env_diff(self, task_id: str, old: int, new: int, of: str = "resolved") -> dict[str, Any]:
        path = f"/tasks/{segment(task_id)}/revisions/{segment(old)}/diff/{segment(new)}"
        return self.json("GET", path, params={"of": of})

    def preview(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.json("POST", "/env/preview", json=body)

    # policy: the platform's, or with ``project`` that project's layer
    @staticmethod
    def policy_path(project: str | None) -> str:
        return "/policy" if project is None else f"/projects/{segment(project)}/policy"

    def policy(self, project: str | None = None) -> dict[str, Any]:
        return self.json("GET", self.policy_path(project))

    def put_policy(self, body: dict[str, Any], project: str | None = None) -> dict[str, Any]:
        return self.json("PUT", self.policy_path(project), json=body)

    def policy_versions(self, project: str | None = None) -> dict[str, Any]:
        return self.json("GET", f"{self.policy_path(project)}/versions")

    def policy_version(self, version: int, project: str | None = None) -> dict[str, Any]:
        return self.json("GET", f"{self.policy_path(project)}/versions/{segment(version)}")

    def policy_impact(self, body: dict[str, Any], project: str | None = None) -> dict[str, Any]:
        return self.json("POST", f"{self.policy_path(project)}/impact", json=body)

    # the doctor's catalog
    def catalog(self, project: str | None = None) -> dict[str, Any]:
        """The whole catalog that applies, page after page (the API pages by name)."""
        params: dict[str, Any] = {"project": project} if project else {}
        first = self.json("GET", "/catalog", params={**params, "limit": 500})
        entries, cursor = list(first["entries"]), first.get("next_cursor")
        while cursor:
            page = self.json("GET", "/catalog", params={**params, "limit": 500,
                                                        "cursor": cursor})
            entries += page["entries"]
            cursor = page.get("next_cursor")
        return {**first, "entries": entries, "next_cursor": None}

    def put_catalog_entry(self, name: str, body: dict[str, Any],
                          project: str | None = None) -> dict[str, Any]:
        return self.json("PUT", f"/catalog/entries/{segment(name)}", json=body,
                         params={"project": project} if project else {})

    def delete_catalog_entry(self, name: str, project: str | None = None) -> None:
        self.call("DELETE", f"/catalog/entries/{segment(name)}",
                  params={"project": project} if project else {})

    def put_catalog_settings(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.json("PUT", "/catalog/settings", json=body)

    # projects
    def projects(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.json("GET", "/projects")["items"]
        return items

    def project(self, name: str) -> dict[str, Any]:
        return self.json("GET", f"/projects/{segment(name)}")

    def create_project(self, name: str, members: list[str],
                       maintainers: list[str]) -> dict[str, Any]:
        return self.json("POST", "/projects", json={"name": name, "members": members,
                                                    "maintainers": maintainers})

    def patch_project(self, name: str, lists: dict[str, list[str]]) -> dict[str, Any]:
        """Replace the lists given (``members``, ``maintainers``); the others are kept."""
        return self.json("PATCH", f"/projects/{segment(name)}", json=lists)

    def delete_project(self, name: str) -> None:
        self.call("DELETE", f"/projects/{segment(name)}")

    # tokens
    def create_token(self, owner: str, role: str) -> dict[str, Any]:
        return self.json("POST", "/tokens", json={"owner": owner, "role": role})

    def tokens(self) -> list[dict[str, Any]]:
        return self.json("GET", "/tokens")["items"]

    def revoke_token(self, token_id: str) -> None:
        self.call("DELETE", f"/tokens/{segment(token_id)}")
