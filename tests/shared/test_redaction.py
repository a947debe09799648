"""Secret values are hidden from output whole, however the output is cut into writes."""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.secrets import (
    MIN_ENCODED,
    REDACTED,
    StreamRedactor,
    encodings,
    redact,
    redaction_targets,
    secret_forms,
)

PEM = ("-----BEGIN PRIVATE KEY-----\n"
       "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
       "kq9vXg3nT0Zb1cZl0dWlq8Yx1c2yQxJm0s8M7bqk4l3ZpC1d\n"
       "-----END PRIVATE KEY-----\n")
TOKEN = "tok-0123456789"


def streamed(text: str, secrets: list[str], size: int) -> str:
    redactor = StreamRedactor(secrets)
    pieces = [redactor.feed(text[i:i + size]) for i in range(0, len(text), size)]
    return "".join(pieces) + redactor.flush()


def test_a_pem_key_printed_whole_is_hidden_whole() -> None:
    out = redact(f"key:\n{PEM}done\n", [PEM])
    assert out == f"key:\n{REDACTED}done\n"


def test_a_secret_fed_one_character_at_a_time_never_comes_out() -> None:
    text = f"before {PEM} middle {TOKEN} after"
    out = streamed(text, [PEM, TOKEN], 1)
    assert out == f"before {REDACTED} middle {REDACTED} after"


def test_each_long_line_of_a_multi_line_secret_is_hidden_on_its_own() -> None:
    line = PEM.splitlines()[1]
    out = streamed(f"only one line: {line}\n-----\n", [PEM], 3)
    assert line not in out
    assert out == f"only one line: {REDACTED}\n-----\n"  # short lines are ordinary output


def test_short_lines_of_a_multi_line_secret_are_not_targets() -> None:
    assert secret_forms(["abcdefghij\nxy\n"]) == {"abcdefghij\nxy\n", "abcdefghij"}


def test_output_without_a_secret_prefix_is_not_held_back() -> None:
    redactor = StreamRedactor([TOKEN])
    assert redactor.feed("epoch 1 loss 0.3\n") == "epoch 1 loss 0.3\n"
    assert redactor.feed("tok-01") == ""  # could still become the secret
    assert redactor.feed("23 and more\n") == "tok-0123 and more\n"
    assert redactor.flush() == ""


def test_the_longest_secret_wins_where_two_start_at_one_place() -> None:
    short, long = "abcdefgh", "abcdefgh-and-more"
    assert streamed(f"x {long} y {short} z", [short, long], 2) == \
        f"x {REDACTED} y {REDACTED} z"


def test_what_is_kept_back_comes_out_on_flush() -> None:
    redactor = StreamRedactor([TOKEN])
    assert redactor.feed("end tok-01") == "end "
    assert redactor.flush() == "tok-01"


def test_without_secrets_text_passes_through_at_once() -> None:
    redactor = StreamRedactor([])
    assert redactor.feed("anything") == "anything" and redactor.flush() == ""


def test_a_three_character_secret_from_an_old_record_is_still_hidden() -> None:
    assert redact("pin=abc;", ["abc"]) == f"pin={REDACTED};"


secret_text = st.text(alphabet="ab\n-", min_size=1, max_size=12)


@given(secrets=st.lists(secret_text, min_size=1, max_size=3),
       text=st.text(alphabet="ab\n-x", max_size=80), size=st.integers(1, 9))
def test_streaming_gives_exactly_what_redacting_the_whole_text_gives(
        secrets: list[str], text: str, size: int) -> None:
    targets = redaction_targets(secrets)
    whole = re.compile("|".join(map(re.escape, targets))).sub(REDACTED, text)
    assert streamed(text, secrets, size) == whole
    for secret in secrets:
        assert secret not in streamed(text, secrets, size).replace(REDACTED, "\0")


# --- encoded forms, as a step would print them to get a secret past an exact match -------

HOSTILE = 'p@ss w0rd/+"\\é?&=\u00e9-long'


