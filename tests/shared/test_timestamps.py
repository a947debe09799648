"""Moments as the API shows them: RFC 3339 in UTC, to the millisecond."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.timestamps import parse, rfc3339


def test_rfc3339_writes_utc_with_milliseconds_and_reads_back():
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(1796137445.1234) == "2026-12-01T15:04:05.123Z"
    assert rfc3339("1796137445.5") == "2026-12-01T15:04:05.500Z"  # as a Redis hash holds it
    assert parse("2026-12-01T15:04:05.123Z") == datetime(2026, 12, 1, 15, 4, 5, 123000, UTC)
    assert parse(rfc3339(1796137445.123)).timestamp() == pytest.approx(1796137445.123)


def test_a_time_without_a_zone_is_refused():
    with pytest.raises(ValueError):
        parse("2026-12-01T15:04:05")
