"""Why GPU pods wait: each GPU pod Pending past the window with the scheduler's reasons
decoded into causes an operator can act on, and gangs that run in part.

A cause names what to do: not enough free GPUs (and on which nodes they are held, from the
agents' allocations); a resource no node offers (a MIG profile no node is cut into, a GPU
resource no device plugin advertises); a taint the pod does not tolerate (gpuprobe's own,
which its agents' findings explain, or another); a node selector or affinity no node matches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuprobe.audit.cluster import AuditedNode
from gpuprobe.audit.view.kinds import GANG_SCHEDULERS
from gpuprobe.audit.view.nodes import NodeFacts, is_gpu_resource
from gpuprobe.audit.view.pods import Gang, WaitingPod
from gpuprobe.audit.view.read import ClusterFacts
from gpuprobe.audit.view.scheduling import Reason, decode
from gpuprobe.report import Action, Finding, Severity

GPUPROBE_TAINT_PREFIX = "gpuprobe.io/"
# How many nodes a cause names where GPUs are held.
NAMED_NODES = 5


@dataclass(frozen=True)
class Cause:
    """One cause of a pod's wait: its kind, how many nodes it stopped, what it names, the
    scheduler's words and what it means here."""

    cause: str  # insufficient, not_offered, taint, gpuprobe_taint, selector, ... (docs)
    nodes: int | None
    subject: str
    text: str
    meaning: str

    def to_dict(self) -> dict[str, Any]:
        """As `pending_gpu_pods[].causes[]`."""
        return {
            "cause": self.cause,
            "nodes": self.nodes,
            "subject": self.subject,
            "scheduler": self.text,
            "meaning": self.meaning,
        }


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time of the API (None when absent or unreadable)."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


class Held:
    """Where each GPU resource is offered and held, worked out once per resource (hundreds
    of waiting pods name the same few resources; a cluster has thousands of nodes)."""

    def __init__(self, nodes: Sequence[NodeFacts], agents: Mapping[str, AuditedNode]) -> None:
        self.nodes = nodes
        self.agents = agents
        self._texts: dict[str, str] = {}

    def offered(self, resource: str) -> bool:
        """Whether any node offers the resource."""
        if resource not in self._texts:
            self._texts[resource] = self._held(resource)
        return not self._texts[resource].startswith("0 ")

    def most(self, resource: str) -> int:
        """The most of a resource any one node offers."""
        return max((n.allocatable.get(resource, 0) for n in self.nodes), default=0)

    def __call__(self, resource: str) -> str:
        """How many are allocatable, and allocated on which nodes (the fullest first)."""
        if resource not in self._texts:
            self._texts[resource] = self._held(resource)
        return self._texts[resource]

    def _held(self, resource: str) -> str:
        offering = [n for n in self.nodes if n.allocatable.get(resource, 0) > 0]
        total = sum(n.allocatable[resource] for n in offering)
        known = []
        for n in offering:
            agent = self.agents.get(n.name)
            if agent is not None and agent.usage is not None:
                known.append((agent.usage.allocated, n))
        text = f"{total} {resource} allocatable on {len(offering)} node(s)"
        if not known:
            return text + "; no agent tells how many are allocated"
        allocated = sum(a for a, _ in known)
        fullest = sorted(known, key=lambda an: (-an[0], an[1].name))[:NAMED_NODES]
        named = ", ".join(f"{n.name} {a:g}/{n.allocatable[resource]}" for a, n in fullest)
        return f"{text}, {allocated:g} allocated on the {len(known)} with agents (held on {named})"


def explain(reason: Reason, held: Held | None) -> Cause:
    """What one scheduler reason means in this cluster (`held` None: the nodes were not
    read, so nothing is concluded from them)."""
    if reason.cause == "insufficient":
        resource = reason.subject
        if held is None:
            meaning = f"not enough free {resource} (the nodes were not read)"
            return Cause("insufficient", reason.nodes, resource, reason.text, meaning)
        if is_gpu_resource(resource) and not held.offered(resource):
            return Cause(
                "not_offered",
                reason.nodes,
                resource,
                reason.text,
                f"no node offers {resource}: no device plugin advertises it (a MIG profile "
                "no GPU is cut into, a resource name no node has)",
            )
        if is_gpu_resource(resource):
            return Cause(
                "insufficient",
                reason.nodes,
                resource,
                reason.text,
                "not enough free GPUs: " + held(resource),
            )
        return Cause(
            "insufficient", reason.nodes, resource, reason.text, f"not enough free {resource}"
        )
    if reason.cause == "taint":
        if reason.subject.startswith(GPUPROBE_TAINT_PREFIX):
            return Cause(
                "gpuprobe_taint",
                reason.nodes,
                reason.subject,
                reason.text,
                f"gpuprobe tainted the node(s) ({reason.subject}): their agents' findings say "
                "what is wrong with their GPUs",
            )
        return Cause(
            "taint",
            reason.nodes,
            reason.subject,
            reason.text,
            "a taint the pod does not tolerate: add a toleration or remove the taint",
        )
    meanings = {
        "selector": "the pod's node selector or affinity matches no free node: check its labels",
        "placement": "pod affinity, anti-affinity or topology spread leaves no node",
        "unschedulable": "the nodes are cordoned",
        "volume": "its volumes cannot be bound or attached where it could run",
        "dra": "its DRA resource claims cannot be allocated",
    }
    return Cause(
        reason.cause,
        reason.nodes,
        reason.subject,
        reason.text,
        meanings.get(reason.cause, "see the scheduler's words"),
    )


