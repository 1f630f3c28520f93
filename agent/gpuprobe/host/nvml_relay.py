"""NVML's event stream, waited on by one thread and handed on to the checks.

The daemon's event path blocks in `nvmlEventSetWait` (live, through `LiveNvml`; replayed, the
snapshot's recorded `events`) on a thread of its own, so an XID wakes the checks the moment
NVML reports it. NVML hands each event to one waiter only, so the checks must not wait on the
same event set: `EventRelay` wraps the host's NVML, the waiting thread calls `pump`, and the
`xid` check's drain (`wait_events(0)`) takes what the pump received. Every other call goes
straight through.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from gpuprobe.host.nvml import Nvml, NvmlError, NvmlEvent

# Events held for the checks at most; past it the oldest are dropped (an XID storm's repeats:
# the check keeps counts, and a storm of 10,000 is judged as one already).
MAX_QUEUED = 10_000


class EventRelay:
    """An `Nvml` whose events come from `pump` (one waiting thread) instead of each caller."""

    def __init__(self, inner: Nvml) -> None:
        self.inner = inner
        self._queue: deque[NvmlEvent] = deque(maxlen=MAX_QUEUED)
        self._ready = threading.Condition()
        self._error: str | None = None
        self.dropped = 0

    @property
    def init_error(self) -> str | None:
        """The wrapped NVML's init error."""
        return self.inner.init_error

    def call(self, fn: str, *args: Any) -> Any:
        """Straight through to the wrapped NVML."""
        return self.inner.call(fn, *args)

    def pump(self, timeout_s: float) -> list[NvmlEvent]:
        """Wait up to `timeout_s` on the wrapped NVML's event set and queue what came (for
        the checks); returns it. An error is kept, for the checks to see, and raised."""
        try:
            events = self.inner.wait_events(timeout_s)
        except NvmlError as exc:
            with self._ready:
                self._error = exc.name
            raise
        with self._ready:
            self._error = None
            for event in events:
                if len(self._queue) == self._queue.maxlen:
                    self.dropped += 1
                self._queue.append(event)
            if events:
                self._ready.notify_all()
        return events

    def wait_events(self, timeout_s: float) -> list[NvmlEvent]:
        """What the pump received since the last call, waiting up to `timeout_s` for some;
        raises the pump's last NvmlError when it failed and nothing is queued."""
        with self._ready:
            if not self._queue and self._error is None and timeout_s > 0:
                self._ready.wait(timeout_s)
            if not self._queue and self._error is not None:
                raise NvmlError(self._error)
            events = list(self._queue)
            self._queue.clear()
            return events