def _b64_inside(prefix: bytes, secret: str, suffix: bytes = b"\n") -> str:
    return base64.b64encode(prefix + secret.encode() + suffix).decode()


@pytest.mark.parametrize("prefix", [b"", b"u:", b"user:", b"ab", b"a", b"abc:"])
def test_base64_of_a_secret_after_any_prefix_is_hidden(prefix: bytes) -> None:
    """``echo -n "user:$PASSWORD" | base64``: the secret starts at byte 0, 1 or 2 of a
    base64 group, and something follows it; each alignment is caught."""
    printed = _b64_inside(prefix, HOSTILE)
    out = redact(f"auth: {printed}\n", [HOSTILE])
    assert REDACTED in out
    middle = base64.b64encode(HOSTILE.encode()[3:-3]).decode()[4:-4]
    assert middle not in out


def test_base64_url_safe_form_is_hidden() -> None:
    secret = "\xff\xfe?>?>?>secret-value"
    printed = base64.urlsafe_b64encode(secret.encode()).decode()
    assert printed not in redact(printed, [secret])
    assert REDACTED in redact(printed, [secret])


@pytest.mark.parametrize("encode", [
    lambda s: urllib.parse.quote(s, safe=""),
    lambda s: urllib.parse.quote_plus(s),
    lambda s: json.dumps(s)[1:-1],
    lambda s: json.dumps(s, ensure_ascii=False)[1:-1],
    lambda s: base64.b64encode(s.encode()).decode(),
])
def test_each_encoding_the_runner_masks_is_hidden(encode: Any) -> None:
    printed = encode(HOSTILE)
    assert printed != HOSTILE
    out = redact(f"x={printed};", [HOSTILE])
    assert out.startswith("x=") and HOSTILE not in out
    assert printed not in out


def test_json_dump_of_an_env_shows_no_secret() -> None:
    """``python -c 'import json,os; print(json.dumps(dict(os.environ)))'``."""
    secret = 'line "one"\nline two\\tail'
    out = redact(json.dumps({"TOKEN": secret, "OTHER": "x"}), [secret])
    assert "line two" not in out and "one" not in out.replace("OTHER", "")


def test_each_line_of_a_multi_line_secret_is_hidden_encoded_too() -> None:
    line = PEM.splitlines()[1]
    printed = base64.b64encode(line.encode()).decode()
    assert printed not in redact(printed, [PEM])


def test_short_secrets_have_no_encoded_forms_so_ordinary_output_stays() -> None:
    """Under the minimum an encoding (``YWJj`` for ``abc``) is too short to be told from
    ordinary text: only the exact value is hidden."""
    assert encodings("abc") == set()
    assert encodings("x" * (MIN_ENCODED - 1)) == set()
    assert redact("YWJj and abc", ["abc"]) == f"YWJj and {REDACTED}"
    assert all(len(form) >= MIN_ENCODED for form in encodings("a" * MIN_ENCODED))


def test_ordinary_training_output_is_untouched() -> None:
    log = "epoch 1/10 loss=0.3412 lr=0.01 step 100 data=/data/set?x=1&y=2\n" * 5
    assert redact(log, ["hf_abcdefghijklmnop", "s3cr3t-passw0rd"]) == log


@given(secret=st.text(min_size=MIN_ENCODED, max_size=24).filter(lambda s: "\x00" not in s),
       prefix=st.binary(max_size=5), size=st.integers(1, 7))
def test_streamed_base64_with_any_prefix_never_shows_the_secret(
        secret: str, prefix: bytes, size: int) -> None:
    try:
        raw = secret.encode()
    except UnicodeEncodeError:
        return
    text = "out " + base64.b64encode(prefix + raw + b"!").decode() + " end"
    shift = -len(prefix) % 3  # the secret's first byte that starts a base64 group
    aligned = raw[shift:]
    form = base64.b64encode(aligned).decode()[:len(aligned) * 8 // 6]
    out = streamed(text, [secret], size)
    assert form not in out
    assert REDACTED in out
