"""GPUs quarantined across the cluster: DeviceTaintRules (gpuprobe's and anyone's) and the
taints DRA drivers put on their own devices, and the GPUs each node pool loses to them.

Pure digests of what the view read: `slice_devices` (the devices every ResourceSlice
publishes, with their node, GPU UUID and the driver's own taints), `rule` (a DeviceTaintRule's
selector and taint), and `judge`, the checklist's `gpu_quarantine` item. A rule is matched to
the devices its selector picks (driver, pool, device; an unset field picks all); a GPU is lost
while a taint with an effect other than `None` keeps new claims off it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprobe.audit.view.nodes import NodeFacts
from gpuprobe.effects.dra import ours
from gpuprobe.report import Status

# The node-pool labels of the managed clusters and Karpenter, first found first.
POOL_LABELS = (
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
)
NO_POOL = "(no pool label)"
MOST_LISTED = 200


@dataclass(frozen=True)
class SliceDevice:
    """A device a ResourceSlice publishes."""

    driver: str
    pool: str
    name: str
    node: str
    gpu: str  # the GPU's UUID (a MIG device's parentUUID), "" when not a GPU with one
    taints: tuple[tuple[str, str, str], ...]  # the driver's own: (key, value, effect)


@dataclass(frozen=True)
class Rule:
    """A DeviceTaintRule as the view reads it."""

    name: str
    gpuprobe: bool
    driver: str | None
    pool: str | None
    device: str | None
    key: str
    value: str
    effect: str


def _string(device: Mapping[str, Any], name: str) -> str:
    value = (device.get("attributes") or {}).get(name) or {}
    found = value.get("string") if isinstance(value, Mapping) else None
    return found if isinstance(found, str) else ""


def slice_devices(obj: Mapping[str, Any]) -> list[SliceDevice]:
    """The devices of one ResourceSlice (attributes flat, as v1 and v1beta2 serve them)."""
    spec = obj.get("spec") or {}
    driver, node = str(spec.get("driver", "")), str(spec.get("nodeName", ""))
    pool = str((spec.get("pool") or {}).get("name", ""))
    found = []
    for device in spec.get("devices") or []:
        if not isinstance(device, Mapping):
            continue
        taints = tuple(
            (str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
            for t in device.get("taints") or []
            if isinstance(t, Mapping)
        )
        gpu = _string(device, "parentUUID") or _string(device, "uuid")
        found.append(SliceDevice(driver, pool, str(device.get("name", "")), node, gpu, taints))
    return found


def rule(obj: Mapping[str, Any]) -> Rule:
    """One DeviceTaintRule."""
    spec = obj.get("spec") or {}
    selector = spec.get("deviceSelector") or {}
    taint = spec.get("taint") or {}
    return Rule(
        str((obj.get("metadata") or {}).get("name", "")),
        ours(obj),
        selector.get("driver"),
        selector.get("pool"),
        selector.get("device"),
        str(taint.get("key", "")),
        str(taint.get("value", "")),
        str(taint.get("effect", "")),
    )


def _picks(r: Rule, d: SliceDevice) -> bool:
    return all(
        want is None or want == have
        for want, have in ((r.driver, d.driver), (r.pool, d.pool), (r.device, d.name))
    )


def node_pool(node: NodeFacts | None) -> str:
    """The node's pool by its managed-cluster or Karpenter label."""
    if node is None:
        return NO_POOL
    return next((node.labels[k] for k in POOL_LABELS if k in node.labels), NO_POOL)


def quarantined(rules: Iterable[Rule], devices: Iterable[SliceDevice]) -> list[dict[str, Any]]:
    """Every quarantined device: by a rule (gpuprobe's or another's, an unmatched rule
    listed alone) or by its driver's own taint."""
    devices = list(devices)
    found: list[dict[str, Any]] = []
    for r in rules:
        picked: list[SliceDevice | None] = [d for d in devices if _picks(r, d)]
        taint = f"{r.key}={r.value}:{r.effect}" if r.value else f"{r.key}:{r.effect}"
        by = "gpuprobe" if r.gpuprobe else "other"
        for d in picked or [None]:
            found.append(
                {
                    "by": by,
                    "rule": r.name,
                    "node": d.node if d else "",
                    "driver": d.driver if d else r.driver or "",
                    "device": d.name if d else r.device or "",
                    "gpu": d.gpu if d else "",
                    "taint": taint,
                    "effect": r.effect,
                }
            )
    for d in devices:
        for key, value, effect in d.taints:
            found.append(
                {
                    "by": "driver",
                    "rule": "",
                    "node": d.node,
                    "driver": d.driver,
                    "device": d.name,
                    "gpu": d.gpu,
                    "taint": f"{key}={value}:{effect}" if value else f"{key}:{effect}",
                    "effect": effect,
                }
            )
    return found


def lost_per_pool(
    entries: Sequence[Mapping[str, Any]], nodes: Sequence[NodeFacts]
) -> dict[str, int]:
    """The GPUs each node pool loses to quarantine (a GPU once, whatever its rules; a
    `None` effect, a dry run, loses nothing)."""
    by_name = {n.name: n for n in nodes}
    lost = {
        (e["node"], e["gpu"] or f"{e['driver']}/{e['device']}")
        for e in entries
        if e["effect"] != "None" and e["node"]
    }
    return dict(Counter(node_pool(by_name.get(node)) for node, _ in sorted(lost)))


def judge(
    entries: Sequence[Mapping[str, Any]], nodes: Sequence[NodeFacts], state: str
) -> tuple[Status, str, dict[str, Any]]:
    """The checklist item: WARNING while GPUs are lost to quarantine, else OK; its sentence
    and facts."""
    per_pool = lost_per_pool(entries, nodes)
    lost = sum(per_pool.values())
    facts: dict[str, Any] = {
        "device_taint_rules": state,
        "quarantined": list(entries[:MOST_LISTED]),
        "quarantined_total": len(entries),
        "gpus_lost_per_pool": per_pool,
    }
    if not entries:
        text = (
            "no GPU quarantined (no DeviceTaintRule, no driver taint)"
            if state == "read"
            else f"no GPU quarantined (DeviceTaintRules {state})"
        )
        return Status.OK, text, facts
    ours_count = sum(1 for e in entries if e["by"] == "gpuprobe")
    pools = ", ".join(f"{pool}: {n}" for pool, n in sorted(per_pool.items()))
    text = (
        f"{len(entries)} device(s) quarantined ({ours_count} by gpuprobe, "
        f"{len(entries) - ours_count} by others); GPUs lost per node pool: {pools or 'none'}"
    )
    return (Status.WARNING if lost else Status.OK), text, facts
