"""The host's clocks: what checks ask for the time, so a test or a replay can set it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """The two clocks a check reads: wall time for what a report shows and keeps across
    restarts, monotonic time for how long something took or has lasted within this process."""

    def wall(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never steps back (its zero is arbitrary)."""
        ...


class SystemClock:
    """The machine's own clocks (`time.time`, `time.monotonic`)."""

    def wall(self) -> float:
        """Seconds since the epoch, from the system clock."""
        return time.time()

    def monotonic(self) -> float:
        """The system's monotonic clock."""
        return time.monotonic()
