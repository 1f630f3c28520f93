"""One node's effects: the appliers the configuration turns on, in the order they run.

`NodeEffects.publish` makes one attempt for one report (raising `KubeError` on the first
failed call; what it had written stays written, and the node is read again before the next
attempt, so nothing is lost). What keeps pods off a broken node goes first, what tells people
after: the conditions, the terminating taint, the unhealthy taint, the events. A notice
attempt (`Lane.NOTICE`) runs the notice's applier alone.
"""

from __future__ import annotations

from datetime import datetime

from gpuprobe.config import KubernetesConfig
from gpuprobe.effects import conditions
from gpuprobe.effects.appliers import (
    Applier,
    ConditionApplier,
    EventApplier,
    TaintApplier,
    TerminatingApplier,
)
from gpuprobe.effects.brake import FleetBrake
from gpuprobe.effects.budget import Lane
from gpuprobe.effects.view import Api, NodeView
from gpuprobe.kube.api import KubeError
from gpuprobe.report import Finding, NodeReport


class NodeEffects:
    """Writes one node's conditions, events and taints from its reports, remembering what the
    node already says so that an unchanged round costs no request."""

    def __init__(self, api: Api, node: str, config: KubernetesConfig, run: str) -> None:
        self.node = node
        self.config = config
        self.view = NodeView(api, node, conditions.groups(config))
        self.brake = FleetBrake(api, node, config.taint)
        self.notices: TerminatingApplier | None = None
        self.appliers: list[Applier] = [ConditionApplier(self.view, config)]
        if config.taint.enabled:
            self.notices = TerminatingApplier(self.view)  # outside the brake: the node goes
            self.appliers += [self.notices, TaintApplier(self.view, config, self.brake)]
        if config.events:
            self.appliers.append(EventApplier(api, node, run))

    @property
    def handled(self) -> list[KubeError]:
        """Failed calls handled within an attempt (conflicts re-read and re-applied)."""
        return self.view.handled

    def publish(self, report: NodeReport, at: datetime, lane: Lane = Lane.ORDINARY) -> None:
        """Bring the node up to date with `report`, the appliers of `lane` and the lanes
        before it; raises KubeError on a failed call."""
        try:
            for applier in self.appliers:
                if applier.lane <= lane:
                    applier.apply(report, at)
        except KubeError:
            self.forget()  # the failed write may have landed, or another writer came
            raise

    def urgent(self, report: NodeReport) -> bool:
        """Whether `report` brings a notice the node does not carry yet (no request)."""
        return self.notices is not None and self.notices.urgent(report)

    def forget(self) -> None:
        """Read the node again before the next write instead of trusting what was seen."""
        self.view.forget()

    def findings(self) -> list[Finding]:
        """The agent's own findings about its effects (TAINT_WITHHELD), each applier's."""
        return [f for applier in self.appliers for f in applier.findings()]
