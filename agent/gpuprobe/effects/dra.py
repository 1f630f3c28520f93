"""DeviceTaintRules for failed GPUs: the pure planner (docs/kubernetes.md, "Device taints").

A finding about one GPU (a `gpu:<index>:<uuid>` resource, CRITICAL, asking for a repair of the
GPU or the node) becomes one DeviceTaintRule per published device of that GPU and cause: the
device found in this node's ResourceSlices by its `uuid` attribute (never by name or index:
a DRA driver's `gpu-<minor>` need not follow NVML's index), and the MIG devices carved from it
by their `parentUUID`. Everything here is pure: what the slices publish (`published`), which
version serves the rules (`rule_version`), the rules a report wants (`wanted`), what to
create and delete (`plan`), and the brake counting the fleet's quarantined GPUs (`brake`).
`effects.device_taints` applies it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuprobe.report import Action, Finding, NodeReport, Severity

GROUP = "resource.k8s.io"
RESOURCE = "devicetaintrules"
# Versions that serve DeviceTaintRules, preferred first: v1 from Kubernetes 1.37, v1beta2 in
# 1.36 behind the DRADeviceTaintRules feature gate (v1alpha3 before: never used).
VERSIONS = ("v1", "v1beta2")
TAINT_KEY = "gpuprobe.io/unhealthy"
MANAGED_BY = "app.kubernetes.io/managed-by"
OURS = "gpuprobe"
NODE_LABEL = "gpuprobe.io/node"
GPU_ANNOTATION = "gpuprobe.io/gpu"
NODE_ANNOTATION = "gpuprobe.io/node"
# The repairs that take a GPU out of service: a finding asking for one of these, CRITICAL, on
# a GPU, quarantines it. An application's fault (RESTART_APP) or a configuration (FIX_CONFIG)
# is no reason to keep workloads off the device.
GPU_FAULT_ACTIONS = frozenset(
    {Action.RESET_GPU, Action.REBOOT_NODE, Action.DRAIN_NODE, Action.HARDWARE_INSPECTION}
)
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class DraDevice:
    """One device a DRA driver publishes on this node: a whole GPU or a MIG device of one."""

    driver: str
    pool: str
    name: str
    uuid: str  # the GPU's UUID (a MIG device's own UUID for a MIG device)
    gpu_uuid: str  # the whole GPU's: its own, or a MIG device's parentUUID


def rule_version(resources: Mapping[str, Collection[str]]) -> str | None:
    """The version to write rules at, from discovery (each served version of resource.k8s.io
    and the resources it lists): v1, else v1beta2; None when neither serves them."""
    return next((v for v in VERSIONS if RESOURCE in resources.get(v, ())), None)


def _attribute(device: Mapping[str, Any], name: str) -> str | None:
    value = (device.get("attributes") or {}).get(name) or {}
    found = value.get("string") if isinstance(value, Mapping) else None
    return found if isinstance(found, str) and found else None


def published(slices: Iterable[Mapping[str, Any]], node: str) -> list[DraDevice]:
    """The GPU devices this node's ResourceSlices publish (those with a `uuid` attribute)."""
    found: list[DraDevice] = []
    for piece in slices:
        spec = piece.get("spec") or {}
        if spec.get("nodeName") != node:
            continue
        pool = str((spec.get("pool") or {}).get("name") or "")
        for device in spec.get("devices") or []:
            uuid = _attribute(device, "uuid")
            if uuid is None or not pool:
                continue
            parent = _attribute(device, "parentUUID") or uuid
            found.append(
                DraDevice(str(spec.get("driver")), pool, str(device["name"]), uuid, parent)
            )
    return found


def gpu_uuid(resource: str) -> str | None:
    """The UUID in a `gpu:<index>:<uuid>` resource (None for any other resource)."""
    parts = resource.split(":", 2)
    if len(parts) == 3 and parts[0] == "gpu" and parts[2]:
        return parts[2]
    return None


