"""Secret values: sealed at rest, masked when shown, redacted from output.

A variable marked ``secret`` is stored in Redis only as a Fernet token
(``sealed``), never as ``value``.  Keys come from ``TASKENV_SECRET_KEYS``, a
comma-separated list: the first key encrypts, every key decrypts.  To rotate,
put a new key first, keep the old ones, run ``python -m api.cli rotate-secrets``
(it re-seals every record with the new key), then drop the old keys.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import heapq
import hmac
import json
import re
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cached_property, lru_cache
from typing import Any
from urllib.parse import quote, quote_plus

import ahocorasick
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


# What a key's fingerprint is the HMAC of: a purpose of its own, so a fingerprint is no
# key any other use derives from the same secret (shared.derived_keys).
FINGERPRINT_PURPOSE = b"taskenv: which secret key this is"


def key_fingerprints(setting: str) -> list[str]:
    """The fingerprint of each key of ``TASKENV_SECRET_KEYS``, in order (the first is
    the one that seals): HMAC-SHA256 of a fixed purpose under the key, in hex.  It tells
    one key from another and says nothing of the key, so it may be stored and shown."""
    return [hmac.new(k.strip().encode(), FINGERPRINT_PURPOSE, hashlib.sha256).hexdigest()
            for k in setting.split(",") if k.strip()]


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
    forms = _forms(_secret_set(secrets))
    return forms.redacted(text, len(text))[0] if forms else text


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
    and keeps back the tail that could still begin one (when it looks, the shortest
    such tail, at most the longest form's length minus one), ``flush`` emits the rest at
    the end of the stream.  What comes out is exactly what redacting the whole stream at
    once would give: the leftmost form, the longest where several start at one place.

    The work is linear in the output, whatever the secrets: what is kept back is looked
    at again only once as much new output has come after it (until then a feed keeps
    the new text back too, so at most twice the longest form is held; a tail of a few
    characters, the usual case, is looked at again at every feed), and one look costs
    in proportion to what it looks at (see :class:`_Forms`).
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self._forms = _forms(_secret_set(secrets))
        self._pending = ""  # kept back: it may begin a secret
        self._unread: list[str] = []  # arrived since the last look
        self._unread_size = 0

    def feed(self, text: str) -> str:
        if self._forms is None:
            return text
        self._unread.append(text)
        self._unread_size += len(text)
        if self._unread_size < len(self._pending):
            return ""
        buffer = self._pending + "".join(self._unread)
        self._unread, self._unread_size = [], 0
        decided = max(0, len(buffer) - self._forms.keep)
        out, self._pending = self._forms.redacted(buffer, decided)
        return out

    def flush(self) -> str:
        """The text kept back, redacted: call it once the stream has ended."""
        rest = self._pending + "".join(self._unread)
        self._pending, self._unread, self._unread_size = "", [], 0
        return self._forms.redacted(rest, len(rest))[0] if self._forms else rest


# --- the search -----------------------------------------------------------------------------

# Characters of a form's start (and of its end) that every match of it begins (ends) with.
GRAM = 3


def _secret_set(secrets: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(secrets)))


@lru_cache(maxsize=32)
def _forms(secrets: tuple[str, ...]) -> _Forms | None:
    """The search for one set of secrets, built once per process for each set (a log sync
    redacts each piece of a task's output with the same secrets; the process holds them
    while it redacts anyway)."""
    targets = redaction_targets(secrets)
    return _Forms(targets) if targets else None


def _grams(words: Iterable[str]) -> ahocorasick.Automaton:
    automaton = ahocorasick.Automaton()
    for word in set(words):
        automaton.add_word(word, len(word))
    automaton.make_automaton()
    return automaton


class _Forms:
    """Where the forms of a set of secrets are in a text, in time linear in the text.

    A regex alternation tries each form at each place, and a text that follows a long
    form for a while before it differs (``"A" * 40_000 + "B"`` against a run of ``A``)
    costs the form's length at every place; pyahocorasick's search, too, walks its
    failure links at every place it reports nothing (measured: the same run costs it the
    form's length per character).  So: a form can only start where its first
    :data:`GRAM` characters are, and end where its last ones are; an Aho–Corasick
    automaton of those few characters (pyahocorasick, no deeper than :data:`GRAM`, so
    linear) finds the places in C, and most output has none.  Where there are, an
    automaton of the forms read backwards (:class:`_Backwards`) says, in one pass, the
    longest form that starts at each place; the leftmost-longest choice is then a walk
    over those places.  Whether a tail may begin a form is one binary search in the
    sorted forms.
    """

    def __init__(self, targets: list[str]) -> None:
        self.targets = sorted(targets)
        self.keep = max(map(len, targets)) - 1
        self._starts = _grams(t[:GRAM] for t in targets)
        self._ends = _grams(t[::-1][:GRAM] for t in targets)

    @cached_property
    def _backwards(self) -> _Backwards:
        return _Backwards(self.targets)

    def redacted(self, text: str, decided: int) -> tuple[str, str]:
        """``text`` with every form that starts before ``decided`` hidden, up to the first
        place from there that may begin a form; and the rest, kept back."""
        found = self.longest_at(text)
        out: list[str] = []
        pos = 0
        for low, high, size in found:  # every place in [low, high) starts a form of size
            start = max(low, pos)
            end = min(high, decided)
            if start < end:
                count = -(-(end - start) // size)  # leftmost-longest, one after another
                out += [text[pos:start], REDACTED * count]
                pos = start + count * size
        hold = self._hold(text, max(pos, decided), found)
        out.append(text[pos:hold])
        return "".join(out), text[hold:]

    def longest_at(self, text: str) -> list[tuple[int, int, int]]:
        """``(low, high, size)``, in order: at each place in ``[low, high)`` the longest
        form that starts there is ``size`` long; no form starts anywhere else."""
        backwards = text[::-1]
        places = _Places(self._ends, backwards)
        if places.first_from(0) is None or _Places(self._starts, text).first_from(0) is None:
            return []
        n = len(text)
        found = self._backwards.matches(backwards, places.first_from)
        return [(n - last, n - first + 1, size) for first, last, size in reversed(list(found))]

    def _hold(self, text: str, start: int, found: list[tuple[int, int, int]]) -> int:
        """The first place from ``start`` where a form starts, or where the text's end
        may be the beginning of one.  The prefix checks are bounded: past a budget of
        a few times the tail's length, the place being checked is held (too early,
        never too late: what is held is looked at again)."""
        if start >= len(text):
            return len(text)
        first = next((max(low, start) for low, high, _ in found if high > start), len(text))
        budget = 4 * (len(text) - start) + 4096
        for at in self._maybe_starting(text, start, first):
            budget -= len(text) - at
            if budget < 0 or self._begins_one(text[at:]):
                return at
        return first

    def _maybe_starting(self, text: str, start: int, stop: int) -> Iterator[int]:
        """In order, each place in ``[start, stop)`` where a form's first characters are,
        and each of the text's last places, too short to hold them, that may begin them."""
        pending: list[int] = []
        for end, size in self._starts.iter(text, start, min(len(text), stop + GRAM - 1)):
            heapq.heappush(pending, end - size + 1)
            while pending and pending[0] <= end - GRAM:  # no later find starts before it
                yield heapq.heappop(pending)
        last = range(max(start, len(text) - GRAM + 1), stop)
        yield from sorted(at for at in set(pending).union(last) if at < stop)

    def _begins_one(self, tail: str) -> bool:
        """Some form starts with ``tail``."""
        at = bisect.bisect_left(self.targets, tail)
        return at < len(self.targets) and self.targets[at].startswith(tail)


