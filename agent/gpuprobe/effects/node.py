"""One node's effects: the appliers the configuration turns on, in the order they run.

`NodeEffects.publish` makes one attempt for one report (raising `KubeError` on the first
failed call; what it had written stays written, and the node is read again before the next
attempt, so nothing is lost). What keeps pods off a broken node goes first, what tells people
after: the conditions, the terminating taint, the unhealthy taint, the events. A notice
attempt (`Lane.NOTICE`) runs the notice's applier alone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from gpuprobe.config import KubernetesConfig, RemediationConfig
from gpuprobe.effects import conditions, gpu_effects
from gpuprobe.effects.appliers import (
    Applier,
    ConditionApplier,
    EventApplier,
    TaintApplier,
    TerminatingApplier,
)
from gpuprobe.effects.brake import FleetBrake
from gpuprobe.effects.budget import Lane
from gpuprobe.effects.gpu_effects import GpuEffects
from gpuprobe.effects.view import Api, NodeView
from gpuprobe.kube.api import KubeError
from gpuprobe.report import Finding, NodeReport


class EffectsApi(Api, gpu_effects.Api, Protocol):
    """What every applier needs of the API (`gpuprobe.kube.api.KubeApi`)."""


class NodeEffects:
    """Writes one node's conditions, events and taints from its reports, remembering what the
    node already says so that an unchanged round costs no request."""

    def __init__(
        self,
        api: EffectsApi,
        node: str,
        config: KubernetesConfig,
        run: str,
        remediation: RemediationConfig | None = None,
        boot_id: str | None = None,
    ) -> None:
        self.node = node
        self.config = config
        self.view = NodeView(api, node, conditions.groups(config))
        self.brake = FleetBrake(api, node, config.taint)
        # Device taints and evictions (docs/kubernetes.md, "Acting on one GPU"): off unless
        # configured; the device taints go first, the node taint covers what they do not.
        self.gpus = GpuEffects(
            api, node, config, remediation or RemediationConfig(), boot_id, self.view.handled
        )
        first, after, last = self.gpus.appliers()
        self.notices: TerminatingApplier | None = None
        self.appliers: list[Applier] = [*first, ConditionApplier(self.view, config)]
        if config.taint.enabled:
            self.notices = TerminatingApplier(self.view)  # outside the brake: the node goes
            taint = TaintApplier(self.view, config, self.brake, lambda: self.gpus.covered)
            self.appliers += [self.notices, taint]
        self.appliers += after
        if config.events:
            self.appliers.append(EventApplier(api, node, run))
        self.appliers += last

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
        self.gpus.forget()

    def findings(self) -> list[Finding]:
        """The agent's own findings about its effects (TAINT_WITHHELD, DEVICE_TAINT_WITHHELD,
        EVICTION_WITHHELD), each applier's."""
        return [f for applier in self.appliers for f in applier.findings()]

    def data(self) -> dict[str, Any]:
        """What the effects did, for the agent's own result's data (empty unless device
        taints or evictions are on)."""
        return self.gpus.data()
