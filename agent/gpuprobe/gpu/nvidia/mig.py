"""Each NVIDIA GPU's MIG mode and layout as NVML tells it.

MIG devices are found the way the NVIDIA device plugin finds them:
`nvmlDeviceGetMigDeviceHandleByIndex(gpu, i)` for every slot below
`nvmlDeviceGetMaxMigDeviceCount` (an empty slot is NotFound), then each MIG device's GPU
instance id, compute instance id, UUID, name (`... MIG 1g.10gb`), memory and attributes.
Placements come from the GPU instance (`"gi:<gpu>:<id>"`) and compute instance
(`"ci:<gpu>:<gi>:<ci>"`) handles, which need privileges; without them they are left out, as
is everything else NVML cannot tell.
"""

from __future__ import annotations

import re
from typing import Any, TypedDict, cast

from gpuprobe.gpu.nvidia.device import Device, open_gpus
from gpuprobe.gpu.nvidia.health import as_int, current_pending
from gpuprobe.host import Host
from gpuprobe.host.nvml import NvmlError

# Slots asked when the driver does not say how many MIG devices a GPU can hold (7 GPU
# instances on A100, H100, B200).
DEFAULT_MAX_MIG_DEVICES = 7
# No GPU holds more; a corrupt answer must not make the check ask forever.
MIG_SLOT_LIMIT = 64
_PROFILE = re.compile(r"MIG\s+(\S+)\s*$")
_SUFFIX = re.compile(r"^\d+c\.")
MIB = 1024 * 1024


class Placement(TypedDict):
    """Where an instance sits among the GPU's slices."""

    start: int
    size: int


class ComputeInstance(TypedDict, total=False):
    """A MIG device: one compute instance of a GPU instance (what NVML cannot tell is left
    out)."""

    id: int
    mig_device_index: int
    uuid: str
    name: str
    profile: str
    memory_bytes: int
    multiprocessor_count: int
    placement: Placement
    resource: str


class GpuInstance(TypedDict, total=False):
    """A GPU instance and its compute instances."""

    id: int
    profile: str
    placement: Placement
    memory_bytes: int
    compute_instances: list[ComputeInstance]


class MigGpu(TypedDict, total=False):
    """One GPU's entry in `data.gpus` (docs/checks.md, check `mig`)."""

    index: int
    uuid: str
    name: str
    mig_capable: bool
    mig_mode_current: int
    mig_mode_pending: int
    mig_device_count: int
    gpu_instances: list[GpuInstance]
    lost: bool
    nvml_errors: dict[str, str]


def read_layouts(host: Host, count: int) -> list[MigGpu]:
    """The MIG mode and layout of each of NVML's `count` GPUs."""
    # Built as plain dicts, the absent left out.
    return [cast(MigGpu, _gpu(host, d)) for d in open_gpus(host.nvml, count)]


def _gpu(host: Host, device: Device) -> dict[str, Any]:
    facts: dict[str, Any] = {"index": device.index}
    if device.lost:
        return {**facts, "lost": True}
    facts["uuid"] = device.uuid()
    facts["name"] = device.name()
    mode = current_pending(device.get("nvmlDeviceGetMigMode"))
    facts["mig_capable"] = mode is not None
    if mode is not None:
        facts["mig_mode_current"], facts["mig_mode_pending"] = mode
        if mode[0] == 1:
            migs = _mig_devices(host, device)
            facts["mig_device_count"] = len(migs)
            facts["gpu_instances"] = _gpu_instances(host, device.index, migs)
    facts.update(_outcome(device))
    return {k: v for k, v in facts.items() if v is not None}


def _outcome(device: Device) -> dict[str, Any]:
    """What the queries found out about the GPU itself: lost, and NVML's errors."""
    found: dict[str, Any] = {"lost": True} if device.lost else {}
    if device.errors:
        found["nvml_errors"] = dict(device.errors)
    return found


