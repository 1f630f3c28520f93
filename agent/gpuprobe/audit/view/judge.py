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
from gpuprobe.report import Action, Finding, Severity, Status

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
    # An agent that answers under another name than its pod's node (its NODE_NAME is the
    # host name, the Node is the cloud's name) answers for that node all the same.
    by_target = {n.target: n for n in nodes if n.reachable}
    for pod in facts.agents:
        answered = by_target.get(pod.target)
        if pod.node and pod.node not in agents and answered is not None:
            agents[pod.node] = answered
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
    findings += unreadable_findings(facts)
    pending, waiting = waiting_view(facts, agents, now, windows.pending)
    partial, gangs = gang_view(facts, now, windows.pending)
    no_gang = no_gang_finding(facts)
    items.append(
        _pending_item(facts, len(pending), len(partial), no_gang is not None, windows.pending)
    )
    findings += pending + partial + ([no_gang] if no_gang else [])
    return ClusterView(
        version=facts.version,
        items=[_short_of_objects(i, facts) for i in items],
        findings=findings,
        gpu_nodes=checklist.gpu_node_entries(facts.nodes, agents),
        waiting=waiting,
        gangs=gangs,
        sources=list(facts.sources.values()),
        signals=facts.signals,
        signals_error=_nodes_error(facts),
    )


# The sources each item reads: an item that would be OK is UNKNOWN while one of them held
# objects the view could not read (what was skipped might have changed the verdict).
ITEM_SOURCES = {
    "control_plane": ("discovery", "nodes"),
    "agents": ("nodes", "agent pods"),
    "gpu_resources": ("nodes",),
    "device_stack": ("nodes", "daemonsets", "clusterpolicies", "resourceslices"),
    "sharing": ("nodes",),
    "interconnect": ("nodes", "nicclusterpolicies"),
    "gang_scheduling": ("discovery",),
    "nccl_mesh": ("discovery", "nodes"),
    "shared_storage": ("storageclasses", "csidrivers", "persistentvolumeclaims"),
    "spot": ("nodes", "daemonsets", "agent pods"),
    "autoscaling": (
        "nodes",
        "nodepools",
        "cluster-autoscaler status",
        "pods on GPU nodes without agents",
    ),
    "pending_gpu_pods": (
        "pending pods",
        "scheduling events",
        "gang pods",
        "podgroups.scheduling.volcano.sh",
        "podgroups.scheduling.x-k8s.io",
        "jobsets",
        "pytorchjobs",
        "mpijobs",
    ),
}


def unreadable_findings(facts: ClusterFacts) -> list[Finding]:
    """One API_OBJECT_UNREADABLE per source that held objects of the wrong shape: how many,
    the first few named with what was wrong."""
    found = []
    for source, count in facts.unreadable.items():
        named = facts.unreadable_named.get(source, [])
        more = f" and {count - len(named)} more" if count > len(named) else ""
        found.append(
            Finding(
                "API_OBJECT_UNREADABLE",
                Severity.UNKNOWN,
                f"{count} object(s) of {source} could not be read and were skipped: "
                + "; ".join(named)
                + more
                + ": what they hold is not in the view (a controller or a proxy wrote them "
                "in a shape the API does not give); the items that read them are not OK",
                Action.NONE,
                "cluster",
            )
        )
    return found


def _short_of_objects(item: Item, facts: ClusterFacts) -> Item:
    """An item that would be OK is UNKNOWN while a source it reads was not read (failed,
    forbidden) or skipped objects: what is missing might have changed the verdict."""
    short = []
    for name in ITEM_SOURCES.get(item.name, ()):
        source = facts.sources.get(name)
        if source is not None and source.state in ("failed", "forbidden"):
            why = f"needs {source.missing}" if source.missing else source.detail
            short.append(f"{name} not read: {why}")
        elif facts.unreadable.get(name):
            short.append(f"{facts.unreadable[name]} {name} object(s) unreadable")
    if item.status != Status.OK or not short:
        return item
    return Item(item.name, Status.UNKNOWN, f"{item.summary} ({'; '.join(short)})", item.facts)


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
