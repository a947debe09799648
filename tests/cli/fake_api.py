"""A small HTTP server that plays scripted API answers and records every request.

Each route holds a list of answers given in order; the last one repeats.  It runs
a real werkzeug server on a free loopback port, so the client is tested through
real sockets, headers and encodings.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response


@dataclass
class Seen:
    method: str
    path: str  # as sent, percent-encoding kept
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Answer:
    status: int
    body: Any = None  # JSON, or str for text/plain
    headers: dict[str, str] = field(default_factory=dict)

    def response(self, request: Request) -> Response:
        if self.status == 304:
            return Response(status=304, headers=self.headers)
        if isinstance(self.body, str):
            return Response(self.body, self.status, mimetype="text/plain",
                            headers=self.headers)
        return Response(json.dumps(self.body), self.status, mimetype="application/json",
                        headers=self.headers)


@dataclass
class Log(Answer):
    """A log as it stands at this answer: with ``?offset=n``, the bytes after n and the
    Log-Offset header, as the API answers; without, the whole text."""

    def response(self, request: Request) -> Response:
        data = str(self.body).encode()
        if "offset" not in request.args:
            return Response(data, self.status, mimetype="text/plain")
        offset = int(request.args["offset"])
        return Response(data[offset:], self.status, mimetype="text/plain",
                        headers={"Log-Offset": str(len(data)), "Log-Skipped": "0"})


@dataclass
class RevisionLogs(Answer):
    """Each revision's log as it stands at this answer (``body``: revision -> text), read
    as :class:`Log` reads one, the revision asked for by ``?revision=n``."""

    def response(self, request: Request) -> Response:
        logs: dict[int, str] = self.body
        text = logs.get(int(request.args.get("revision", max(logs))), "")
        return Log(self.status, text).response(request)


def api_error(status: int, code: str, message: str, *problems: dict[str, Any]) -> Answer:
    return Answer(status, {"code": code, "message": message, "errors": list(problems)})


@dataclass
class FakeApi:
    routes: dict[tuple[str, str], list[Answer]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    base: str = ""

    def on(self, method: str, path: str, *answers: Answer) -> None:
        self.routes[(method, "/api/v1" + path)] = list(answers)

    def requests_to(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path == "/api/v1" + path]

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        path = environ.get("RAW_URI", environ["PATH_INFO"]).split("?")[0]
        body = request.get_json(silent=True) if request.data else None
        self.seen.append(Seen(request.method, path, dict(request.args),
                              dict(request.headers), body))
        answers = self.routes.get((request.method, path))
        if not answers:
            answer = api_error(404, "not_found", f"no route {request.method} {path}")
        else:
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return answer.response(request)(environ, start_response)


@contextmanager
def serving() -> Iterator[FakeApi]:
    api = FakeApi()
    server = make_server("127.0.0.1", 0, api, threaded=True)
    api.base = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        thread.join(5)
