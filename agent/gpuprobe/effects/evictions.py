"""Evicting the pods that hold a failed GPU: the pure planner and the fleet's breaker
(docs/kubernetes.md, "Eviction").

Only the pods attribution names on a GPU fault (`effects.dra.gpu_faults`: CRITICAL, on a GPU,
asking for a repair of it) are evicted, never a DaemonSet's pod (it would come straight back,
and the agent is one), never gpuprobe's own, never a pod that has ended or is already going.
Everything here is pure: which pods to evict (`targets`), the pace of retries while a
PodDisruptionBudget refuses (`retry_after`), and the breaker that counts the fleet's recent
evictions from the record each agent keeps on its Node (`fleet_evictions`, `record`).
`effects.evictor` applies it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpuprobe.effects.dra import gpu_faults, gpu_uuid
from gpuprobe.report import NodeReport, format_time, parse_time

# Each agent's recent evictions, on its own Node: the times, space-separated (RFC 3339).
EVICTIONS_ANNOTATION = "gpuprobe.io/evictions"
AGENT_LABEL = ("app.kubernetes.io/name", "gpuprobe")
# A refused eviction (429: the PDB allows no disruption now) is retried after 1 s, doubling
# to 60 s: 6 requests in the first 40 s, then one a minute, never a delete.
RETRY_FIRST_SECONDS = 1.0
RETRY_CAP_SECONDS = 60.0

PodKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class PodFacts:
    """What the planner needs of a pod on the node."""

    namespace: str
    name: str
    daemonset: bool  # owned by a DaemonSet
    agent: bool  # gpuprobe's own
    ended: bool  # Succeeded, Failed, or being deleted


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    """A pod object as the planner reads it."""
    meta = pod.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    labels = meta.get("labels") or {}
    phase = (pod.get("status") or {}).get("phase")
    return PodFacts(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        any(o.get("kind") == "DaemonSet" for o in owners),
        labels.get(AGENT_LABEL[0]) == AGENT_LABEL[1],
        phase in ("Succeeded", "Failed") or bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True)
class Target:
    """A pod to evict: it holds the GPU of this finding."""

    namespace: str
    pod: str
    resource: str  # the GPU's `gpu:<index>:<uuid>`
    code: str

    @property
    def key(self) -> PodKey:
        """(namespace, pod)."""
        return (self.namespace, self.pod)

    @property
    def uuid(self) -> str:
        """The GPU's UUID."""
        return gpu_uuid(self.resource) or ""


@dataclass(frozen=True)
class Spared:
    """A pod on a failed GPU that is not evicted, and why (a DaemonSet's, the agent)."""

    namespace: str
    pod: str
    resource: str
    why: str


def targets(
    report: NodeReport, pods: Mapping[PodKey, PodFacts]
) -> tuple[list[Target], list[Spared]]:
    """The pods to evict (once each, for the first fault that names them) and those spared.
    A pod attribution names that is not on the node (any more) is neither."""
    chosen: dict[PodKey, Target] = {}
    spared: dict[PodKey, Spared] = {}
    for finding in gpu_faults(report):
        for ref in finding.pods:
            key = (ref.namespace, ref.pod)
            facts = pods.get(key)
            if facts is None or facts.ended or key in chosen or key in spared:
                continue
            if facts.daemonset or facts.agent:
                why = "gpuprobe's own pod" if facts.agent else "a DaemonSet's pod"
                spared[key] = Spared(ref.namespace, ref.pod, finding.resource, why)
                continue
            chosen[key] = Target(ref.namespace, ref.pod, finding.resource, finding.code)
    return list(chosen.values()), list(spared.values())


def retry_after(refusals: int) -> float:
    """Seconds before the next try of an eviction refused `refusals` times in a row."""
    return min(RETRY_CAP_SECONDS, RETRY_FIRST_SECONDS * 2.0 ** min(refusals - 1, 16))


def recorded(node: Mapping[str, Any]) -> list[datetime]:
    """The eviction times an agent recorded on its Node (what cannot be read is skipped)."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(EVICTIONS_ANNOTATION)
    times: list[datetime] = []
    for word in str(text or "").split():
        try:
            times.append(parse_time(word))
        except ValueError:
            continue
    return times


def fleet_evictions(nodes: Iterable[Mapping[str, Any]], at: datetime, window: float) -> int:
    """The evictions the fleet's agents recorded within the window before `at`."""
    since = at - timedelta(seconds=window)
    return sum(1 for node in nodes for t in recorded(node) if t > since)


def record(node: Mapping[str, Any], at: datetime, window: float, most: int) -> dict[str, Any]:
    """The merge patch that adds an eviction at `at` to the node's record (times older than
    the window dropped, at most `most` kept)."""
    since = at - timedelta(seconds=window)
    kept = sorted(t for t in recorded(node) if t > since)[-(most - 1) :] if most > 1 else []
    text = " ".join(format_time(t) for t in [*kept, at])
    return {"metadata": {"annotations": {EVICTIONS_ANNOTATION: text}}}


@dataclass(frozen=True)
class FleetBreaker:
    """The fleet's recent evictions as the breaker counts them."""

    evictions: int
    most: int
    window: float

    @property
    def engaged(self) -> bool:
        """Whether evictions stop: the fleet already made `most` within the window."""
        return self.evictions >= self.most

    def why(self) -> str:
        """The breaker in words, for the finding, the event and the log."""
        return (
            f"the GPU nodes' agents evicted {self.evictions} pods within the last "
            f"{self.window:g} s (the circuit breaker stops at {self.most}: "
            "remediation.fleet_max_evictions)"
        )


def gpu_index(resource: str) -> str:
    """The GPU's index in a `gpu:<index>:<uuid>` resource, for messages."""
    return resource.split(":")[1] if resource.count(":") >= 2 else resource


def pods_on(targets_: Sequence[Target], uuid: str) -> list[Target]:
    """The targets on one GPU."""
    return [t for t in targets_ if t.uuid == uuid]
