"""Redaction is right on a tenant's hostile secrets and output, whole or streamed.

What the old regex-and-rescan redactor spent on these grew with the output times the
secret's length (a 40,001-character secret and 2 MB of output: ~80 s of CPU); the
ratios of their cost to a plain secret's are measured in ``bench/redaction.py``, never
timed here.  These say that the answer is right, and the same fed in any pieces.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.secrets import REDACTED, StreamRedactor, redact, redaction_targets

LONG_RUN = "A" * 40_000 + "B"  # shares every prefix with a run of A
MIRRORED = "B" + "A" * 40_000  # shares every suffix with one
OUTPUT = "A" * 300_000


def streamed(text: str, secrets: list[str], size: int) -> str:
    redactor = StreamRedactor(secrets)
    pieces = [redactor.feed(text[i:i + size]) for i in range(0, len(text), size)]
    return "".join(pieces) + redactor.flush()


def reference(text: str, secrets: list[str]) -> str:
    """Leftmost, longest where several start at one place: the contract, as a regex."""
    targets = redaction_targets(secrets)
    return re.compile("|".join(map(re.escape, targets))).sub(REDACTED, text) if targets \
        else text


@pytest.mark.parametrize("secret", [LONG_RUN, MIRRORED])
def test_output_sharing_a_long_secret_s_prefix_or_suffix_is_left_as_it_is(secret: str) -> None:
    assert redact(OUTPUT, [secret]) == OUTPUT
    assert streamed(OUTPUT, [secret], 4096) == OUTPUT


@pytest.mark.parametrize("secret", [LONG_RUN, MIRRORED])
def test_the_long_secret_inside_such_output_is_hidden(secret: str) -> None:
    text = "A" * 100_000 + secret + "A" * 100_000
    expected = "A" * 100_000 + REDACTED + "A" * 100_000
    assert redact(text, [secret]) == expected
    assert streamed(text, [secret], 4096) == expected
    assert streamed(text, [secret], 65_536) == expected


def test_a_short_secret_inside_a_long_one_s_run_is_hidden_each_time() -> None:
    """Eight A's and a long run that never ends: every eight A's are the short secret."""
    text = "A" * 80_000
    assert redact(text, ["A" * 8, LONG_RUN]) == REDACTED * 10_000
    assert streamed(text, ["A" * 8, LONG_RUN], 4096) == REDACTED * 10_000


def test_many_nested_secrets_give_the_longest_at_each_place() -> None:
    secrets = ["A" * n for n in range(8, 200, 7)]  # 8, 15, ..., 197
    text = "A" * 10_000 + "B" + "A" * 9
    expected = reference(text, secrets)
    assert redact(text, secrets) == expected
    assert streamed(text, secrets, 1000) == expected


def test_a_tail_that_may_begin_a_secret_is_kept_back_and_nothing_more() -> None:
    """Output that cannot begin a secret comes out at once, however long the secrets."""
    redactor = StreamRedactor([LONG_RUN])
    assert redactor.feed("epoch 1 loss 0.3\n") == "epoch 1 loss 0.3\n"
    assert redactor.feed("xy" + "A" * 10) == "xy"
    assert redactor.feed("A" * 10 + "C") == "A" * 20 + "C"
    assert redactor.flush() == ""


def test_what_is_kept_back_is_bounded_by_twice_the_longest_form() -> None:
    longest = max(map(len, redaction_targets([LONG_RUN])))
    redactor = StreamRedactor([LONG_RUN])
    given_so_far = emitted = 0
    for _ in range(200):
        emitted += len(redactor.feed("A" * 1000))
        given_so_far += 1000
        assert given_so_far - emitted <= 2 * longest
    assert emitted + len(redactor.flush()) == given_so_far


@settings(max_examples=200, deadline=None)
@given(secrets=st.lists(st.text(alphabet="ab", min_size=1, max_size=30), min_size=1,
                        max_size=4),
       text=st.text(alphabet="ab", max_size=400), sizes=st.lists(st.integers(1, 50),
                                                                 min_size=1, max_size=20))
def test_any_cut_of_self_similar_output_gives_the_whole_text_s_answer(
        secrets: list[str], text: str, sizes: list[int]) -> None:
    redactor = StreamRedactor(secrets)
    out, at, turn = [], 0, 0
    while at < len(text):
        size = sizes[turn % len(sizes)]
        out.append(redactor.feed(text[at:at + size]))
        at, turn = at + size, turn + 1
    out.append(redactor.flush())
    assert "".join(out) == reference(text, secrets) == redact(text, secrets)


def test_each_piece_of_output_is_looked_at_a_bounded_number_of_times(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted, not timed: fed in pieces far shorter than the tail it keeps back, the
    redactor looks at every character at most about twice (a look waits for as much
    new output as it keeps), not once per piece."""
    from shared import secrets

    looked: list[int] = []
    search = secrets._Forms.redacted

    def counted(self: secrets._Forms, text: str, decided: int) -> tuple[str, str]:
        looked.append(len(text))
        return search(self, text, decided)

    monkeypatch.setattr(secrets._Forms, "redacted", counted)
    longest = max(map(len, redaction_targets([LONG_RUN])))
    output = "A" * 200_000
    assert streamed(output, [LONG_RUN], 100) == output
    assert sum(looked) <= 2 * len(output) + 2 * longest


def test_the_places_a_form_may_start_are_searched_about_once_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted, not timed: a form's start and end every 20 characters, so the backwards
    pass asks for the next place very often; each question must not search the whole
    text again (a search of the whole text per question made 2 MB cost minutes)."""
    from shared import secrets

    searched: list[int] = []
    open_window = secrets._Places._open

    def counted(self: secrets._Places, at: int) -> None:
        open_window(self, at)
        searched.append(self._end - self._start)

    monkeypatch.setattr(secrets._Places, "_open", counted)
    secret = "xq" + "abcdefgh" * 2 + "zz"
    text = ("xqa....hzz" + "." * 10) * 10_000
    assert redact(text, [secret]) == text
    assert sum(searched) <= 3 * len(text)
