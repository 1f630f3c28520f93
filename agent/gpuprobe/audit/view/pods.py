"""Pods digested to what the view needs: a waiting GPU pod's requests, scheduler message,
gang and age; an agent pod's node and address. Nothing else of a pod is kept."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuprobe.audit.view.nodes import is_gpu_resource

# The labels and annotations that make a pod one of a gang, with the gang's kind.
GANG_KEYS = (
    ("label", "scheduling.x-k8s.io/pod-group", "PodGroup"),
    ("annotation", "scheduling.k8s.io/group-name", "PodGroup"),  # Volcano
    ("label", "jobset.sigs.k8s.io/jobset-name", "JobSet"),
    ("label", "training.kubeflow.org/job-name", "TrainingJob"),
    ("label", "leaderworkerset.sigs.k8s.io/name", "LeaderWorkerSet"),
)
AGENT_LABELS = "app.kubernetes.io/name=gpuprobe,app.kubernetes.io/component=node-agent"
AGENT_PORT = 50051


@dataclass(frozen=True)
class Gang:
    """A gang a pod belongs to: its kind (PodGroup, JobSet, TrainingJob, LeaderWorkerSet),
    namespace and name, and the label (or annotation) that names it."""

    kind: str
    namespace: str
    name: str
    key: str
    by_label: bool

    @property
    def resource(self) -> str:
        """The finding's resource: `gang:<kind>:<namespace>/<name>`."""
        return f"gang:{self.kind}:{self.namespace}/{self.name}"


@dataclass(frozen=True)
class WaitingPod:
    """A Pending pod that asks for GPUs."""

    namespace: str
    name: str
    created: str
    node: str  # "" while unscheduled
    requests: dict[str, int]  # GPU resources, summed over containers
    claims: int  # DRA resource claims
    reason: str  # the PodScheduled condition's reason (Unschedulable, SchedulingGated)
    message: str  # ... and message
    waiting: str  # a bound pod's first container waiting reason
    scheduler: str
    gang: Gang | None

    @property
    def resource(self) -> str:
        """The finding's resource: `pod:<namespace>/<name>`."""
        return f"pod:{self.namespace}/{self.name}"


def gpu_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """The GPU resources a pod spec's containers ask for, summed (limits over requests)."""
    found: dict[str, int] = {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for name, value in asked.items():
            if is_gpu_resource(str(name)):
                count = int(value) if str(value).isdecimal() else 1
                found[str(name)] = found.get(str(name), 0) + count
    return found


def gang_of(meta: Mapping[str, Any]) -> Gang | None:
    """The gang a pod's labels or annotations name, if any."""
    namespace = str(meta.get("namespace", "default"))
    for where, key, kind in GANG_KEYS:
        values = meta.get("labels" if where == "label" else "annotations") or {}
        if values.get(key):
            return Gang(kind, namespace, str(values[key]), key, where == "label")
    return None


def waiting_gpu_pod(pod: Mapping[str, Any]) -> WaitingPod | None:
    """The pod as a waiting GPU pod; None when it asks for no GPU (nor a DRA claim)."""
    spec = pod.get("spec") or {}
    requests = gpu_requests(spec)
    claims = len(spec.get("resourceClaims") or [])
    if not requests and not claims:
        return None
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    scheduled: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
    )
    waiting = ""
    for container in status.get("containerStatuses") or []:
        state = (container.get("state") or {}).get("waiting") or {}
        if state.get("reason"):
            waiting = str(state["reason"])
            break
    return WaitingPod(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        created=str(meta.get("creationTimestamp", "")),
        node=str(spec.get("nodeName", "")),
        requests=requests,
        claims=claims,
        reason=str(scheduled.get("reason", "")),
        message=str(scheduled.get("message", "")),
        waiting=waiting,
        scheduler=str(spec.get("schedulerName", "default-scheduler")),
        gang=gang_of(meta),
    )


@dataclass(frozen=True)
class AgentPod:
    """A gpuprobe agent pod of the DaemonSet: where it runs and where it answers."""

    node: str
    ip: str
    port: int
    phase: str

    @property
    def target(self) -> str:
        """The agent's gRPC address, as `--targets` names one."""
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"


def agent_pod(pod: Mapping[str, Any]) -> AgentPod:
    """An agent pod's node, address and gRPC port (its container port named `grpc`)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    port = AGENT_PORT
    for container in spec.get("containers") or []:
        for p in container.get("ports") or []:
            if p.get("name") == "grpc":
                port = p.get("containerPort")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"its grpc containerPort {port!r} is no port")
    ip = status.get("podIP") or ""
    if not isinstance(ip, str):
        raise TypeError(f"status.podIP is a {type(ip).__name__}, not text")
    if ip:
        ipaddress.ip_address(ip)  # ValueError for anything but an address
    return AgentPod(str(spec.get("nodeName", "")), ip, port, str(status.get("phase")))


@dataclass(frozen=True)
class NodeGpuPods:
    """What the API server shows of a node's GPU pods (for a node no agent counts): how many
    hold GPUs now (Pending bound, or Running), and the latest time one ended (RFC 3339, ""
    when none is listed: the API keeps finished pods only until they are deleted)."""

    holding: int = 0
    last_end: str = ""

    def with_pod(self, pod: Mapping[str, Any]) -> NodeGpuPods:
        """These facts with one more of the node's pods (GPU pods only count)."""
        if not gpu_requests(pod.get("spec") or {}):
            return self
        status = pod.get("status") or {}
        phase = status.get("phase")
        if phase in ("Pending", "Running", "Unknown", None):
            return NodeGpuPods(self.holding + 1, self.last_end)
        ends = [
            str(((c.get("state") or {}).get("terminated") or {}).get("finishedAt") or "")
            for c in status.get("containerStatuses") or []
        ]
        ended = max([e for e in ends if e] or [str(status.get("startTime") or "")])
        return NodeGpuPods(self.holding, max(self.last_end, ended))
