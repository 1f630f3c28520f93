"""The effects loop: the one thread that writes the node, notices first, within its budget.

`EffectsLoop` takes the latest report from the agent's store (`offer`, which never blocks) and
brings the node up to date on its own thread: the checks, gRPC and `/metrics` never wait on
the API server. Each attempt takes a token of its lane (`gpuprobe.effects.budget`): a report
that brings a provider's notice goes at once in the notice lane (the terminating taint alone),
everything else in the ordinary lane within `kubernetes.update_burst` and
`kubernetes.updates_per_minute`, the first of them at a random moment within
`kubernetes.start_jitter_seconds` (a notice does not wait for it). Failures back off
exponentially with jitter (a new report does not cut a backoff short), and while updates fail
for more than 5 minutes the agent says so in its own result (`kubernetes`), which joins the
report through `report_own`.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpuprobe.config import KubernetesConfig
from gpuprobe.effects.appliers import HEARTBEAT_SECONDS
from gpuprobe.effects.budget import Lane, PriorityBudget, backoff
from gpuprobe.effects.node import NodeEffects
from gpuprobe.kube.api import KubeError
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity, now

log = logging.getLogger("gpuprobe.kube")

CHECK_NAME = "kubernetes"  # the agent's own result about its Kubernetes updates
UNREACHABLE_AFTER_SECONDS = 300.0


class EffectsLoop:
    """Brings the node up to date with the latest report after each round, on its own
    thread, within the budget of each lane."""

    def __init__(
        self,
        effects: NodeEffects,
        report_own: Callable[[CheckResult], None],
        config: KubernetesConfig,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = now,
    ) -> None:
        self.effects = effects
        self._report: NodeReport | None = None
        self.report_own = report_own
        self.config = config
        self.rng = rng or random.Random()
        self.clock = clock
        self.wall = wall
        self.up = False
        self.errors: dict[tuple[str, str], int] = {}
        self.failures = 0
        self.failing_since: float | None = None
        self.last_error: KubeError | None = None
        self._wake = threading.Event()  # a new report: the ordinary lane has work
        self._notice = threading.Event()  # a report with a notice: the notice lane has work
        self._own: list[Finding] | None = None
        self._own_data: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self.budget = PriorityBudget(config.update_burst, config.updates_per_minute, clock)
        self.attempts = 0
        self._ordinary_from = float("-inf")  # no ordinary attempt before (`run` sets it)

    def offer(self, report: NodeReport | None) -> None:
        """A new report (from the agent's store, after each round): publish it soon. Never
        blocks; the report is handed over here, so none is missed between two attempts.
        `None` only wakes the loop (to see that it is stopped)."""
        if report is not None:
            self._report = report
        # `urgent` reads the view the loop's thread replaces whole, never changes in place;
        # the loop asks again before each attempt, so a stale answer here only wakes it.
        if report is None or self.effects.urgent(report):
            self._notice.set()
        self._wake.set()

    def step(self, lane: Lane = Lane.ORDINARY) -> float:
        """One attempt of `lane` with the latest report; the seconds to wait before the next."""
        if lane is Lane.ORDINARY:
            self._wake.clear()
        report = self._report
        delay = HEARTBEAT_SECONDS
        if report is not None:
            try:
                if lane is Lane.ORDINARY:
                    self.effects.publish(report, self.wall())
                else:
                    self.effects.publish(report, self.wall(), lane)
            except KubeError as exc:
                with self._lock:
                    key = (exc.verb, exc.code)
                    self.errors[key] = self.errors.get(key, 0) + 1
                    self.up = False
                    self.failures += 1
                    self.last_error = exc
                    if self.failing_since is None:
                        self.failing_since = self.clock()
                log.warning(
                    "kubernetes update failed",
                    extra={"verb": exc.verb, "code": exc.code, "error": exc.message},
                )
                delay = backoff(self.failures, self.rng)
            else:  # a notice's write alone does not say the node's other updates go through
                if lane is Lane.ORDINARY:
                    with self._lock:
                        self.up, self.failures, self.failing_since = True, 0, None
        with self._lock:
            for handled in self.effects.handled:
                key = (handled.verb, handled.code)
                self.errors[key] = self.errors.get(key, 0) + 1
            self.effects.handled.clear()
        self._report_own()
        due = self.effects.gpus.next_due()
        if due is not None and not self.failures:  # a refused eviction's next try
            delay = min(delay, max(0.0, (due - self.wall()).total_seconds()))
        return delay

    def own_findings(self) -> list[Finding]:
        """The agent's findings about its Kubernetes updates, now."""
        found = self.effects.findings()
        if self.failing_since is not None and self.last_error is not None:
            failing = self.clock() - self.failing_since
            if failing > UNREACHABLE_AFTER_SECONDS:
                found.append(
                    Finding(
                        "KUBERNETES_UNREACHABLE",
                        Severity.WARNING,
                        f"node updates have failed for {failing:.0f} s "
                        f"(last: {self.last_error.verb} {self.last_error.code})",
                        Action.CHECK_NETWORK,
                    )
                )
        return found

    def _report_own(self) -> None:
        found = self.own_findings()
        data = self.effects.data()
        if (found, data) == (self._own, self._own_data):
            return
        self._own, self._own_data = found, data
        if self.up:
            summary = "node conditions, events and taint up to date"
        elif self.failures:
            summary = f"node updates failing ({self.failures} tries), retrying with backoff"
        else:
            summary = "no node update yet"
        self.report_own(CheckResult(CHECK_NAME, summary, found, data=data))

    def next_lane(self) -> Lane | float:
        """The lane whose token was just taken for the next attempt, or the seconds to wait
        for one: the notice lane when the latest report brings a notice, else the ordinary."""
        self._notice.clear()
        report = self._report
        notice_wait = None
        if report is not None and self.effects.urgent(report):
            notice_wait = self.budget.take(Lane.NOTICE)
            if notice_wait == 0:
                return Lane.NOTICE
        wait = self._ordinary_from - self.clock()  # the jittered start
        if wait <= 0:
            wait = self.budget.take(Lane.ORDINARY)
            if wait == 0:
                return Lane.ORDINARY
        return wait if notice_wait is None else min(wait, notice_wait)

    def run(self, stop: threading.Event) -> None:
        """Publish until `stop` is set: a notice at once (even within the jittered start),
        the rest after the jittered start, after each round, at least every heartbeat, and
        after each failure once its backoff has passed."""
        jitter = self.rng.uniform(0, self.config.start_jitter_seconds)
        self._ordinary_from = self.clock() + jitter
        while not stop.is_set():
            if self._report is None:  # nothing to write yet: no token spent on it
                self._wake.wait(HEARTBEAT_SECONDS)
                continue
            lane = self.next_lane()
            if not isinstance(lane, Lane):  # over budget: the latest report goes at a token,
                self._notice.wait(lane)  # a notice as soon as its lane has one
                continue
            self.attempts += 1
            failures = self.failures
            try:
                delay = self.step(lane)
            except Exception:  # a bug must not end publishing for the agent's lifetime
                log.exception("kubernetes publishing failed")
                with self._lock:
                    self.up = False
                    self.failures += 1
                delay = backoff(self.failures, self.rng)
            if self.failures > failures:  # this attempt failed
                stop.wait(delay)  # a new round does not cut a backoff short
            elif lane is Lane.ORDINARY:
                self._wake.wait(delay)
            # after a notice, the ordinary lane's turn: the report's other effects