def pod_causes(pod: WaitingPod, message: str, held: Held | None) -> list[Cause]:
    """Why one pod waits, most nodes first (a GPU shortage first among equals)."""
    if pod.node:
        return [
            Cause(
                "not_started",
                None,
                pod.node,
                pod.waiting,
                f"scheduled to {pod.node}; its containers wait ({pod.waiting or 'no reason yet'})",
            )
        ]
    if pod.reason == "SchedulingGated":
        return [
            Cause(
                "gated",
                None,
                "",
                message,
                "scheduling gates hold it (a queue such as Kueue has not admitted it)",
            )
        ]
    if not message:
        return [
            Cause(
                "no_message",
                None,
                pod.scheduler,
                "",
                f"no scheduler message: has scheduler {pod.scheduler!r} seen it? (is it running?)",
            )
        ]
    fit = decode(message)
    causes = [_beyond_any_node(explain(r, held), pod, held) for r in fit.reasons]
    rank = {"too_large": 0, "not_offered": 0, "insufficient": 1}
    return sorted(causes, key=lambda c: (-(c.nodes or 0), rank.get(c.cause, 2)))


def _beyond_any_node(cause: Cause, pod: WaitingPod, held: Held | None) -> Cause:
    """ "Not enough free GPUs" is ruled out for a pod that asks more of a GPU resource than
    any one node offers: no freed GPU will ever let it in (`too_large`)."""
    if cause.cause != "insufficient" or held is None or not is_gpu_resource(cause.subject):
        return cause
    asked, most = pod.requests.get(cause.subject, 0), held.most(cause.subject)
    if asked <= most:
        return cause
    return Cause(
        "too_large",
        cause.nodes,
        cause.subject,
        cause.text,
        f"it asks {asked} {cause.subject} and no node offers more than {most}: it can never "
        "be scheduled as asked; split it over pods (a gang) or add nodes with more GPUs",
    )


ACTIONS = {
    "insufficient": Action.NONE,
    "not_started": Action.NONE,
    "gpuprobe_taint": Action.HARDWARE_INSPECTION,
}


def waiting_view(
    facts: ClusterFacts,
    agents: Mapping[str, AuditedNode],
    now: datetime,
    window: float,
) -> tuple[list[Finding], list[dict[str, Any]]]:
    """GPU_POD_PENDING for every GPU pod waiting past the window, and the pods' entries."""
    findings, entries = [], []
    held = Held(facts.nodes, agents) if facts.state("nodes") == "read" else None
    for pod in facts.waiting:
        created = parse_time(pod.created)
        age = (now - created).total_seconds() if created else None
        if age is not None and age < window:
            continue
        message = pod.message or facts.events.get((pod.namespace, pod.name), "")
        causes = pod_causes(pod, message, held)
        asks = ", ".join(f"{v} {k}" for k, v in sorted(pod.requests.items()))
        if pod.claims:
            asks = ", ".join(filter(None, [asks, f"{pod.claims} DRA claim(s)"]))
        waited = f"{age / 60:.0f} min" if age is not None else "an unknown time"
        first = causes[0]
        text = (
            f"pod {pod.namespace}/{pod.name} (asks {asks}) has been Pending {waited}: "
            f"{first.meaning}"
        )
        if message:
            text += f". Scheduler: {message}"
        findings.append(
            Finding(
                "GPU_POD_PENDING",
                Severity.WARNING,
                text,
                ACTIONS.get(first.cause, Action.FIX_CONFIG),
                pod.resource,
            )
        )
        entries.append(
            {
                "namespace": pod.namespace,
                "pod": pod.name,
                "node": pod.node or None,
                "pending_seconds": round(age) if age is not None else None,
                "requests": pod.requests,
                "claims": pod.claims,
                "scheduler": pod.scheduler,
                "gang": pod.gang.resource if pod.gang else None,
                "message": message,
                "causes": [c.to_dict() for c in causes],
            }
        )
    return findings, entries


