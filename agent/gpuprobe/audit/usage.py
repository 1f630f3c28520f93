"""GPU usage across the cluster, from each node's `workloads` check: GPUs allocated, busy,
allocated but idle and unallocated now, and the GPU-hours of each since its agent began
counting (its idle accounting), idle GPU-hours by namespace, and their cost at a price per
GPU-hour.

GPUs are counted as the kubelet hands them out: a MIG-enabled GPU's MIG devices are each 1/n
of it (n its MIG devices), so the figures are GPU-equivalents and add up to the GPUs. A device
held by a pod is busy when a process runs on it, else allocated-idle (as the agent judges it
now; the hours come from its utilization samples). It reads the `workloads` facts of the
summary view (gpuprobe.report_view.SUMMARY_DATA).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.report import NodeReport

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
    (not a Kubernetes node, or its kubelet did not answer)."""
    result = report.check("workloads")
    if result is None or not isinstance(result.data, Mapping):
        return None
    kubelet = result.data.get("kubelet")
    if not isinstance(kubelet, Mapping) or kubelet.get("state") != "answered":
        return None
    found = Usage()
    _now(found, _mappings(result.data.get("devices")))
    accounting = result.data.get("accounting")
    if isinstance(accounting, Mapping):
        since = accounting.get("since")
        found.since = since if isinstance(since, str) else None
        for gpu in _mappings(accounting.get("gpus")):
            found.allocated_hours += _seconds(gpu.get("allocated_seconds")) / HOUR
            found.busy_hours += _seconds(gpu.get("busy_seconds")) / HOUR
            found.unallocated_hours += _seconds(gpu.get("unallocated_seconds")) / HOUR
            idle = gpu.get("idle_allocated_seconds")
            for namespace, seconds in idle.items() if isinstance(idle, Mapping) else []:
                hours = _seconds(seconds) / HOUR
                found.idle_hours[str(namespace)] = found.idle_hours.get(str(namespace), 0.0) + hours
    return found


def _now(found: Usage, devices: list[Mapping[str, Any]]) -> None:
    """GPU-equivalents allocated, busy, allocated-idle and free now."""
    migs: dict[int | str, list[Mapping[str, Any]]] = {}
    for device in devices:
        gpu = device.get("gpu")
        if device.get("mig") and isinstance(gpu, int | str):
            migs.setdefault(gpu, []).append(device)
    for device in devices:
        if device.get("mig"):
            continue
        held_whole = bool(_mappings(device.get("holders")))
        gpu = device.get("gpu")
        units = migs.get(gpu) if not held_whole and isinstance(gpu, int | str) else None
        for unit, weight in [(m, 1.0 / len(units)) for m in units] if units else [(device, 1.0)]:
            if not _mappings(unit.get("holders")):
                found.unallocated += weight
                continue
            found.allocated += weight
            if unit.get("processes"):
                found.busy += weight
            else:
                found.allocated_idle += weight


def cluster_usage(usages: Iterable[Usage | None]) -> Usage | None:
    """The cluster's usage; None when no node ran the workloads check."""
    found: Usage | None = None
    for node in usages:
        if node is None:
            continue
        found = found or Usage()
        found.add(node)
    return found


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0.0
    return max(0.0, float(value))
