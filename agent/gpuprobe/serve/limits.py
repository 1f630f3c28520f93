"""Per-caller rate limits for the RPCs that cost something (RunChecks, ClearFindings)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# Callers tracked at most; full (idle) buckets are dropped first when there are more.
MAX_CALLERS = 1024


class RateLimiter:
    """A token bucket per caller: `burst` calls at once, refilled at `per_minute`."""

    def __init__(
        self, burst: int, per_minute: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.burst = burst
        self.rate = per_minute / 60.0
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # caller → (tokens, at)
        self._lock = threading.Lock()

    def allow(self, caller: str) -> float:
        """0 when the call may go ahead (one token taken), else seconds until it may."""
        with self._lock:
            t = self._clock()
            tokens, at = self._buckets.get(caller, (float(self.burst), t))
            tokens = min(float(self.burst), tokens + (t - at) * self.rate)
            if tokens < 1.0:
                self._buckets[caller] = (tokens, t)
                return (1.0 - tokens) / self.rate
            self._buckets[caller] = (tokens - 1.0, t)
            if len(self._buckets) > MAX_CALLERS:
                self._prune(t)
            return 0.0

    def _prune(self, t: float) -> None:
        full = [
            c
            for c, (tokens, at) in self._buckets.items()
            if tokens + (t - at) * self.rate >= self.burst
        ]
        for caller in full:
            del self._buckets[caller]
        while len(self._buckets) > MAX_CALLERS:  # still too many: forget the oldest
            del self._buckets[min(self._buckets, key=lambda c: self._buckets[c][1])]