class _Backwards:
    """Aho–Corasick over the forms read backwards, with its failure links: read over a
    text backwards, the longest form matched where it stands is the longest form that
    starts there in the text.  Plain arrays (a node's first child inline, the others in
    a dict), so a long secret's forms cost a few bytes a character.  Written here
    because no library at hand reports only the longest match at each place, in
    linear time."""

    def __init__(self, targets: Iterable[str]) -> None:
        self.char: list[str] = [""]
        self.child = array("q", [0])
        self.more: dict[int, dict[str, int]] = {}
        self.depth = array("q", [0])
        self.longest = array("q", [0])
        for target in targets:
            node = 0
            for c in reversed(target):
                node = self._child(node, c) or self._add(node, c)
            self.longest[node] = len(target)
        self.fail = array("q", bytes(8 * len(self.char)))
        self._link()

    def _child(self, node: int, c: str) -> int:
        if self.char[node] == c:
            return self.child[node]
        more = self.more.get(node)
        return more.get(c, 0) if more else 0

    def _add(self, node: int, c: str) -> int:
        new = len(self.char)
        self.char.append("")
        self.child.append(0)
        self.depth.append(self.depth[node] + 1)
        self.longest.append(0)
        if not self.char[node]:
            self.char[node], self.child[node] = c, new
        else:
            self.more.setdefault(node, {})[c] = new
        return new

    def _children(self, node: int) -> list[tuple[str, int]]:
        first = [(self.char[node], self.child[node])] if self.char[node] else []
        return first + list(self.more.get(node, {}).items())

    def _link(self) -> None:
        """Failure links, breadth first; a node matches what its link matches if it
        ends no form itself."""
        queue = deque(child for _, child in self._children(0))
        while queue:
            node = queue.popleft()
            for c, child in self._children(node):
                self.fail[child] = self._step(self.fail[node], c) if node else 0
                if not self.longest[child]:
                    self.longest[child] = self.longest[self.fail[child]]
                queue.append(child)

    def _step(self, node: int, c: str) -> int:
        while True:
            found = self._child(node, c)
            if found or not node:
                return found
            node = self.fail[node]

    def matches(self, text: str, start_from: Callable[[int], int | None]
                ) -> Iterator[tuple[int, int, int]]:
        """``(first, last, size)``: the longest form ending right before each place
        ``after`` in ``[first, last]`` of ``text`` is ``size`` long, wherever one ends.

        ``start_from(at)``: the first place from ``at`` where a form may start (None if
        none); stretches where no partial match can reach one are skipped.  A run of one
        character that leaves the automaton where it is (``A`` after ``"A" * 40_000``
        when the form goes on with ``B``) is passed in one step.  The hot loop, with its
        lookups inlined."""
        char, child, more, fail = self.char, self.child, self.more, self.fail
        depth, longest = self.depth, self.longest
        size = len(text)
        node, at = 0, start_from(0)
        following = at
        while at is not None and at < size:
            c = text[at]
            before = node
            while True:  # the automaton's step
                if char[node] == c:
                    node = child[node]
                    break
                branch = more.get(node)
                if branch is not None and c in branch:
                    node = branch[c]
                    break
                if not node:
                    break
                node = fail[node]
            after = at + 1
            if node == before:  # stays here as long as c repeats
                after = _run_end(text, at, c)
            if longest[node]:
                yield at + 1, after, longest[node]
            at = after
            if following is not None and following < at - depth[node]:
                following = start_from(at - depth[node])  # the partials start from there
            if following is None:
                return
            if following > at:
                node, at = 0, following


