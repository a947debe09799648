"""Secret values: sealed at rest, masked when shown, redacted from output.

A variable marked ``secret`` is stored in Redis only as a Fernet token
(``sealed``), never as ``value``.  Keys come from ``TASKENV_SECRET_KEYS``, a
comma-separated list: the first key encrypts, every key decrypts.  To rotate,
put a new key first, keep the old ones, run ``python -m api.cli rotate-secrets``
(it re-seals every record with the new key), then drop the old keys.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from shared.errors import SecretsUnavailable

MASK = "********"
REDACTED = "[secret]"
# GitLab's rule for masked variables: shorter values are refused (shared.env.envlist).
MIN_SECRET_LENGTH = 8
# Lines of a multi-line secret at least this long are hidden on their own too.
MIN_LINE_REDACTED = MIN_SECRET_LENGTH
# A secret (or line of one) at least this long is hidden in its encoded forms too.  At 8
# characters the shortest form, the base64 of the value less its first two bytes, is 8
# characters of base64 that only that value gives: ordinary output is not garbled.
MIN_ENCODED = MIN_SECRET_LENGTH


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


def secret_forms(secrets: Iterable[str]) -> set[str]:
    """Every secret value, and each long enough line of a multi-line one.

    A multi-line value (a PEM key) is hidden whole wherever it appears; each of its
    lines of at least :data:`MIN_LINE_REDACTED` characters is hidden too, so a script
    that prints one line of a key does not show that line.  Shorter lines (``-----``,
    an empty line) are left alone: hiding them would hide ordinary output.  Every
    non-empty value counts, however short: values under the 8-character minimum can
    only come from records written before that rule, and a mangled log is better
    than a shown secret.
    """
    forms: set[str] = set()
    for value in secrets:
        if value:
            forms.add(value)
        if "\n" in value or "\r" in value:
            forms |= {line for line in re.split(r"\r?\n|\r", value)
                      if len(line) >= MIN_LINE_REDACTED}
    return forms


def encodings(value: str) -> set[str]:
    """The encoded forms of one secret that output must not show either, as GitHub
    Actions' runner masks them: base64 at each of the three byte offsets a value can
    start at inside an encoded text (``base64("user:" + password)``), standard and
    URL-safe alphabets; URL encoding (``%20`` and ``+`` for a space); the inside of a
    JSON string (ASCII-escaped or not).  Only for values of at least
    :data:`MIN_ENCODED` characters; forms equal to the value are left out.
    """
    if len(value) < MIN_ENCODED:
        return set()
    raw = value.encode("utf-8", "surrogatepass")
    forms = {_url(value, plus) for plus in (False, True)}
    forms |= {json.dumps(value, ensure_ascii=ascii)[1:-1] for ascii in (True, False)}
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(_base64_core(raw[shift:], encode))
    return {f for f in forms if f and f != value}


def _url(value: str, plus: bool) -> str:
    return quote_plus(value, safe="") if plus else quote(value, safe="")


def _base64_core(raw: bytes, encode: Any) -> str:
    """The base64 characters that depend on ``raw`` alone: the ones the bytes after it
    share (the last, partial one, and padding) are cut, so the form is found inside
    any longer encoded text that has ``raw`` at a 3-byte boundary."""
    whole = len(raw) * 8 // 6
    return str(encode(raw).decode()[:whole])


def redaction_targets(secrets: Iterable[str]) -> list[str]:
    """The strings output must never show, longest first: every form of every secret
    (:func:`secret_forms`) and the encodings of each (:func:`encodings`)."""
    forms = secret_forms(secrets)
    targets = set(forms)
    for form in forms:
        targets |= encodings(form)
    return sorted(targets, key=lambda t: (-len(t), t))


def redact(text: str, secrets: Iterable[str]) -> str:
    """Hide secret values in one complete text (for a stream, use :class:`StreamRedactor`)."""
    redactor = StreamRedactor(secrets)
    return redactor.feed(text) + redactor.flush()


def redact_cut(text: str, secrets: Iterable[str]) -> str:
    """Hide secret values in the start of an output whose rest will never be read.

    Whatever at the end of ``text`` could be the beginning of a secret is dropped rather
    than shown: the cut may have fallen inside one.
    """
    return StreamRedactor(secrets).feed(text)


class StreamRedactor:
    """Hide secret values in output that arrives in pieces, before it is stored.

    A secret may be cut anywhere by the writes that carry it (a line break, a pipe's
    chunk, one byte at a time): ``feed`` emits what can no longer be part of a secret
    and keeps back the shortest tail that could still begin one (at most the longest
    secret's length minus one), ``flush`` emits the rest at the end of the stream.
    What comes out is exactly what redacting the whole stream at once would give.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        targets = redaction_targets(secrets)
        # Alternatives are tried in order: the longest wins where several start at one spot.
        self._pattern = re.compile("|".join(map(re.escape, targets))) if targets else None
        # Targets by their first one and first two characters: a position is checked only
        # against those that could start there (base64 forms start with any letter or
        # digit; checking all would cost every target at every position).
        self._by_first: dict[str, list[str]] = {}
        self._by_two: dict[str, list[str]] = {}
        for target in targets:
            self._by_first.setdefault(target[0], []).append(target)
            self._by_two.setdefault(target[:2], []).append(target)
        self._keep = max((len(t) for t in targets), default=1) - 1
        self._pending = ""

    def feed(self, text: str) -> str:
        if self._pattern is None:
            return text
        buffer = self._pending + text
        # A match starting before ``cut`` has all the text it could need to be decided.
        cut = max(0, len(buffer) - self._keep)
        out: list[str] = []
        pos = 0
        for match in self._pattern.finditer(buffer):
            if match.start() >= cut:
                break
            out += [buffer[pos:match.start()], REDACTED]
            pos = match.end()
        hold = self._hold_from(buffer, max(pos, cut))
        out.append(buffer[pos:hold])
        self._pending = buffer[hold:]
        return "".join(out)

    def flush(self) -> str:
        """The text kept back, redacted: call it once the stream has ended."""
        rest, self._pending = self._pending, ""
        return self._pattern.sub(REDACTED, rest) if self._pattern else rest

    def _hold_from(self, buffer: str, start: int) -> int:
        """The first position from ``start`` where a secret starts or may start."""
        last = len(buffer) - 1
        for at in range(start, len(buffer)):
            if at == last:  # one character left: any target it begins
                return at if buffer[at] in self._by_first else len(buffer)
            candidates = self._by_two.get(buffer[at:at + 2])
            if candidates and any(_agree(buffer, at, target) for target in candidates):
                return at
            if buffer[at] in self._by_two:  # a one-character target (an old record's)
                return at
        return len(buffer)


def _agree(buffer: str, at: int, target: str) -> bool:
    """``buffer`` from ``at`` and ``target`` are equal over their common length."""
    common = min(len(target), len(buffer) - at)
    return buffer.startswith(target[:common], at)
