"""A client-side token bucket: at most ``burst`` calls at once, ``rate`` per second after.

The Kubernetes launcher takes a token before every API request (retries included),
as client-go's ``flowcontrol`` limiter does, so one worker process cannot flood an
API server.  The clock and the sleep are injectable so tests run on fake time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """Thread-safe token bucket; callers that find it empty wait their turn, in order."""

    def __init__(self, rate: float, burst: int, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate, self.burst = float(rate), burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def try_acquire(self) -> bool:
        """Take a token if one is there now; never waits."""
        with self._lock:
            self._refill()
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False

    def acquire(self) -> float:
        """Take a token, waiting until it is due; returns the seconds waited.

        The token is reserved under the lock (the balance may go negative), so
        concurrent callers are served in arrival order and none can overtake.
        """
        with self._lock:
            self._refill()
            self._tokens -= 1
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait
