"""The cluster view from what was read and what the agents answered: the checklist's items
in order, then the findings (the items' own and the waiting pods' and gangs')."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuprobe.audit.cluster import AuditedNode
from gpuprobe.audit.view import checklist
from gpuprobe.audit.view.model import ClusterView, Item
from gpuprobe.audit.view.nccl_mesh import nccl_mesh
from gpuprobe.audit.view.read import ClusterFacts
from gpuprobe.audit.view.waiting import gang_view, no_gang_finding, waiting_view
from gpuprobe.report import Finding, Status

DEFAULT_PENDING_WINDOW = 300.0  # a GPU pod Pending longer than this is reported
DEFAULT_IDLE_WINDOW = 3600.0  # a GPU node with nothing allocated longer than this is idle


@dataclass(frozen=True)
class Windows:
    """How long a GPU pod may wait, and a GPU node stay unallocated, before they count."""

    pending: float = DEFAULT_PENDING_WINDOW
    idle: float = DEFAULT_IDLE_WINDOW


def judge(
    facts: ClusterFacts,
    nodes: Sequence[AuditedNode],
    now: datetime,
    windows: Windows = Windows(),
    found_by_api: bool = True,
) -> ClusterView:
    """The view: each checklist item with its facts and verdict, and every finding."""
    agents = {n.node: n for n in nodes if n.node}
    judged = [
        checklist.control_plane(facts),
        checklist.agents_item(facts, agents, found_by_api),
        checklist.gpu_resources(facts, agents),
        checklist.device_stack(facts),
        checklist.gpu_quarantine(facts),
        checklist.sharing(facts),
        checklist.interconnect(facts),
        checklist.gangs_and_operators(facts),
        nccl_mesh(facts, agents),
        checklist.shared_storage(facts),
        checklist.spot(facts, agents),
        checklist.autoscaling(facts, agents, now, windows.idle),
    ]
    items = [item for item, _ in judged]
    findings: list[Finding] = [f for _, found in judged for f in found]
    pending, waiting = waiting_view(facts, agents, now, windows.pending)
    partial, gangs = gang_view(facts, now, windows.pending)
    no_gang = no_gang_finding(facts)
    items.append(
        _pending_item(facts, len(pending), len(partial), no_gang is not None, windows.pending)
    )
    findings += pending + partial + ([no_gang] if no_gang else [])
    return ClusterView(
        version=facts.version,
        items=items,
        findings=findings,
        gpu_nodes=checklist.gpu_node_entries(facts.nodes, agents),
        waiting=waiting,
        gangs=gangs,
        sources=list(facts.sources.values()),
        signals=facts.signals,
        signals_error=_nodes_error(facts),
    )


def _nodes_error(facts: ClusterFacts) -> str | None:
    """Why the nodes were not read (None when they were)."""
    source = facts.sources.get("nodes")
    if source is None:
        return "nodes: never asked"
    if source.state != "read":
        return f"nodes: {source.state}: {source.detail}"
    return None


def _pending_item(
    facts: ClusterFacts, pending: int, partial: int, no_gang: bool, window: float
) -> Item:
    """The waiting GPU pods and gangs, counted."""
    if (item := checklist.unread("pending_gpu_pods", facts, "pending pods")) is not None:
        return item
    more = f" (and {facts.waiting_unkept} more not examined)" if facts.waiting_unkept else ""
    text = (
        f"{pending} GPU pod(s) Pending past {window:g} s{more}, {len(facts.waiting)} Pending in "
        f"all; {partial} gang(s) partly scheduled"
    )
    if no_gang:
        text += "; multi-pod GPU jobs without gang scheduling"
    status = Status.WARNING if pending or partial or no_gang or facts.waiting_unkept else Status.OK
    facts_out = {
        "pending_gpu_pods": len(facts.waiting) + facts.waiting_unkept,
        "past_window": pending,
        "window_seconds": window,
        "gangs_partly_scheduled": partial,
    }
    return Item("pending_gpu_pods", status, text, facts_out)