def gpu_faults(report: NodeReport) -> list[Finding]:
    """The report's findings that quarantine a GPU: CRITICAL, on a GPU, asking for a repair of
    the GPU or the node."""
    return [
        f
        for _, f in report.findings()
        if f.severity is Severity.CRITICAL
        and f.action in GPU_FAULT_ACTIONS
        and gpu_uuid(f.resource) is not None
    ]


def covered(report: NodeReport, devices: Sequence[DraDevice]) -> set[str]:
    """The GPU resources of the report's GPU faults that a DRA driver publishes here: their
    device taints stand for them, so they add no node taint."""
    uuids = {d.gpu_uuid for d in devices}
    return {f.resource for f in gpu_faults(report) if gpu_uuid(f.resource) in uuids}


def node_label(node: str) -> str:
    """The node as a label value (a long name, which no label value can hold, by digest)."""
    if len(node) <= 63 and _LABEL_VALUE.fullmatch(node):
        return node
    return "h-" + hashlib.sha256(node.encode()).hexdigest()[:40]


def rule_name(node: str, device: str, code: str) -> str:
    """One rule per node, device and cause: `gpuprobe-<node>-<device>-<code>` (a digest in
    place of what would pass the 253 characters of a name)."""
    name = f"gpuprobe-{node}-{device}-{code.lower().replace('_', '-')}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(f"{node}\0{device}\0{code}".encode()).hexdigest()[:16]
    return f"gpuprobe-{node[:200]}-{digest}".replace(".-", "-")


@dataclass(frozen=True)
class WantedRule:
    """A rule the report calls for: the device, the finding, and the object to create."""

    name: str
    device: DraDevice
    finding: Finding
    body: dict[str, Any]


def wanted(
    report: NodeReport,
    devices: Sequence[DraDevice],
    node: str,
    node_uid: str,
    effect: str,
    version: str,
) -> dict[str, WantedRule]:
    """The rules the report's GPU faults call for, by name: one per device of the failed GPU
    (the GPU's own and its MIG devices') and cause."""
    found: dict[str, WantedRule] = {}
    for finding in gpu_faults(report):
        uuid = gpu_uuid(finding.resource)
        for device in (d for d in devices if d.gpu_uuid == uuid):
            name = rule_name(node, device.name, finding.code)
            if name in found:
                continue
            found[name] = WantedRule(
                name,
                device,
                finding,
                rule_body(name, device, finding, node, node_uid, effect, version),
            )
    return found


def rule_body(
    name: str,
    device: DraDevice,
    finding: Finding,
    node: str,
    node_uid: str,
    effect: str,
    version: str,
) -> dict[str, Any]:
    """The DeviceTaintRule: one device by driver, pool and name; gpuprobe's key, the finding's
    code as its value; labelled gpuprobe's and owned by the Node (it goes with the node)."""
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": name,
            "labels": {MANAGED_BY: OURS, NODE_LABEL: node_label(node)},
            "annotations": {NODE_ANNOTATION: node, GPU_ANNOTATION: finding.resource},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
            ],
        },
        "spec": {
            "deviceSelector": {"driver": device.driver, "pool": device.pool, "device": device.name},
            "taint": {"key": TAINT_KEY, "value": finding.code, "effect": effect},
        },
    }


def ours(rule: Mapping[str, Any]) -> bool:
    """Whether a rule is gpuprobe's: labelled so, and its taint key under `gpuprobe.io/`."""
    labels = (rule.get("metadata") or {}).get("labels") or {}
    key = str(((rule.get("spec") or {}).get("taint") or {}).get("key") or "")
    return labels.get(MANAGED_BY) == OURS and key.startswith("gpuprobe.io/")


def of_node(rule: Mapping[str, Any], node: str) -> bool:
    """Whether one of gpuprobe's rules is this node's (another agent's are never touched)."""
    annotations = (rule.get("metadata") or {}).get("annotations") or {}
    return ours(rule) and annotations.get(NODE_ANNOTATION) == node


