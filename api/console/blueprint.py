"""The console's one blueprint.

Every console module adds its routes to this ``bp``; :func:`api.console.app.init_app`
imports them all and registers it, once.  It lives alone so that route modules
import it without importing each other.
"""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("pages", __name__)
