"""Settings every test directory shares."""

from __future__ import annotations

from hypothesis import settings

# `make check` runs fewer generated examples, so the inner loop stays under a minute;
# `make test` keeps Hypothesis's default and each test's own count.
settings.register_profile("check", max_examples=10)
