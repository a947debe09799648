"""A stopping API finishes the requests in flight and accepts no new ones."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import requests
from flask import Flask
from waitress.server import BaseWSGIServer, create_server

from api.__main__ import serve_until


def slow_app(started: threading.Event) -> Flask:
    app = Flask(__name__)

    @app.get("/slow")
    def slow() -> str:
        started.set()
        time.sleep(1.0)
        return "done"

    return app


def test_a_stop_waits_for_the_request_in_flight_then_refuses_new_ones() -> None:
    started, stop = threading.Event(), threading.Event()
    server = create_server(slow_app(started), host="127.0.0.1", port=0, threads=2)
    assert isinstance(server, BaseWSGIServer)
    port = server.effective_port
    serving = threading.Thread(target=serve_until, args=(server, stop, 10.0))
    serving.start()
    answers: list[requests.Response] = []
    client = threading.Thread(target=lambda: answers.append(
        requests.get(f"http://127.0.0.1:{port}/slow", timeout=10)))
    client.start()
    assert started.wait(5)
    stop.set()  # what SIGTERM does, while /slow is still sleeping
    client.join(10)
    serving.join(10)
    assert not serving.is_alive()
    assert [(a.status_code, a.text) for a in answers] == [(200, "done")]
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