def _mig_devices(host: Host, gpu: Device) -> list[dict[str, Any]]:
    """Every MIG device on a MIG-enabled GPU, by slot."""
    slots = as_int(gpu.get("nvmlDeviceGetMaxMigDeviceCount")) or DEFAULT_MAX_MIG_DEVICES
    found = []
    for slot in range(min(slots, MIG_SLOT_LIMIT)):
        ref = f"{gpu.index}:{slot}"
        if not _mig_slot_used(host, gpu.index, slot, ref):
            continue
        mig = Device(host.nvml, ref)
        name = mig.name()
        memory = mig.get("nvmlDeviceGetMemoryInfo")
        attributes = mig.get("nvmlDeviceGetAttributes_v2", "nvmlDeviceGetAttributes")
        attributes = attributes if isinstance(attributes, dict) else {}
        total = as_int(memory.get("total")) if isinstance(memory, dict) else None
        memory_mb = as_int(attributes.get("memorySizeMB"))
        if total is None and memory_mb is not None:
            total = memory_mb * MIB
        facts = {
            "mig_device_index": slot,
            "gi": as_int(mig.get("nvmlDeviceGetGpuInstanceId")),
            "ci": as_int(mig.get("nvmlDeviceGetComputeInstanceId")),
            "uuid": mig.uuid(),
            "name": name,
            "profile": _profile(name, attributes),
            "memory_bytes": total,
            "multiprocessor_count": as_int(attributes.get("multiprocessorCount")),
        }
        found.append({k: v for k, v in facts.items() if v is not None})
    return found


def _mig_slot_used(host: Host, gpu: int, slot: int, ref: str) -> bool:
    """Whether a MIG device sits in the slot (NotFound: empty). A record without the handle
    call still counts a slot whose MIG device answers for its UUID."""
    try:
        host.nvml.call("nvmlDeviceGetMigDeviceHandleByIndex", gpu, slot)
        return True
    except NvmlError as exc:
        if exc.name != "NotSupported":
            return False
    try:
        host.nvml.call("nvmlDeviceGetUUID", ref)
        return True
    except NvmlError:
        return False


def _profile(name: str | None, attributes: dict[str, Any]) -> str | None:
    """The MIG profile from the device name (`NVIDIA H100 80GB HBM3 MIG 1g.10gb`), else one
    built from its slice counts and memory (`1c.3g.40gb`)."""
    match = _PROFILE.search(name or "")
    if match:
        return match.group(1)
    gi, ci = (
        as_int(attributes.get("gpuInstanceSliceCount")),
        as_int(attributes.get("computeInstanceSliceCount")),
    )
    memory_mb = as_int(attributes.get("memorySizeMB"))
    if gi is None or memory_mb is None:
        return None
    profile = f"{gi}g.{round(memory_mb / 1024)}gb"
    return f"{ci}c.{profile}" if ci is not None and ci < gi else profile


def _gpu_instances(host: Host, gpu: int, migs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The MIG devices grouped by GPU instance, with the instances' placements."""
    by_gi: dict[int, list[dict[str, Any]]] = {}
    for mig in migs:
        by_gi.setdefault(mig.get("gi", -1), []).append(mig)
    instances = []
    for gi, members in sorted(by_gi.items()):
        first = members[0]
        instance: dict[str, Any] = {
            "id": gi if gi >= 0 else None,
            "profile": _SUFFIX.sub("", first.get("profile", "")) or None,
            "placement": _placement(host, "nvmlGpuInstanceGetInfo", f"gi:{gpu}:{gi}")
            if gi >= 0
            else None,
            "memory_bytes": first.get("memory_bytes"),
            "compute_instances": [_compute_instance(host, gpu, gi, m) for m in members],
        }
        instances.append({k: v for k, v in instance.items() if v is not None})
    return instances


def _compute_instance(host: Host, gpu: int, gi: int, mig: dict[str, Any]) -> dict[str, Any]:
    ci = mig.get("ci")
    facts: dict[str, Any] = {"id": ci, **{k: v for k, v in mig.items() if k not in ("gi", "ci")}}
    if ci is not None and gi >= 0:
        facts["placement"] = _placement(
            host,
            "nvmlComputeInstanceGetInfo_v2",
            f"ci:{gpu}:{gi}:{ci}",
            "nvmlComputeInstanceGetInfo",
        )
        facts["resource"] = f"mig:{gpu}:{gi}:{ci}"
    return {k: v for k, v in facts.items() if v is not None}


def _placement(host: Host, fn: str, ref: str, *more: str) -> dict[str, int] | None:
    """An instance's placement (`start`, `size` in slices), from its info struct."""
    info = Device(host.nvml, ref).get(fn, *more)
    placement = info.get("placement") if isinstance(info, dict) else None
    if not isinstance(placement, dict):
        return None
    start, size = as_int(placement.get("start")), as_int(placement.get("size"))
    return None if start is None or size is None else {"start": start, "size": size}
