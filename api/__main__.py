"""Serve the API with waitress: ``python -m api``."""

from __future__ import annotations

import logging

from waitress import serve

from api import create_app
from shared.config import Settings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings.from_env()
    serve(create_app(), host=settings.host, port=settings.port, threads=8, ident="taskenv")


if __name__ == "__main__":
    main()
