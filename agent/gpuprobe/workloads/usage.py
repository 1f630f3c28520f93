"""A node's GPU usage in a few numbers, from the `workloads` check's per-device facts and its
idle accounting: GPU-equivalents allocated, busy, allocated-idle and unallocated now, and the
GPU-seconds counted of each (the idle ones by namespace).

GPUs are counted as the kubelet hands them out: a MIG-enabled GPU's MIG devices are each 1/n
of it (n its MIG devices), so the figures are GPU-equivalents and add up to the GPUs. A
device held by a pod is busy when a process runs on it, else allocated-idle.

The check puts this digest in its data (`data.usage`), so that a fleet audit reads a dozen
numbers per node instead of every device; the audit computes it with the same function from
the devices of an agent that sends none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuprobe.families import mappings


def node_usage(devices: Any, accounting: Any) -> dict[str, Any]:
    """The usage digest of one node (`workloads.data.usage`, docs/checks.md) from its
    `devices` and `accounting` facts; anything malformed in them counts as nothing."""
    gpus = {"allocated": 0.0, "busy": 0.0, "allocated_idle": 0.0, "unallocated": 0.0}
    _now(gpus, mappings(devices))
    seconds = {"allocated": 0.0, "busy": 0.0, "unallocated": 0.0}
    idle: dict[str, float] = {}
    since = None
    if isinstance(accounting, Mapping):
        since = accounting.get("since") if isinstance(accounting.get("since"), str) else None
        for gpu in mappings(accounting.get("gpus")):
            for kind in seconds:
                seconds[kind] += non_negative(gpu.get(f"{kind}_seconds"))
            by_namespace = gpu.get("idle_allocated_seconds")
            if isinstance(by_namespace, Mapping):
                for namespace, value in by_namespace.items():
                    idle[str(namespace)] = idle.get(str(namespace), 0.0) + non_negative(value)
    return {"gpus": gpus, "seconds": seconds, "idle_allocated_seconds": idle, "since": since}


def _now(gpus: dict[str, float], devices: list[Mapping[str, Any]]) -> None:
    """GPU-equivalents allocated, busy, allocated-idle and free now, added to `gpus`."""
    # A MIG device's `uuid` is its GPU's: with the index it tells the GPU apart from another
    # vendor's of the same index.
    migs: dict[tuple[int | str, Any], list[Mapping[str, Any]]] = {}
    for device in devices:
        gpu = device.get("gpu")
        if device.get("mig") and isinstance(gpu, int | str):
            migs.setdefault((gpu, _hashable(device.get("uuid"))), []).append(device)
    for device in devices:
        if device.get("mig"):
            continue
        held_whole = bool(mappings(device.get("holders")))
        gpu = device.get("gpu")
        units = None
        if not held_whole and isinstance(gpu, int | str):
            units = migs.get((gpu, _hashable(device.get("uuid"))))
        for unit, weight in [(m, 1.0 / len(units)) for m in units] if units else [(device, 1.0)]:
            if not mappings(unit.get("holders")):
                gpus["unallocated"] += weight
                continue
            gpus["allocated"] += weight
            if unit.get("processes"):
                gpus["busy"] += weight
            else:
                gpus["allocated_idle"] += weight


def _hashable(value: Any) -> str | None:
    """A fact read from a report as a key: text, else None."""
    return value if isinstance(value, str) else None


def non_negative(value: Any) -> float:
    """A count read from facts: a finite number at least 0, else 0 (booleans are no count)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0.0
    return max(0.0, float(value))
