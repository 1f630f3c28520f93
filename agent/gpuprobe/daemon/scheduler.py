"""Runs the checks on their intervals: every check at `--interval` (or its own interval from
the config), the active ones (storage, NCCL) at their own longer one, with jitter.

Checks that share an interval run together as one round, so a round makes one report update.
The passive groups share one thread (their rounds fall due together, so a fresh agent's first
report holds every passive check); each active group runs on a thread of its own, so a storage
or NCCL test that takes minutes never holds back the passive rounds nor the first report. Each
round publishes as it ends: the report merges the latest result of every check.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuprobe.checks.registry import log_code
from gpuprobe.checks.runner import CheckRunner, Ran
from gpuprobe.config import ServeConfig
from gpuprobe.daemon.store import AgentState, ReportStore
from gpuprobe.report import Finding
from gpuprobe.threads import start_thread

log = logging.getLogger("gpuprobe.serve")
# How long a scheduling lane the system refused a thread for waits before it tries again.
LANE_RETRY_SECONDS = 1.0


@dataclass
class Group:
    """Checks that run together, every `interval` seconds; the next round is due at `due`.
    An `active` group (storage, NCCL) runs on a thread of its own."""

    interval: float
    names: list[str]
    due: float
    active: bool = False


def plan(
    names: Sequence[str],
    config: ServeConfig,
    active: frozenset[str],
    start: float,
    rng: random.Random,
) -> list[Group]:
    """The rounds: one group per interval. Passive checks run at once on start; active
    ones first after a random part of their jitter window, so a DaemonSet rollout does not
    load shared storage from every node at the same moment."""
    by_interval: dict[tuple[float, bool], list[str]] = {}
    for name in names:
        is_active = name in active
        by_interval.setdefault((config.interval(name, is_active), is_active), []).append(name)
    groups = []
    for (interval, is_active), members in by_interval.items():
        delay = rng.uniform(0, config.jitter_fraction * interval) if is_active else 0.0
        groups.append(Group(interval, members, start + delay, is_active))
    return groups


def lanes(groups: Sequence[Group]) -> list[list[Group]]:
    """The groups each scheduling thread runs: every passive group on one, each active group
    on one of its own."""
    passive = [g for g in groups if not g.active]
    return ([passive] if passive else []) + [[g] for g in groups if g.active]


class Scheduler:
    """Runs the groups' rounds until stopped, and checks on demand (RunChecks)."""

    def __init__(
        self,
        executor: CheckRunner,
        store: ReportStore,
        groups: list[Group],
        jitter_fraction: float,
        order: Sequence[str],
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.executor = executor
        self.store = store
        self.groups = groups
        self.jitter_fraction = jitter_fraction
        self._order = list(order)
        self._clock = clock
        self._rng = rng or random.Random()
        self._publishing = threading.Lock()
        self._threads: list[threading.Thread] = []

    def run(self, stop: threading.Event) -> None:
        """Run rounds as they fall due until `stop` is set: the passive groups on one thread,
        each active group on its own (see `lanes`). Returns once `stop` is set; the lanes'
        threads end after the round they are in (see `join`)."""
        self._threads = []
        for lane in lanes(self.groups):
            name = "schedule-" + ("-".join(lane[0].names) if lane[0].active else "passive")
            # A lane that cannot start now (a pids limit reached) starts once it can.
            while (thread := start_thread(self._run_lane, name, (lane, stop))) is None:
                if stop.wait(LANE_RETRY_SECONDS):
                    return
            self._threads.append(thread)
        stop.wait()

    def join(self, timeout: float) -> list[str]:
        """Wait up to `timeout` seconds for the lanes to end (after `stop`); returns the names
        of the threads still in a round (a check past the grace is abandoned to them)."""
        deadline = self._clock() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - self._clock()))
        return [t.name for t in self._threads if t.is_alive()]

    def _run_lane(self, groups: list[Group], stop: threading.Event) -> None:
        """Run `groups`' rounds as they fall due; groups due together run as one round."""
        while not stop.is_set():
            started = self._clock()
            due = [g for g in groups if g.due <= started]
            if not due:
                stop.wait(min(g.due for g in groups) - started)
                continue
            names = [n for n in self._order if any(n in g.names for g in due)]
            try:
                self.run_now(names)
            except Exception:  # a bug in a sink must not end the schedule
                log.exception("round failed", extra={"checks": names})
            for group in due:
                group.due = max(group.due + self._next(group.interval), self._clock())

    def run_now(self, names: Sequence[str], within: float | None = None) -> list[Ran]:
        """Run the named checks now (bounded by `within` seconds) and merge their results."""
        ran = self.executor.run(names, within)
        with self._publishing:  # rounds end on several threads: compare with this update's own
            before = self.store.current()
            after = self.store.update(ran)
        _log_round(ran, before, after)
        return ran

    def _next(self, interval: float) -> float:
        spread = self.jitter_fraction * interval
        return interval + self._rng.uniform(-spread, spread)


def _log_round(ran: list[Ran], before: AgentState, after: AgentState) -> None:
    for item in ran:
        if item.timed_out:
            log.warning("check timed out", extra={"check": item.result.name})
    if after.change != before.change and after.report is not None:
        log.info(
            "report changed",
            extra={
                "status": after.report.status.value,
                "checks": {c.name: c.status.value for c in after.report.checks},
                "findings": list(
                    dict.fromkeys(_finding_key(c, f) for c, f in after.report.findings())
                ),
            },
        )


def _finding_key(check: str, finding: Finding) -> str:
    """A finding as the "report changed" line names it: `check:CODE:resource`, an XID's code
    with its number (`xid:XID 119:gpu:6:...`), as one GPU may have raised several (the
    record's `log_code`)."""
    return f"{check}:{log_code(check, finding)}:{finding.resource}"
