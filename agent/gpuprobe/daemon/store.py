"""The agent's latest report: each check's latest result, merged, versioned and watched.

Only the scheduler (and RunChecks, ClearFindings) write here; GetReport, WatchReports and
`/metrics` only read. Each update assembles the report through the pipeline's post-passes
(`gpuprobe.pipeline.assemble`) and feeds the new state to the sinks (the gRPC messages, the
metric families, the effects loop) once, so that reading them costs nothing but a
reference.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpuprobe.checks.runner import Ran
from gpuprobe.pipeline import Sink, assemble, feed
from gpuprobe.report import NodeReport, now

# What makes a report "changed" for WatchReports: the checks present, their statuses, and
# each finding's identity. Messages and data (temperatures, figures) are left out, so a
# watcher hears of what an operator acts on, not of every reading.
Signature = tuple[tuple[str, str, tuple[tuple[str, str, str, str], ...]], ...]


@dataclass(frozen=True)
class LinkResult:
    """This agent's latest bandwidth measurement toward one peer over one transport."""

    peer: str
    transport: str
    bytes_per_second: float
    time: datetime


@dataclass(frozen=True)
class AgentState:
    """What the store holds after one update: the merged report, when each check ran, the
    update counters, and the latest bandwidth results. The sinks render it; it is not a node
    snapshot (`gpuprobe capture`) and never leaves the process."""

    report: NodeReport | None
    check_times: dict[str, datetime] = field(default_factory=dict)
    version: int = 0  # every update
    change: int = 0  # updates that changed a status or a finding
    runs: dict[str, int] = field(default_factory=dict)
    timeouts: dict[str, int] = field(default_factory=dict)
    # This agent's latest bandwidth results toward its peers (not part of the report).
    links: tuple[LinkResult, ...] = ()


def signature(report: NodeReport) -> Signature:
    """What a watcher compares between two reports."""
    return tuple(
        (
            c.name,
            c.status.value,
            tuple(
                sorted((f.code, f.severity.value, f.action.value, f.resource) for f in c.findings)
            ),
        )
        for c in report.checks
    )


class ReportStore:
    """The latest result of each check, as one report in check order.

    No report is published until every check in `first` has a result (the passive ones: a
    storage or NCCL round that ends first must not make a report of just itself); results
    that come before are kept and join the first report.
    """

    def __init__(self, node: str, order: Sequence[str], first: Sequence[str] = ()) -> None:
        self.node = node
        self._order = list(order)
        self._first = frozenset(first)
        self._latest: dict[str, Ran] = {}
        self._runs: dict[str, int] = {}
        self._timeouts: dict[str, int] = {}
        self._signature: Signature | None = None
        self._state = AgentState(report=None)
        self._changed = threading.Condition()
        self._update_lock = threading.Lock()
        self._sinks: list[Sink[AgentState]] = []

    def add_sink(self, sink: Sink[AgentState]) -> None:
        """Feed `sink` every new state (and now the current one)."""
        with self._update_lock:
            self._sinks.append(sink)
            sink(self._state)

    def current(self) -> AgentState:
        """The latest state."""
        return self._state

    def update(self, ran: Iterable[Ran], time: datetime | None = None) -> AgentState:
        """Merge fresh results into the report; feeds the sinks and wakes watchers when
        anything changed."""
        with self._update_lock:
            for item in ran:
                name = item.result.name
                self._latest[name] = item
                self._runs[name] = self._runs.get(name, 0) + 1
                if item.timed_out:
                    self._timeouts[name] = self._timeouts.get(name, 0) + 1
            if self._state.report is None and not self._first <= set(self._latest):
                return self._state  # the first report waits for every passive check
            order = self._order + sorted(set(self._latest) - set(self._order))
            results = [self._latest[n].result for n in order if n in self._latest]
            report = assemble(self.node, time or now(), results)
            sig = signature(report)
            old = self._state
            state = AgentState(
                report=report,
                check_times={n: r.time for n, r in self._latest.items()},
                version=old.version + 1,
                change=old.change + (sig != self._signature),
                runs=dict(self._runs),
                timeouts=dict(self._timeouts),
                links=old.links,
            )
            self._signature = sig
            return self._publish(state)

    def update_links(self, links: Iterable[LinkResult]) -> AgentState:
        """Replace the bandwidth results; feeds the sinks (watchers are not woken)."""
        with self._update_lock:
            state = replace(self._state, version=self._state.version + 1, links=tuple(links))
            return self._publish(state)

    def _publish(self, state: AgentState) -> AgentState:
        feed(state, self._sinks)
        with self._changed:
            self._state = state
            self._changed.notify_all()
        return state

    def wait_change(self, after: int, timeout: float) -> AgentState | None:
        """The state once its `change` is past `after`; None if `timeout` passes first."""
        with self._changed:
            if self._changed.wait_for(lambda: self._state.change > after, timeout):
                return self._state
        return None

    def wake_all(self) -> None:
        """Wake every waiting watcher (on shutdown, so streams end promptly)."""
        with self._changed:
            self._changed.notify_all()
