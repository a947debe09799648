"""Secret values are hidden from output whole, however the output is cut into writes."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from shared.secrets import REDACTED, StreamRedactor, redact, redaction_targets

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
    targets = redaction_targets(["abcdefghij\nxy\n"])
    assert targets == ["abcdefghij\nxy\n", "abcdefghij"]


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
