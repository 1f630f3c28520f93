"""Runs checks for the daemon: each in a thread, bounded by its deadline, never twice at once.

The one-shot runner (`gpuprobe.checks.runner`) abandons a check past its deadline; a daemon
that did so every round would pile up one stuck thread per round behind a hung NVML call.
Here a check still in flight is not started again: a later round (or a RunChecks call) waits
on the same run, and reports it timed out while it stays stuck.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gpuprobe.checks.registry import CheckFn
from gpuprobe.checks.runner import STAGGER_SECONDS, failed, timed_out
from gpuprobe.config import Config
from gpuprobe.host import Host
from gpuprobe.report import CheckResult, now
from gpuprobe.threads import start_thread


@dataclass(frozen=True)
class Ran:
    """One check's result and when it was produced."""

    result: CheckResult
    time: datetime

    @property
    def timed_out(self) -> bool:
        """Whether the check overran its deadline."""
        return any(f.code == "CHECK_TIMEOUT" for f in self.result.findings)


@dataclass
class _Flight:
    name: str
    fn: CheckFn
    started: float = field(default_factory=time.monotonic)
    result: CheckResult | None = None
    finished_at: datetime | None = None
    done: threading.Event = field(default_factory=threading.Event)


class CheckExecutor:
    """Runs named checks on one long-lived host; at most one run of each check in flight."""

    def __init__(self, host: Host, config: Config, checks: Mapping[str, CheckFn]) -> None:
        self.host = host
        self.config = config
        self._checks = dict(checks)
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}

    def run(self, names: Sequence[str], within: float | None = None) -> list[Ran]:
        """Run the named checks (in turn, staggered as the one-shot runner does; all at once
        under a caller's deadline) and wait for them, in `names` order.

        Each is bounded by its configured deadline and, when given, by `within` seconds from
        now (the caller's deadline), whichever ends first; a check past it is reported
        UNKNOWN (CHECK_TIMEOUT) and left to finish in the background.
        """
        called = time.monotonic()
        flights = []
        for name in names:
            flight, fresh = self._start(name)
            flights.append(flight)
            # A check already in flight (stuck) holds nothing back; nor does any when a
            # caller's deadline bounds them all (RunChecks): it is no time to save CPU.
            if fresh and within is None:
                flight.done.wait(min(STAGGER_SECONDS, self.config.deadline(name)))
        ran = []
        for flight in flights:
            deadline = self.config.deadline(flight.name)
            ends = flight.started + deadline
            if within is not None:
                ends = min(ends, called + within)
            if flight.done.wait(max(0.0, ends - time.monotonic())) and flight.result is not None:
                ran.append(Ran(flight.result, flight.finished_at or now()))
            else:
                waited = min(deadline, max(0.0, ends - flight.started))
                ran.append(Ran(timed_out(flight.name, round(waited, 3)), now()))
        return ran

    def in_flight(self) -> list[str]:
        """The checks running now (including stuck ones)."""
        with self._lock:
            return sorted(self._flights)

    def _start(self, name: str) -> tuple[_Flight, bool]:
        """The named check's run, and whether it starts now (False: joined one in flight)."""
        with self._lock:
            flight = self._flights.get(name)
            if flight is not None:
                return flight, False  # still running: join it rather than start a second copy
            flight = _Flight(name, self._checks[name])
            self._flights[name] = flight
        if start_thread(self._fly, f"check-{name}", (flight,)) is None:
            # Not in flight after all: forget it, so that a later round starts it afresh
            # rather than waiting on a run that never began.
            self._land(flight, failed(name, RuntimeError("can't start a thread for the check")))
        return flight, True

    def _fly(self, flight: _Flight) -> None:
        try:
            result = flight.fn(self.host, self.config)
        except Exception as exc:  # one broken check must never break the daemon
            result = failed(flight.name, exc)
        result.duration_seconds = time.monotonic() - flight.started
        self._land(flight, result)

    def _land(self, flight: _Flight, result: CheckResult) -> None:
        flight.result = result
        flight.finished_at = now()
        with self._lock:
            self._flights.pop(flight.name, None)
        flight.done.set()
