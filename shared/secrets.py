"""Secret values: sealed at rest, masked when shown, redacted from output.

A variable marked ``secret`` is stored in Redis only as a Fernet token
(``sealed``), never as ``value``.  Keys come from ``TASKENV_SECRET_KEYS``, a
comma-separated list: the first key encrypts, every key decrypts.  To rotate,
put a new key first, keep the old ones, run ``python -m api.cli rotate-secrets``
(it re-seals every record with the new key), then drop the old keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from shared.errors import SecretsUnavailable

MASK = "********"
REDACTED = "[secret]"

class Cipher:
    def __init__(self, keys: Iterable[str]) -> None:
        self._fernet = MultiFernet([Fernet(k.strip().encode()) for k in keys if k.strip()])

    @classmethod
    def from_setting(cls, value: str) -> Cipher | None:
        return cls(value.split(",")) if value.strip() else None

    def seal(self, value: str) -> str:
        return self._fernet.encrypt(value.encode()).decode()

    def open(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken:
            raise SecretsUnavailable("a secret cannot be decrypted with the configured keys "
                                     "(TASKENV_SECRET_KEYS)") from None


def new_key() -> str:
    return Fernet.generate_key().decode()


def seal_entries(entries: list[dict[str, Any]] | None, cipher: Cipher | None) -> None:
    """Replace each secret entry's ``value`` with ``sealed``, in place."""
    for entry in entries or []:
        if entry.get("secret") and "value" in entry:
            if cipher is None:
                raise SecretsUnavailable(
                    f"{entry.get('name')} is marked secret, but this platform has no secret "
                    "key configured (TASKENV_SECRET_KEYS)")
            entry["sealed"] = cipher.seal(str(entry.pop("value")))


def open_entries(entries: list[dict[str, Any]] | None, cipher: Cipher | None) -> None:
    """Inverse of :func:`seal_entries`, in place."""
    for entry in entries or []:
        if "sealed" in entry:
            if cipher is None:
                raise SecretsUnavailable("stored secrets cannot be opened: no secret key is "
                                         "configured (TASKENV_SECRET_KEYS)")
            entry["value"] = cipher.open(entry.pop("sealed"))


def masked(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An env entry or a resolved variable as shown: a secret's value is ``MASK``.

    Its sealed form is left out too.  An entry without a value, clear or sealed (a
    protected name that is only reserved), stays without one.
    """
    out = {k: v for k, v in entry.items() if k != "sealed"}
    if entry.get("secret") and ("value" in entry or "sealed" in entry):
        out["value"] = MASK
    return out


def masked_policy(policy: Mapping[str, Any]) -> dict[str, Any]:
    """A policy (``Policy.to_dict()``) as shown: secret defaults and protected values masked."""
    return {**policy, "defaults": [masked(d) for d in policy["defaults"]],
            "protected": [masked(p) for p in policy["protected"]]}


def blanked(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry as a form shows it: a secret's field starts empty, its value is write-only."""
    secret = bool(entry.get("secret"))
    out = {k: v for k, v in entry.items() if k != "sealed"}
    return {**out, "value": "" if secret else (out.get("value") or ""), "secret": secret}


def redact(text: str, secrets: Iterable[str]) -> str:
    """Hide secret values that a script printed, before its output is stored."""
    for value in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text