def gang_view(
    facts: ClusterFacts, now: datetime, window: float
) -> tuple[list[Finding], list[dict[str, Any]]]:
    """GANG_PARTIALLY_SCHEDULED for gangs that run in part while the rest waits past the
    window (a gang starting up runs in part for a moment): a PodGroup below its minMember
    with pods running, a JobSet or training job with running and waiting pods."""
    waiting: dict[Gang, int] = {}
    for pod in facts.waiting:
        created = parse_time(pod.created)
        if created is not None and (now - created).total_seconds() < window:
            continue
        if pod.gang is not None:
            waiting[pod.gang] = waiting.get(pod.gang, 0) + 1
    groups = {(g.namespace, g.name): g for g in facts.pod_groups}
    findings, entries, seen = [], [], set()
    for gang, count in waiting.items():
        group = groups.get((gang.namespace, gang.name)) if gang.kind == "PodGroup" else None
        running = group.running if group else facts.gang_running.get(gang)
        entry = {
            "gang": gang.resource,
            "kind": gang.kind,
            "namespace": gang.namespace,
            "name": gang.name,
            "running": running,
            "pending_gpu_pods": count,
            "min_member": group.min_member if group else None,
        }
        entries.append(entry)
        seen.add(gang.resource)
        if running:
            findings.append(
                _partial(gang.resource, running, count, group.min_member if group else None)
            )
    for group in facts.pod_groups:
        resource = f"gang:PodGroup:{group.namespace}/{group.name}"
        if resource in seen or not (0 < group.running < group.min_member):
            continue
        entries.append(
            {
                "gang": resource,
                "kind": "PodGroup",
                "namespace": group.namespace,
                "name": group.name,
                "running": group.running,
                "pending_gpu_pods": 0,
                "min_member": group.min_member,
            }
        )
        findings.append(_partial(resource, group.running, None, group.min_member))
    return findings, entries


def _partial(resource: str, running: int, waiting: int | None, min_member: int | None) -> Finding:
    name = resource.removeprefix("gang:").replace(":", " ", 1)
    parts = [f"{running} pod(s) run"]
    if waiting is not None:
        parts.append(f"{waiting} GPU pod(s) wait")
    if min_member:
        parts.append(f"minMember {min_member}")
    return Finding(
        "GANG_PARTIALLY_SCHEDULED",
        Severity.WARNING,
        f"{name} is partly scheduled ({', '.join(parts)}): the running pods hold their GPUs "
        "while the rest wait; a gang scheduler (or the job's own gang settings) starts them "
        "together or not at all",
        Action.FIX_CONFIG,
        resource,
    )


def no_gang_finding(facts: ClusterFacts) -> Finding | None:
    """NO_GANG_SCHEDULING when multi-pod GPU jobs exist and no gang scheduler or queue is
    installed (discovery must have been read: without it nobody can tell)."""
    if facts.state("discovery") != "read":
        return None
    if any(facts.served(g) for g in GANG_SCHEDULERS):
        return None
    jobs = [
        f"{j.kind} {j.namespace}/{j.name} ({j.pods} pods)"
        for j in facts.jobs
        if j.gpu and j.pods > 1
    ]
    sizes: dict[Gang, int] = {}
    for pod in facts.waiting:
        if pod.gang is not None:
            sizes[pod.gang] = sizes.get(pod.gang, 0) + 1
    known = {(j.namespace, j.name) for j in facts.jobs}
    jobs += [
        f"{g.kind} {g.namespace}/{g.name} ({n}+ pods)"
        for g, n in sizes.items()
        if (n > 1 or facts.gang_running.get(g)) and (g.namespace, g.name) not in known
    ]
    if not jobs:
        return None
    named = ", ".join(jobs[:NAMED_NODES]) + (
        f" and {len(jobs) - NAMED_NODES} more" if len(jobs) > NAMED_NODES else ""
    )
    return Finding(
        "NO_GANG_SCHEDULING",
        Severity.WARNING,
        f"{len(jobs)} multi-pod GPU job(s) run with no gang scheduler or queue installed "
        f"(Volcano, Kueue, scheduler-plugins coscheduling, KAI): {named}. Their pods are "
        "scheduled one by one, and a job whose pods start in part holds GPUs it cannot use",
        Action.FIX_CONFIG,
        "cluster",
    )
