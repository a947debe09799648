"""Opaque list cursors.

A page of tasks ends at a position in the platform-wide creation order; handing
that number out would tell every user how many tasks the whole platform makes.
The cursor is the position encrypted and authenticated (Fernet), so a client can
neither read it nor forge one; a cursor that does not open is a 400.
"""

from __future__ import annotations

import base64
import functools
import secrets

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from api.context import svc
from shared.config import Settings
from shared.derived_keys import derived_keys
from shared.errors import BadRequest

PURPOSE = b"taskenv list cursor"


@functools.cache
def _fernet(settings: Settings) -> MultiFernet:
    # Without any configured secret, cursors hold only in the process that made them.
    keys = derived_keys(settings, PURPOSE) or [secrets.token_bytes(32)]
    return MultiFernet([Fernet(base64.urlsafe_b64encode(k)) for k in keys])


def encode(position: int | None) -> str | None:
    if position is None:
        return None
    return _fernet(svc().settings).encrypt(str(position).encode()).decode()


def encode_name(name: str | None) -> str | None:
    """A cursor after ``name`` in a listing by name (the catalog's)."""
    if name is None:
        return None
    return _fernet(svc().settings).encrypt(name.encode("utf-8", "surrogatepass")).decode()


def decode_name(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        return _fernet(svc().settings).decrypt(cursor.encode()).decode("utf-8", "surrogatepass")
    except (InvalidToken, ValueError):
        raise BadRequest("cursor: not a cursor this service gave out; pass next_cursor "
                         "back as it came") from None


def decode(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    try:
        return int(_fernet(svc().settings).decrypt(cursor.encode()))
    except (InvalidToken, ValueError):
        raise BadRequest("cursor: not a cursor this service gave out; pass next_cursor "
                         "back as it came") from None