class _Places:
    """The places where one of ``grams`` starts in ``text``, asked for in increasing order.

    pyahocorasick copies the whole text each time a search begins, so a search begins
    only on a window of :data:`WINDOW` characters, one after the other; a question past
    the window opens a new one there (what lies between is never searched: a run passed
    in one step costs nothing here).  Each character is searched about once."""

    WINDOW = 4096

    def __init__(self, grams: ahocorasick.Automaton, text: str) -> None:
        self._grams, self._text = grams, text
        self._found: list[int] = []  # places found, not yet passed (a heap)
        self._start = self._end = self._sure = 0
        self._hits: Iterator[tuple[int, int]] = iter(())
        self._open(0)

    def first_from(self, at: int) -> int | None:
        """The first place from ``at``; None if there is none."""
        if at > self._sure and at > self._end - GRAM:  # past what the window can find
            self._found.clear()
            self._open(at)
        while True:
            while self._found and self._found[0] < at:
                heapq.heappop(self._found)
            if self._found and self._found[0] < self._sure:
                return self._found[0]
            if not self._more():
                return self._found[0] if self._found else None

    def _open(self, at: int) -> None:
        self._start, self._end = at, min(len(self._text), at + self.WINDOW)
        self._hits = self._grams.iter(self._text[at:self._end])
        self._sure = max(self._sure, at)  # every place before is known (or not wanted)

    def _more(self) -> bool:
        """Find one more place, or learn that none is left before ``_sure``; False once
        the text is searched to its end."""
        for end, size in self._hits:
            heapq.heappush(self._found, self._start + end - size + 1)
            self._sure = max(self._sure, self._start + end - GRAM + 2)
            return True
        if self._end >= len(self._text):
            self._sure = len(self._text)
            return False
        self._sure = max(self._sure, self._end - GRAM + 1)
        self._open(self._end - GRAM + 1)  # a place that the window's end cut is found here
        return True


def _run_end(text: str, at: int, c: str) -> int:
    """The end of the run of ``c`` that starts at ``at``."""
    found = re.compile(re.escape(c) + "+").match(text, at)
    return found.end() if found else at + 1
