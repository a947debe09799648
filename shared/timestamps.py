"""Moments as the API and the pages show them: RFC 3339 in UTC, to the millisecond.

Records keep epoch seconds (floats: cheap to compare, sort and expire on); everything
a person or a client reads is written here, in one way: ``2026-12-01T15:04:05.123Z``,
as Kubernetes and GitHub write them.
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(epoch: float) -> str:
    """Epoch seconds as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    moment = datetime.fromtimestamp(float(epoch), UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse(text: str) -> datetime:
    """An RFC 3339 string with a zone (``Z`` or ``+hh:mm``) as an aware datetime."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment
