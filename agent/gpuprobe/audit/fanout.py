"""Ask many agents for their reports at once, each within its own deadline.

Calls run on a pool of `concurrency` threads, each a blocking GetReport that releases the
interpreter while it waits; every call is bounded by the per-target deadline (connecting
included), so N targets take at most ceil(N / concurrency) deadlines, and one dead or hung
agent costs one deadline of one thread, never the audit.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from gpuprobe.client import Credentials, DataKeys, Fetched, fetch_report

DEFAULT_DEADLINE_SECONDS = 5.0
DEFAULT_CONCURRENCY = 64


def fetch_all(
    targets: Sequence[str],
    credentials: Credentials,
    deadline: float = DEFAULT_DEADLINE_SECONDS,
    concurrency: int = DEFAULT_CONCURRENCY,
    data: DataKeys | None = None,
) -> list[Fetched]:
    """Every target's report (or why there is none), in the order of `targets`."""
    if not targets:
        return []
    workers = max(1, min(concurrency, len(targets)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="audit") as pool:
        return list(pool.map(lambda t: fetch_report(t, credentials, deadline, data), targets))
