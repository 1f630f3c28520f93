"""Runs checks: each timed, bounded by its deadline, and any failure made an UNKNOWN result.

One runner serves both one-shot `check` (a fresh `CheckRunner` per run, through
`gpuprobe.pipeline.run_checks`) and the daemon (one `CheckRunner` kept for the agent's life).
Every check runs in its own daemon thread. A check that overruns its deadline (a hung NVML
call, a stuck filesystem) is reported UNKNOWN and left to finish in the background; the
others finish and the report completes. An exception inside a check becomes an UNKNOWN
result naming the error. The runner returns each check's own result: what needs the whole
report (naming the pods a finding affects) is the pipeline's post-passes.

A check still in flight is never started again: a later round of the daemon (or a RunChecks
call) waits on the same run and reports it timed out while it stays stuck, so a hung NVML
call costs one thread, not one per round. One-shot `check` makes a fresh runner and leaves
an overrunning check behind when it exits.

The checks start one after another, each once the one before has finished or has run for
STAGGER_SECONDS: a dozen short checks started at once contend for the interpreter and cost
about three times the CPU of the same checks in turn, while a slow or hung check holds the
next one back for no longer than the stagger.

Active checks that load the GPUs (`Check.loads_gpus`: nccl's all-reduce) run one at a time:
a second one waits for the first to end (its wait counts against its own deadline), so two
never load the GPUs at once and neither measures the GPUs under the other's load. One left
behind past its deadline still holds the GPUs, and the next waits for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.checks.state import CheckStates, state_directory
from gpuprobe.config import Config
from gpuprobe.gpu.view import GpuView
from gpuprobe.host import Host
from gpuprobe.report import Action, CheckResult, Finding, Severity, Status, now
from gpuprobe.threads import start_thread

STAGGER_SECONDS = 0.5


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
    check: Check[Any]
    started: float = field(default_factory=time.monotonic)
    result: CheckResult | None = None
    finished_at: datetime | None = None
    done: threading.Event = field(default_factory=threading.Event)


class CheckRunner:
    """Runs named checks on one host; at most one run of each check in flight."""

    def __init__(
        self,
        host: Host,
        config: Config,
        checks: Mapping[str, Check[Any]],
        states: CheckStates | None = None,
    ) -> None:
        self.host = host
        self.config = config
        self._checks = dict(checks)
        self.gpus = GpuView(host)  # the checks' one door to the node's GPUs
        # What the checks keep between runs: this runner's for its life (`checks_states`).
        self.states = states if states is not None else checks_states(host, config, checks)
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}
        # Held by the one GPU-loading check running now (`Check.loads_gpus`).
        self._gpus = threading.Lock()

    def run(self, names: Sequence[str], within: float | None = None) -> list[Ran]:
        """Run the named checks (in turn, staggered; all at once under a caller's deadline)
        and wait for them, in `names` order.

        Each is bounded by its deadline and, when given, by `within` seconds from now (the
        caller's deadline), whichever ends first; a check past it is reported UNKNOWN
        (CHECK_TIMEOUT) and left to finish in the background.
        """
        called = time.monotonic()
        flights = []
        for name in names:
            flight, fresh = self._start(name)
            flights.append(flight)
            # A check already in flight (stuck) holds nothing back; nor does any when a
            # caller's deadline bounds them all (RunChecks): it is no time to save CPU.
            if fresh and within is None:
                flight.done.wait(min(STAGGER_SECONDS, flight.check.deadline(self.config)))
        ran = []
        for flight in flights:
            deadline = flight.check.deadline(self.config)
            ends = flight.started + deadline
            if within is not None:
                ends = min(ends, called + within)
            if flight.done.wait(max(0.0, ends - time.monotonic())) and flight.result is not None:
                ran.append(Ran(flight.result, flight.finished_at or now()))
            else:
                waited = min(deadline, max(0.0, ends - flight.started))
                ran.append(Ran(timed_out(flight.check.name, round(waited, 3)), now()))
        return ran

    def context(self) -> CheckContext:
        """What a check's run is given: the node, and the states this runner keeps (also
        for work on a check's state between runs, such as clearing sticky XIDs)."""
        return CheckContext(self.host, self.states, self.gpus)

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
            flight = _Flight(self._checks[name])
            self._flights[name] = flight
        if start_thread(self._fly, f"check-{name}", (flight,)) is None:
            # Not in flight after all (the system refused the thread: a pids limit): forget
            # it, so that a later round starts it afresh rather than waiting on a run that
            # never began (every round reported CHECK_TIMEOUT until a restart).
            self._land(flight, failed(name, RuntimeError("can't start a thread for the check")))
        return flight, True

    def _fly(self, flight: _Flight) -> None:
        name = flight.check.name
        try:
            with self._gpus_for(flight.check):
                result = flight.check.run(self.context(), self.config)
        except Exception as exc:  # one broken check must never break the report or the daemon
            result = failed(name, exc)
        result.duration_seconds = time.monotonic() - flight.started
        self._land(flight, result)

    def _gpus_for(self, check: Check[Any]) -> AbstractContextManager[object]:
        """What a check's run holds: the GPUs, for one that loads them; else nothing."""
        return self._gpus if check.loads_gpus else nullcontext()

    def _land(self, flight: _Flight, result: CheckResult) -> None:
        flight.result = result
        flight.finished_at = now()
        with self._lock:
            self._flights.pop(flight.check.name, None)
        flight.done.set()


def checks_states(host: Host, config: Config, checks: Mapping[str, Check[Any]]) -> CheckStates:
    """Empty states for `checks`, with the state directory of those that survive a restart
    (`state.state_directory`)."""
    durable = [c.keeps for c in checks.values() if c.keeps is not None and c.keeps.survives_restart]
    return CheckStates(state_directory(host, config, durable), resolved=True)


def failed(name: str, exc: BaseException) -> CheckResult:
    """The result of a check that raised `exc`."""
    error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return CheckResult(
        name=name,
        summary=f"check failed: {error}",
        findings=[
            Finding(
                "CHECK_FAILED",
                Severity.UNKNOWN,
                f"the {name} check failed with {error}; its signals are unknown",
            )
        ],
        floor=Status.UNKNOWN,
    )


def timed_out(name: str, deadline: float) -> CheckResult:
    """The result of a check that did not finish within `deadline` seconds."""
    return CheckResult(
        name=name,
        summary=f"did not finish within its {deadline:g} s deadline",
        findings=[
            Finding(
                "CHECK_TIMEOUT",
                Severity.UNKNOWN,
                f"the {name} check did not finish within {deadline:g} s "
                "(a hung NVML call or filesystem); its signals are unknown",
                Action.NONE,
            )
        ],
        duration_seconds=deadline,
        floor=Status.UNKNOWN,
    )
