"""The cluster view as `audit --json` writes it under `cluster` (docs/audit.md, "The cluster
view"): the checklist's items, the findings, the GPU nodes, the waiting GPU pods and gangs,
and how each source was read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprobe.audit.view.read import Source
from gpuprobe.effects.readback import NodeSignals
from gpuprobe.report import Finding, Status, worst


@dataclass(frozen=True)
class Item:
    """One line of the checklist: its name, verdict, a sentence, and the facts behind it."""

    name: str
    status: Status
    summary: str
    facts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As `cluster.checklist[]`."""
        return {
            "item": self.name,
            "status": self.status.value,
            "summary": self.summary,
            "facts": self.facts,
        }


@dataclass
class ClusterView:
    """The checklist answered for this cluster, with its findings."""

    version: str
    items: list[Item]
    findings: list[Finding]
    gpu_nodes: list[dict[str, Any]]
    waiting: list[dict[str, Any]]
    gangs: list[dict[str, Any]]
    sources: list[Source]
    # The GPU nodes' gpuprobe conditions and taints, read in the same pass as the nodes
    # (`audit --json` writes them under `kubernetes`, not here), or why they were not.
    signals: list[NodeSignals] = field(default_factory=list)
    signals_error: str | None = None

    @property
    def status(self) -> Status:
        """The worst of the findings' severities and the items' verdicts (an item that could
        not be read is UNKNOWN: never a false OK)."""
        return worst([*(f.severity.status for f in self.findings), *(i.status for i in self.items)])

    def to_dict(self) -> dict[str, Any]:
        """The `cluster` object."""
        return {
            "status": self.status.value,
            "server_version": self.version,
            "checklist": [i.to_dict() for i in self.items],
            "findings": [f.to_dict() for f in self.findings],
            "gpu_nodes": self.gpu_nodes,
            "pending_gpu_pods": self.waiting,
            "gangs": self.gangs,
            "sources": [s.to_dict() for s in self.sources],
        }
