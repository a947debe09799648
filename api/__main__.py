"""Serve the API with waitress: ``python -m api``.

It starts only if Redis answers and its secret keys are the platform's
(``workers.startup``): otherwise it exits with code 2, saying what is missing.
On SIGTERM (or SIGINT) the API stops accepting connections, finishes the requests
it has in hand and sends their responses, then exits: a rolling update or a scale
down loses no request.  Waitress has no graceful stop of its own (its ``serve``
drops what is in flight), so the loop below runs waitress's own event loop one
turn at a time and stops only when its worker threads are idle and every answer
has been sent, or after ``DRAIN_SECONDS`` (under Kubernetes'
``terminationGracePeriodSeconds``).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

from flask import Flask
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer, create_server
from waitress.wasyncore import close_all, dispatcher, loop

from api import create_app
from api.context import services_of
from shared import logs
from shared.config import process_settings
from workers.startup import refuse_unless_ready

log = logging.getLogger("taskenv.api")
DRAIN_SECONDS = 25.0
THREADS = 8


def busy(server: BaseWSGIServer) -> bool:
    """A request is queued, being answered, or its answer is still being sent."""
    dispatcher = server.task_dispatcher
    if dispatcher.active_count or dispatcher.queue:
        return True
    return any(isinstance(channel, HTTPChannel) and (channel.requests or
                                                     channel.total_outbufs_len)
               for channel in list(server._map.values()))


def serve_until(server: BaseWSGIServer, stop: threading.Event,
                drain_seconds: float = DRAIN_SECONDS) -> None:
    """Serve until ``stop`` is set, then drain what is in flight and close."""
    timeout = 0.2  # how soon a stop is noticed
    poll = server.adj.asyncore_use_poll
    while not stop.is_set():
        loop(timeout=timeout, map=server._map, use_poll=poll, count=1)
    # No new connections from here on; the trigger stays open, the threads still use it.
    dispatcher.close(server)
    deadline = time.monotonic() + drain_seconds
    while busy(server) and time.monotonic() < deadline:
        loop(timeout=timeout, map=server._map, use_poll=poll, count=1)
    if busy(server):
        log.warning("stopping with requests still in flight after %.0fs", drain_seconds)
    server.task_dispatcher.shutdown(cancel_pending=True, timeout=1)
    close_all(server._map)


def make_server(app: Flask) -> BaseWSGIServer:
    settings = services_of(app).settings
    server = create_server(app, host=settings.host, port=settings.port, threads=THREADS,
                           ident="taskenv")
    assert isinstance(server, BaseWSGIServer)  # one address: not a multi-socket server
    return server


def main() -> None:
    settings = process_settings()
    logs.configure(settings.log_format)
    # Redis answering and the platform's secret keys, or no start (workers.startup).
    refuse_unless_ready(settings, "the API")
    app = create_app()
    server = make_server(app)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %s: finishing the requests in flight, then stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("serving on http://%s:%s", server.effective_host, server.effective_port)
    serve_until(server, stop)


if __name__ == "__main__":
    main()
