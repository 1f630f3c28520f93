"""The appliers: each brings one kind of effect on the node up to date with a report.

An applier asks its planner (pure: `conditions`, `events`, `taints`, `terminating`) what the
report calls for, compares it with the node as last seen (`NodeView`), and writes only the
difference, raising `KubeError` on a failed call. Each has a lane (`budget.Lane`): the notice
lane's appliers run in every attempt, the others in ordinary attempts only. A new effect (a
device's taint, an eviction) is one more applier in `gpuprobe.effects.node.NodeEffects`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any, Protocol

from gpuprobe.config import KubernetesConfig
from gpuprobe.effects import conditions, events, taints, terminating
from gpuprobe.effects.brake import FleetBrake
from gpuprobe.effects.budget import Lane
from gpuprobe.effects.view import Api, NodeView
from gpuprobe.kube.api import KubeError
from gpuprobe.report import Finding, NodeReport

log = logging.getLogger("gpuprobe.kube")

HEARTBEAT_SECONDS = 240.0  # conditions are re-asserted within 5 minutes
# Event series remembered (name -> count); past this many, older series are forgotten and a
# transition seen again starts a new one (findings on ever new resources must not grow it).
MAX_SERIES = 4096


class Applier(Protocol):
    """One kind of effect: its lane, and the attempt that brings the node up to date."""

    @property
    def lane(self) -> Lane: ...

    def apply(self, report: NodeReport, at: datetime) -> None:
        """Write what `report` calls for and the node does not say yet; raises KubeError."""

    def findings(self) -> list[Finding]:
        """The agent's own findings about this effect now (a taint withheld, ...)."""


class ConditionApplier:
    """The node conditions gpuprobe owns, re-asserted at least every `HEARTBEAT_SECONDS`."""

    lane = Lane.ORDINARY

    def __init__(self, view: NodeView, config: KubernetesConfig) -> None:
        self.view = view
        self.groups = conditions.groups(config)
        self._beat: datetime | None = None

    def apply(self, report: NodeReport, at: datetime) -> None:
        """Patch the conditions that changed (all of them on a heartbeat)."""
        wanted = conditions.desired(report, self.groups)
        current = self.view.known_conditions()
        heartbeat = self._beat is None or (at - self._beat).total_seconds() >= HEARTBEAT_SECONDS
        patch = conditions.to_write(wanted, current, at, heartbeat)
        if patch:
            self.view.patch_conditions(patch)
        if heartbeat:
            self._beat = at

    def findings(self) -> list[Finding]:
        """None of its own."""
        return []


class TerminatingApplier:
    """`gpuprobe.io/terminating`, as the lifecycle check's notices say: the notice lane."""

    lane = Lane.NOTICE

    def __init__(self, view: NodeView) -> None:
        self.view = view

    def urgent(self, report: NodeReport) -> bool:
        """Whether `report` brings a notice the node does not carry yet (pure: no request)."""
        return terminating.urgent(self.view.taints, terminating.wanted(report))

    def apply(self, report: NodeReport, at: datetime) -> None:
        """Add, change or remove the taint; no request when the node already says it."""
        kind = terminating.wanted(report)
        if self.view.taints is not None and terminating.decide(self.view.taints, kind) is None:
            return
        if self.view.patch_taints(lambda current: terminating.decide(current, kind)) is not None:
            log.warning("terminating taint", extra={"node": self.view.node, "kind": kind})

    def findings(self) -> list[Finding]:
        """None of its own."""
        return []


class TaintApplier:
    """The opt-in `gpuprobe.io/unhealthy` taint: added when a configured code is CRITICAL
    unless the fleet brake holds, removed once none has been for `clear_after_seconds`."""

    lane = Lane.ORDINARY

    def __init__(
        self,
        view: NodeView,
        config: KubernetesConfig,
        brake: FleetBrake,
        covered: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        self.view = view
        self.config = config.taint
        self.brake = brake
        # The GPU resources whose device taints stand: their faults add no node taint.
        self.covered = covered
        self._last_due: datetime | None = None

    def apply(self, report: NodeReport, at: datetime) -> None:
        """Bring the taint up to date, asking the brake before a new one."""
        code = taints.due(report, self.config.codes, self.covered())
        if code is not None:
            self._last_due = at
        elif self._last_due is None:
            self._last_due = at  # after a restart: the clear delay counts from now
        clear_for = (at - self._last_due).total_seconds()
        known = self.view.taints
        if known is not None and taints.decide(known, code, clear_for, self.config, at) is None:
            if code is None or taints.ours(known) is not None:
                self.brake.release()
            return
        if self.brake.resting(at):
            return

        def decide(current: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
            new = taints.decide(current, code, clear_for, self.config, at)
            if new is None or (taints.ours(current) is None and self.brake.engaged(at)):
                return None
            return new

        new = self.view.patch_taints(decide)
        if new is None:
            return
        if taints.ours(new) is not None:
            log.warning("tainted", extra={"taint": taints.ours(new), "node": self.view.node})
        else:
            log.info("taint removed", extra={"node": self.view.node})

    def findings(self) -> list[Finding]:
        """TAINT_WITHHELD while the fleet brake holds a due taint back."""
        return self.brake.findings()


class EventApplier:
    """An event when a CRITICAL or WARNING finding appears or clears, one series per
    transition (named for the agent's `run`)."""

    lane = Lane.ORDINARY

    def __init__(self, api: Api, node: str, run: str) -> None:
        self.api = api
        self.node = node
        self.run = run
        self._told: dict[events.FindingKey, Finding] = {}  # what the events have said so far
        self._series: dict[str, int] = {}

    def apply(self, report: NodeReport, at: datetime) -> None:
        """Send the transitions since the events last said; remember each one sent."""
        after = events.notable(report)
        for event in events.changes(self._told, after):
            name = events.event_name(self.node, event, self.run)
            count = self._series.get(name, 0) + 1
            if count == 1:
                try:
                    self.api.create_event(events.body(event, self.node, name, at))
                except KubeError as exc:
                    if exc.code != "409":  # already there: an earlier try did land
                        raise
            else:
                self.api.patch_event(events.NAMESPACE, name, events.series_patch(count, at))
            if len(self._series) >= MAX_SERIES and name not in self._series:
                self._series.clear()
            self._series[name] = count
            key = (event.code, event.resource)
            if event.action == events.DETECTED:
                self._told[key] = after[key]
            else:
                self._told.pop(key, None)

    def findings(self) -> list[Finding]:
        """None of its own."""
        return []
