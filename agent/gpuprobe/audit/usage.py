"""GPU usage across the cluster, from each node's `workloads` check: GPUs allocated, busy,
allocated but idle and unallocated now, and the GPU-hours of each since its agent began
counting (its idle accounting), idle GPU-hours by namespace, and their cost at a price per
GPU-hour.

Each node's figures are its `workloads` check's usage digest (gpuprobe.workloads.usage:
GPU-equivalents, a MIG device 1/n of its GPU), which the summary view carries
(the workloads record's `summary_keys`); the hours come from the agent's utilization samples.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from gpuprobe.report import NodeReport
from gpuprobe.workloads.usage import node_usage, non_negative

if TYPE_CHECKING:  # the check's type only: an audit's helper processes load no check
    from gpuprobe.checks.workloads import WorkloadsData

HOUR = 3600.0


@dataclass
class Usage:
    """GPU-equivalents now and GPU-hours counted, for one node or the cluster."""

    allocated: float = 0.0
    busy: float = 0.0
    allocated_idle: float = 0.0
    unallocated: float = 0.0
    allocated_hours: float = 0.0
    busy_hours: float = 0.0
    idle_hours: dict[str, float] = field(default_factory=dict)  # by namespace
    unallocated_hours: float = 0.0
    since: str | None = None  # the earliest start of the counting

    @property
    def idle_allocated_hours(self) -> float:
        """Allocated-idle GPU-hours, every namespace together."""
        return sum(self.idle_hours.values())

    def add(self, other: Usage) -> None:
        """Add another node's usage to this one."""
        self.allocated += other.allocated
        self.busy += other.busy
        self.allocated_idle += other.allocated_idle
        self.unallocated += other.unallocated
        self.allocated_hours += other.allocated_hours
        self.busy_hours += other.busy_hours
        self.unallocated_hours += other.unallocated_hours
        for namespace, hours in other.idle_hours.items():
            self.idle_hours[namespace] = self.idle_hours.get(namespace, 0.0) + hours
        if other.since and (self.since is None or other.since < self.since):
            self.since = other.since

    def to_dict(self, price: float | None = None) -> dict[str, Any]:
        """The usage as `audit --json` writes it (cost keys only with a price)."""
        d: dict[str, Any] = {
            "gpus": {
                "allocated": round(self.allocated, 3),
                "busy": round(self.busy, 3),
                "allocated_idle": round(self.allocated_idle, 3),
                "unallocated": round(self.unallocated, 3),
            },
            "gpu_hours": {
                "allocated": round(self.allocated_hours, 3),
                "busy": round(self.busy_hours, 3),
                "allocated_idle": round(self.idle_allocated_hours, 3),
                "unallocated": round(self.unallocated_hours, 3),
            },
            "idle_gpu_hours_by_namespace": {
                n: round(h, 3) for n, h in sorted(self.idle_hours.items(), key=lambda x: -x[1])
            },
            "since": self.since,
        }
        if price is not None:
            d["price_per_gpu_hour"] = price
            d["idle_cost"] = round(self.idle_allocated_hours * price, 2)
            d["idle_cost_by_namespace"] = {
                n: round(h * price, 2) for n, h in d["idle_gpu_hours_by_namespace"].items()
            }
            d["unallocated_cost"] = round(self.unallocated_hours * price, 2)
        return d


def usage(report: NodeReport) -> Usage | None:
    """One node's usage; None when its workloads check did not run or got no allocations
    (not a Kubernetes node, or its kubelet did not answer). It reads the check's usage digest
    (`data.usage`), or sums it from the devices of an agent that sends none."""
    result = report.check("workloads")
    if result is None or not isinstance(result.data, dict):
        return None
    data = cast("WorkloadsData", result.data)  # by index: a renamed field fails mypy here
    kubelet = data["kubelet"] if "kubelet" in data else None
    if not isinstance(kubelet, dict) or kubelet.get("state") != "answered":
        return None
    # An agent whose check sends no digest (an older one) leaves it out, whatever the type says.
    digest: object = data["usage"] if "usage" in data else None
    if not isinstance(digest, dict):
        digest = node_usage(
            data["devices"] if "devices" in data else None,
            data["accounting"] if "accounting" in data else None,
        )
    now = _numbers(digest.get("gpus"))
    seconds = _numbers(digest.get("seconds"))
    idle = digest.get("idle_allocated_seconds")
    since = digest.get("since")
    return Usage(
        allocated=now.get("allocated", 0.0),
        busy=now.get("busy", 0.0),
        allocated_idle=now.get("allocated_idle", 0.0),
        unallocated=now.get("unallocated", 0.0),
        allocated_hours=seconds.get("allocated", 0.0) / HOUR,
        busy_hours=seconds.get("busy", 0.0) / HOUR,
        idle_hours={ns: hours / HOUR for ns, hours in _numbers(idle).items()},
        unallocated_hours=seconds.get("unallocated", 0.0) / HOUR,
        since=since if isinstance(since, str) else None,
    )


def _numbers(value: Any) -> dict[str, float]:
    """A mapping's counts (each a number at least 0; anything else counts as nothing)."""
    if not isinstance(value, dict):
        return {}
    return {str(k): non_negative(v) for k, v in value.items()}


def cluster_usage(usages: Iterable[Usage | None]) -> Usage | None:
    """The cluster's usage; None when no node ran the workloads check."""
    found: Usage | None = None
    for node in usages:
        if node is None:
            continue
        found = found or Usage()
        found.add(node)
    return found
