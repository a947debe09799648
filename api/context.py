"""The services of the app answering the current request.

Kept apart from ``api/__init__.py`` (which builds the app and imports every
resource) so that a resource needs nothing from its package's ``__init__``: the
modules import this, and the app factory imports them, never the other way round.
"""

from __future__ import annotations

from flask import Flask, current_app

from workers.services import Services


def svc() -> Services:
    """The services of the app handling the current request."""
    return services_of(current_app)


def services_of(app: Flask) -> Services:
    services: Services = app.extensions["taskenv"]
    return services
