"""How often the agent may write its node: a token bucket per lane, notices first, and backoff.

Every attempt brings the node up to date with the latest report, so a source that flaps
faster than the budget loses nothing but the states in between. Two lanes share the loop:

- `Lane.NOTICE`: a provider's notice that the node goes (the terminating taint added or
  changed). It has its own small bucket (`NOTICE_BURST` at once, then `NOTICE_PER_MINUTE`), so
  it never waits behind the node's other updates, and a notice source that flaps is held too.
- `Lane.ORDINARY`: everything else (conditions, events, the unhealthy taint, and taking the
  terminating taint back), within `kubernetes.update_burst` and `kubernetes.updates_per_minute`.

An ordinary attempt applies every effect, the notice's too; a notice attempt applies only the
notice's (one read and one write of the node).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from enum import IntEnum

BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 60.0
# A notice changes the terminating taint at most this often: a spot node hears a rebalance
# recommendation, then its interruption; a node under maintenance one event, then another.
NOTICE_BURST = 3
NOTICE_PER_MINUTE = 12.0


class Lane(IntEnum):
    """An attempt's priority: a lower value goes first and applies fewer effects."""

    NOTICE = 0
    ORDINARY = 1


def backoff(failures: int, rng: random.Random) -> float:
    """The wait before the next try after `failures` in a row: exponential, capped, and a
    random point in the upper half of that (so agents that failed together do not retry
    together)."""
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(failures - 1, 16))
    return rng.uniform(ceiling / 2, ceiling)


class UpdateBudget:
    """A token bucket over attempts: `burst` at once, then `per_minute`."""

    def __init__(self, burst: int, per_minute: float, clock: Callable[[], float]) -> None:
        self.burst = float(burst)
        self.rate = per_minute / 60.0
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> float:
        """0 when an attempt may go now (one token taken), else the seconds until one may."""
        t = self._clock()
        self._tokens = min(self.burst, self._tokens + (t - self._at) * self.rate)
        self._at = t
        if self._tokens < 1.0:
            return (1.0 - self._tokens) / self.rate
        self._tokens -= 1.0
        return 0.0


class PriorityBudget:
    """One bucket per lane: an attempt takes a token of its own lane only."""

    def __init__(self, burst: int, per_minute: float, clock: Callable[[], float]) -> None:
        self.lanes = {
            Lane.NOTICE: UpdateBudget(NOTICE_BURST, NOTICE_PER_MINUTE, clock),
            Lane.ORDINARY: UpdateBudget(burst, per_minute, clock),
        }

    def take(self, lane: Lane) -> float:
        """0 when an attempt of `lane` may go now (its token taken), else the seconds until."""
        return self.lanes[lane].take()
