"""Ask many agents for their reports at once, all within one deadline.

Calls run on a pool of `concurrency` threads, each a blocking GetReport that releases the
interpreter while it waits. The deadline bounds the whole fan-out, not each call: a call gets
what is left of it (connecting included), and a target still waiting for a thread when the
deadline has passed is not asked and comes back as a timeout. So the fan-out ends within one
deadline however many targets there are, and hung agents (at most `concurrency` of them at a
time hold a thread) cost that deadline once, never once per round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from gpuprobe.client import Credentials, DataKeys, Fetched, fetch_report
from gpuprobe.unreachable import Failure, Unreachable, agents, no_answer
from gpuprobe.v1 import diagnostics_pb2 as pb

T = TypeVar("T")

DEFAULT_DEADLINE_SECONDS = 5.0
DEFAULT_CONCURRENCY = 64
# A call that starts this much after the fan-out was asked late: it waited for a thread.
LATE = 0.5


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
    `targets`, within `deadline` seconds for all of them. `each` runs in the thread that
    fetched the report, as soon as it came: a caller that keeps only a digest of each report
    never holds thousands of whole reports at once."""
    if not targets:
        return []
    end = time.monotonic() + deadline
    workers = max(1, min(concurrency, len(targets)))

    def ask(target: str) -> Fetched:
        left = end - time.monotonic()
        if left <= 0:
            return Fetched(target, None, unreachable=not_asked(deadline, workers))
        whole = left >= deadline - LATE
        fetched = fetch_report(target, credentials, left, data, view)
        if fetched.unreachable and fetched.unreachable.failure == Failure.TIMEOUT:
            # name the deadline the operator gave; a target asked late had only part of it
            late = None if whole else (left, workers)
            return replace(fetched, unreachable=no_answer(deadline, late))
        return fetched

    def digest(target: str) -> T:
        fetched = ask(target)
        try:
            return each(fetched)
        except Exception as exc:  # a report this client cannot read: one target, not the run
            why = f"unreadable report: {type(exc).__name__}: {exc}"
            return each(Fetched(target, None, unreachable=Unreachable(Failure.ERROR, why)))

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="audit") as pool:
        return list(pool.map(digest, targets))


def not_asked(deadline: float, workers: int) -> Unreachable:
    """A target the deadline passed before a thread was free to ask it."""
    return Unreachable(
        Failure.TIMEOUT,
        f"not asked: the deadline ({deadline:g} s) passed while the {agents(workers)} asked "
        "at once did not answer (raise --concurrency)",
    )
