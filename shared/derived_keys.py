"""Keys for one purpose each, derived from the configured secrets.

The secret keys (``TASKENV_SECRET_KEYS``) come first, in their order, so the first
key signs and every key verifies, and a key rotation keeps what was signed before it
valid; without them, the session secret.  Each purpose gets its own key (HMAC-SHA256
of the purpose under the secret), so a value made for one purpose never verifies
for another and no configured secret is used as it is.
"""

from __future__ import annotations

import hashlib
import hmac

from shared.config import Settings


def derived_keys(settings: Settings, purpose: bytes) -> list[bytes]:
    """32-byte keys for ``purpose``; empty when no secret is configured at all."""
    sources = [k.strip() for k in settings.secret_keys.split(",") if k.strip()]
    if not sources and settings.session_secret:
        sources = [settings.session_secret]
    return [hmac.new(s.encode(), purpose, hashlib.sha256).digest() for s in sources]