@dataclass(frozen=True)
class RulePlan:
    """What one round writes: rules to delete (first), then rules to create."""

    delete: tuple[str, ...] = ()
    create: tuple[WantedRule, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.delete or self.create)


def _effect(rule: Mapping[str, Any]) -> str:
    return str(((rule.get("spec") or {}).get("taint") or {}).get("effect") or "")


def plan(
    want: Mapping[str, WantedRule],
    existing: Sequence[Mapping[str, Any]],
    last_due: Mapping[str, datetime],
    at: datetime,
    clear_after: float,
    devices: Sequence[DraDevice],
) -> RulePlan:
    """The deletes and creates that bring this node's rules (`existing`: gpuprobe's, of this
    node) to what the report wants. A rule no longer wanted goes once it has not been for
    `clear_after` seconds (`last_due`: when each was last wanted), at once when its device is
    no longer published (a stale rule); one whose effect is no longer the configured one is
    replaced."""
    have = {str(r["metadata"]["name"]): r for r in existing}
    names = {d.name for d in devices}
    delete: list[str] = []
    create: list[WantedRule] = []
    for name, rule in sorted(have.items()):
        if name in want:
            if _effect(rule) != want[name].body["spec"]["taint"]["effect"]:
                delete.append(name)
                create.append(want[name])
            continue
        device = ((rule.get("spec") or {}).get("deviceSelector") or {}).get("device")
        since = last_due.get(name)
        gone_for = (at - since).total_seconds() if since is not None else 0.0
        if device not in names or gone_for >= clear_after:
            delete.append(name)
    create += [w for name, w in sorted(want.items()) if name not in have]
    return RulePlan(tuple(delete), tuple(create))


@dataclass(frozen=True)
class QuarantineBrake:
    """The fleet's GPUs as the brake counts them: published, and quarantined by gpuprobe."""

    gpus: int
    quarantined: int
    fraction: float

    @property
    def engaged(self) -> bool:
        """Whether new rules are withheld: at least `fraction` of the GPUs quarantined."""
        return self.quarantined >= self.fraction * max(self.gpus, 1)

    def why(self) -> str:
        """The brake in words, for the finding, the event and the log."""
        return (
            f"{self.quarantined} of {self.gpus} GPUs in the fleet are already quarantined by "
            f"gpuprobe's DeviceTaintRules (the brake holds new ones at {self.fraction:.0%} or "
            "more)"
        )


def slice_gpus(piece: Mapping[str, Any]) -> frozenset[str]:
    """The GPUs (UUIDs) a ResourceSlice publishes, a GPU once with its MIG devices."""
    found = set()
    for device in (piece.get("spec") or {}).get("devices") or []:
        uuid = _attribute(device, "parentUUID") or _attribute(device, "uuid")
        if uuid is not None:
            found.add(uuid)
    return frozenset(found)


def brake(
    gpus: Iterable[frozenset[str]], rules: Iterable[Mapping[str, Any]], fraction: float
) -> QuarantineBrake:
    """The brake over every slice's GPUs (`slice_gpus`: a GPU counted once) and gpuprobe's
    rules (a GPU counted once, whatever its causes and devices)."""
    published = set().union(*gpus)
    held = {_quarantined(r) for r in rules if ours(r)}
    return QuarantineBrake(len(published), len(held), fraction)


def _quarantined(rule: Mapping[str, Any]) -> str:
    """The GPU a rule of ours quarantines: its annotation, else its pool and device."""
    annotated = ((rule.get("metadata") or {}).get("annotations") or {}).get(GPU_ANNOTATION)
    if annotated:
        return str(annotated)
    selector = (rule.get("spec") or {}).get("deviceSelector") or {}
    return f"{selector.get('pool')}/{selector.get('device')}"
