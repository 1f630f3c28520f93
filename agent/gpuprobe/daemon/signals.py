"""The event path beside the rounds: sources that see a fault as it happens wake the checks it
concerns at once, whatever `--interval` is.

Sources: NVML's event stream (`nvmlEventSetWait`, through `EventRelay`), the kernel log
followed as it grows (`/dev/kmsg` and the log files, `KernelLogFollower`), and any other that
calls `Signals.wake(check_names, reason)` (a cloud provider's notices). A wake re-runs the
named checks through the scheduler (`run_now`), so the report, `/metrics`, WatchReports and the
node's effects follow as after a round. Which checks a source wakes, the checks' records say
(`wakes`, `poll`; of the kernel log, the kinds of event each subscribes to: `kernel_events`).
Checks that poll (storage, mesh, idle windows) keep their interval: nothing wakes them.

Bursts are coalesced: wakes within `SETTLE_SECONDS` of the first make one re-run, and a check
is re-run at most once per `MIN_GAP_SECONDS` while wakes keep coming (an XID storm of thousands
of lines is one re-run, then at most one a second while it lasts). A wake that comes while its
check runs (a round's, or a re-run's) re-runs it once more after, so what woke it is read.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from gpuprobe.checks.runner import Ran
from gpuprobe.gpu.journal.record import Entry
from gpuprobe.gpu.kernel_follow import SAFETY_POLL_SECONDS, KernelLogFollower
from gpuprobe.host.nvml import NvmlError
from gpuprobe.host.nvml_relay import EventRelay
from gpuprobe.threads import start_thread

log = logging.getLogger("gpuprobe.serve")

# Wakes this close together are one re-run (the lines of one fault come within milliseconds).
SETTLE_SECONDS = 0.05
# A check is re-run at most this often while wakes keep coming.
MIN_GAP_SECONDS = 1.0
# How long the NVML waiting thread blocks in one nvmlEventSetWait (its stop latency too).
NVML_WAIT_SECONDS = 5.0
# After NVML's event set failed, how long before the thread tries again.
NVML_RETRY_SECONDS = 60.0
Wake = Callable[[Sequence[str], str], None]
Source = Callable[[Wake, threading.Event], None]


class Signals:
    """Wakes checks on demand, coalescing bursts, on a thread of its own; runs the sources
    added with `add_source` each on its own thread."""

    def __init__(
        self,
        run_now: Callable[[Sequence[str]], list[Ran]],
        in_flight: Callable[[], list[str]],
        known: Iterable[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run_now = run_now
        self._in_flight = in_flight
        self.known = set(known)
        self._clock = clock
        self._pending: dict[str, str] = {}  # check -> the first reason since its last re-run
        self._last_run: dict[str, float] = {}
        self._cond = threading.Condition()
        self._sources: list[tuple[str, Source]] = []
        self.stop = threading.Event()
        # Readable once stopping: sources blocked in select/poll wake on it.
        self.stop_read, self._stop_write = os.pipe()
        self._running = 0  # sources whose threads have not returned
        self.reruns: dict[str, int] = {}
        self.wakes = 0

    def wake(self, check_names: Sequence[str], reason: str) -> None:
        """Re-run the named checks soon (those this agent runs); never blocks. Safe from any
        thread; a burst of wakes makes one re-run."""
        names = [n for n in check_names if n in self.known]
        if not names:
            return
        with self._cond:
            self.wakes += 1
            for name in names:
                self._pending.setdefault(name, reason)
            self._cond.notify()

    def add_source(self, name: str, source: Source) -> None:
        """A source to run (from `start`) on its own thread as `source(wake, stop)`; it must
        return soon after `stop` is set (`stop_read` is readable then, for select/poll)."""
        self._sources.append((name, source))

    def start(self) -> bool:
        """Start the waking thread and the sources; False when the system refused a thread."""
        if start_thread(self._loop, "signals") is None:
            return False
        started = True
        for name, source in self._sources:
            with self._cond:
                self._running += 1
            if start_thread(self._guarded, f"source-{name}", (name, source)) is None:
                self._source_ended()
                started = False
        return started

    def close(self) -> None:
        """Stop the waking thread and tell the sources to end: closing the pipe's write end
        makes `stop_read` readable (end of file); its read end is closed once the last source
        has returned."""
        self.stop.set()
        with self._cond:
            self._cond.notify_all()
            if self._stop_write >= 0:
                os.close(self._stop_write)
                self._stop_write = -1
        self._source_ended(count=False)

    def _guarded(self, name: str, source: Source) -> None:
        try:
            source(self.wake, self.stop)
        except Exception:  # a broken source must not take the daemon down; rounds go on
            log.exception("event source failed", extra={"source": name})
        finally:
            self._source_ended()

    def _source_ended(self, count: bool = True) -> None:
        """A source returned (or `close` ran): the read end goes with the last of them."""
        with self._cond:
            if count:
                self._running -= 1
            if self._running == 0 and self.stop.is_set() and self.stop_read >= 0:
                os.close(self.stop_read)
                self.stop_read = -1

    def _loop(self) -> None:
        while not self.stop.is_set():
            with self._cond:
                while not self._pending and not self.stop.is_set():
                    self._cond.wait()
                if self.stop.is_set():
                    return
            self.stop.wait(SETTLE_SECONDS)  # let the rest of a burst arrive
            with self._cond:
                now = self._clock()
                due = {
                    n: r
                    for n, r in self._pending.items()
                    if now - self._last_run.get(n, -MIN_GAP_SECONDS) >= MIN_GAP_SECONDS
                }
                for name in due:
                    del self._pending[name]
                    self._last_run[name] = now
                if not due:
                    wait = min(
                        MIN_GAP_SECONDS - (now - self._last_run.get(n, now)) for n in self._pending
                    )
                    self._cond.wait(max(wait, 0.01))
                    continue
            self._rerun(due)

    def _rerun(self, due: dict[str, str]) -> None:
        names = sorted(due)
        joined = set(names) & set(self._in_flight())
        log.info("checks woken", extra={"checks": names, "reasons": sorted(set(due.values()))})
        try:
            self._run_now(names)
            if joined:  # the run in flight may have read before what woke it: once more
                self._run_now(sorted(joined))
        except Exception:  # a bug in a sink must not end the event path
            log.exception("woken run failed", extra={"checks": names})
        for name in names:
            self.reruns[name] = self.reruns.get(name, 0) + 1


def kernel_log_source(
    follower: KernelLogFollower, stop_fd: int, kinds: Mapping[str, frozenset[str]]
) -> Source:
    """The kernel log as a source: a new record of a kind of event a check subscribes to
    (`kinds`: check → kinds, from the records naming `WAKE_KERNEL_LOG`) wakes that check,
    with the first such record as the reason. Following begins here, when the source is made
    (before the first round): a record logged after it wakes its checks even when a round
    read it before the source's thread ran."""
    follower.begin()

    def follow(wake: Wake, stop: threading.Event) -> None:
        follower.watch()
        lost = 0
        try:
            while not stop.is_set():  # what came before the watches first, then each wake-up
                for check, entry in first_of_kinds(follower.new_entries(), kinds).items():
                    wake([check], f"kernel log: {entry.record.text.strip()[:160]}")
                if follower.lost > lost:  # lines too long to be the kernel's: passed over
                    log.warning("kernel log lines passed over", extra={"lost": follower.lost})
                    lost = follower.lost
                follower.wait(SAFETY_POLL_SECONDS, stop_fd)
        finally:
            follower.close()

    return follow


def first_of_kinds(
    entries: Iterable[Entry], kinds: Mapping[str, frozenset[str]]
) -> dict[str, Entry]:
    """Each check of `kinds` that one of `entries` concerns, with the first such entry."""
    first: dict[str, Entry] = {}
    for entry in entries:
        if not entry.kinds:
            continue
        for check, wanted in kinds.items():
            if check not in first and not entry.kinds.isdisjoint(wanted):
                first[check] = entry
    return first


def nvml_source(relay: EventRelay, checks: Sequence[str]) -> Source:
    """NVML's event stream as a source: any event wakes `checks` (those whose records name
    `WAKE_NVML_EVENTS`: the `xid` check, which drains them)."""

    def pump(wake: Wake, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                events = relay.pump(NVML_WAIT_SECONDS)
            except NvmlError as exc:
                log.warning("NVML events unavailable", extra={"error": exc.name})
                stop.wait(NVML_RETRY_SECONDS)
                continue
            if events:
                first = events[0]
                wake(checks, f"NVML event {first.type} {first.data} on GPU {first.device}")

    return pump
