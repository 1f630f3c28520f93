"""Ask many agents for their reports at once, all within one deadline.

Calls run as `concurrency` workers on one event loop (gRPC's asyncio API), each asking one
target after another: at thousands of agents a task per call costs about half the CPU of a
thread per call, whose hand-offs of the interpreter dominate. The deadline bounds the whole
fan-out, not each call: a call gets what is left of it (connecting included), and a target
still waiting for a worker when the deadline has passed is not asked and comes back as a
timeout. So the fan-out ends within one deadline however many targets there are, and hung
agents (at most `concurrency` of them at a time hold a worker) cost that deadline once, never
once per round.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from gpuprobe.client import Credentials, Fetched, fetch_report_async
from gpuprobe.report_view import DataKeys
from gpuprobe.unreachable import Failure, Unreachable, agents, no_answer
from gpuprobe.v1 import diagnostics_pb2 as pb

T = TypeVar("T")

DEFAULT_DEADLINE_SECONDS = 5.0
DEFAULT_CONCURRENCY = 64
# A call that starts this much after the fan-out was asked late: it waited for a worker.
LATE = 0.5
# Allocations between two collections of the youngest generation while a fan-out runs
# (Python's default is 700).
FAN_OUT_GC_THRESHOLD = 100_000


def fetch_all(
    targets: Sequence[str],
    credentials: Credentials,
    deadline: float = DEFAULT_DEADLINE_SECONDS,
    concurrency: int = DEFAULT_CONCURRENCY,
    data: DataKeys | None = None,
    view: pb.ReportView = pb.REPORT_VIEW_FULL,
) -> list[Fetched]:
    """Every target's report (or why there is none), in the order of `targets`, within
    `deadline` seconds for all of them."""
    return fetch_each(targets, credentials, _kept, deadline, concurrency, data, view)


def _kept(fetched: Fetched) -> Fetched:
    return fetched


def fetch_each(
    targets: Sequence[str],
    credentials: Credentials,
    each: Callable[[Fetched], T],
    deadline: float = DEFAULT_DEADLINE_SECONDS,
    concurrency: int = DEFAULT_CONCURRENCY,
    data: DataKeys | None = None,
    view: pb.ReportView = pb.REPORT_VIEW_FULL,
) -> list[T]:
    """What `each` makes of every target's report (or of why there is none), in the order of
    `targets`, within `deadline` seconds for all of them. `each` runs as soon as a report
    came, before the next call of its worker: a caller that keeps only a digest of each
    report never holds thousands of whole reports at once. Runs its own event loop: call it
    from plain (not async) code."""
    if not targets:
        return []
    asking = Asking(credentials, deadline, time.monotonic() + deadline, concurrency, data, view)
    with rare_collections():
        return asyncio.run(fan_out(targets, asking, each))


@contextlib.contextmanager
def rare_collections() -> Iterator[None]:
    """Collect cyclic garbage rarely while a fan-out runs (FAN_OUT_GC_THRESHOLD): a call
    allocates thousands of short-lived objects and leaves no cycles worth chasing, and every
    pass of the collector also walks the entries already digested, which grow with the fleet
    (about a tenth of the audit's CPU at 10,000 agents). The thresholds are restored after."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], FAN_OUT_GC_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


@dataclass(frozen=True)
class Asking:
    """How a fan-out asks: with which credentials, for which view and data keys, how many
    at once, until when (`end`, on the `time.monotonic()` clock, which every process of the
    machine shares) and after which deadline the operator gave (`deadline`, in seconds: the
    figure the reasons name)."""

    credentials: Credentials
    deadline: float
    end: float
    concurrency: int = DEFAULT_CONCURRENCY
    data: DataKeys | None = None
    view: pb.ReportView = pb.REPORT_VIEW_FULL


async def fan_out(targets: Sequence[str], asking: Asking, each: Callable[[Fetched], T]) -> list[T]:
    """`fetch_each`'s work on the running event loop: `asking.concurrency` workers, each
    asking one target after another until none is left."""
    deadline, end = asking.deadline, asking.end
    begun = time.monotonic()
    workers = max(1, min(asking.concurrency, len(targets)))
    done: list[T | None] = [None] * len(targets)
    waiting = iter(range(len(targets)))  # shared by the workers: each takes the next target

    async def ask(target: str) -> Fetched:
        left = end - time.monotonic()
        if left <= 0:
            return Fetched(target, None, unreachable=not_asked(deadline, workers))
        # Asked late: it waited for a worker (not for this process to start: a helper's
        # fan-out begins after the deadline did).
        whole = left >= deadline - LATE or time.monotonic() - begun <= LATE
        fetched = await fetch_report_async(
            target, asking.credentials, left, asking.data, asking.view
        )
        if fetched.unreachable and fetched.unreachable.failure == Failure.TIMEOUT:
            # name the deadline the operator gave; a target asked late had only part of it
            late = None if whole else (left, workers)
            return replace(fetched, unreachable=no_answer(deadline, late))
        return fetched

    def digest(fetched: Fetched) -> T:
        try:
            return each(fetched)
        except Exception as exc:  # a report this client cannot read: one target, not the run
            why = f"unreadable report: {type(exc).__name__}: {exc}"
            return each(Fetched(fetched.target, None, unreachable=Unreachable(Failure.ERROR, why)))

    async def worker() -> None:
        for i in waiting:
            done[i] = digest(await ask(targets[i]))

    await asyncio.gather(*(worker() for _ in range(workers)))
    return done  # type: ignore[return-value]  # every index was filled by a worker


def not_asked(deadline: float, workers: int) -> Unreachable:
    """A target the deadline passed before a worker was free to ask it."""
    return Unreachable(
        Failure.TIMEOUT,
        f"not asked: the deadline ({deadline:g} s) passed while the {agents(workers)} asked "
        "at once did not answer (raise --concurrency)",
    )
