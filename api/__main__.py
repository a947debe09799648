"""Serve the API with waitress: ``python -m api``."""

from __future__ import annotations

import logging

from waitress import serve

from api import create_app, services_of


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    app = create_app()
    settings = services_of(app).settings
    serve(app, host=settings.host, port=settings.port, threads=8, ident="taskenv")


if __name__ == "__main__":
    main()
