"""The per-caller token bucket of RunChecks and ClearFindings."""

from __future__ import annotations

from gpuprobe.serve import limits
from gpuprobe.serve.limits import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_refill_rate_per_caller() -> None:
    clock = Clock()
    limiter = RateLimiter(burst=2, per_minute=6, clock=clock)  # one token every 10 s
    assert limiter.allow("a") == 0
    assert limiter.allow("a") == 0
    assert limiter.allow("a") == 10.0
    assert limiter.allow("b") == 0  # another caller has its own bucket
    clock.now += 5
    assert limiter.allow("a") == 5.0
    clock.now += 5
    assert limiter.allow("a") == 0
    clock.now += 1000
    assert [limiter.allow("a") for _ in range(3)] == [0, 0, 10.0]  # never above the burst


def test_the_bucket_table_stays_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(limits, "MAX_CALLERS", 10)
    clock = Clock()
    limiter = RateLimiter(burst=1, per_minute=60, clock=clock)
    for i in range(50):
        clock.now += 0.01
        limiter.allow(f"caller-{i}")
    assert len(limiter._buckets) <= 10
