"""Check `mig`: how MIG is laid out on each GPU, and does it fit the device plugin?

Per GPU: MIG capable or not, current and pending mode, and with MIG on its GPU instances and
compute instances: profile names, placements, memory and MIG device UUIDs. MIG devices are
found the way the NVIDIA device plugin finds them: `nvmlDeviceGetMigDeviceHandleByIndex(gpu,
i)` for every slot below `nvmlDeviceGetMaxMigDeviceCount` (an empty slot is NotFound), then
each MIG device's GPU instance id, compute instance id, UUID, name (`... MIG 1g.10gb`),
memory and attributes. Placements come from the GPU instance (`"gi:<gpu>:<id>"`) and compute
instance (`"ci:<gpu>:<gi>:<ci>"`) handles, which need privileges; without them they are left
out.

The device plugin's MIG strategy (its config file, `device_plugin.config_file`) is held
against the layout as the plugin itself does (k8s-device-plugin mig-strategy.go): `single`
needs every GPU MIG-enabled with one identical profile (all MIG off falls back to `none`),
`none` hands out whole GPUs, useless with MIG on, `mixed` takes any layout. A plugin
configuration that cannot be read leaves the strategy unknown here; the `device_plugin`
check reports it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NotRequired, TypedDict, cast

from gpuprobe.checks.record import Check
from gpuprobe.config import Config
from gpuprobe.containers.device_plugin import DevicePluginConfig, device_plugin_file
from gpuprobe.families import GPU_LABELS, Family, gpu_labels, mappings, number
from gpuprobe.families import text as label
from gpuprobe.gpu.nvidia.device import Device, gpu_count, open_gpus
from gpuprobe.gpu.nvidia.health import as_int, current_pending
from gpuprobe.gpu.pci import nvidia_gpus
from gpuprobe.host import Host
from gpuprobe.host.nvml import NvmlError
from gpuprobe.report import Action, CheckResult, Finding, Severity, Status, gpu_resource

NAME = "mig"
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


class MigData(TypedDict):
    """The check's data (docs/checks.md, check `mig`)."""

    gpus: list[MigGpu]
    device_plugin_mig_strategy: str | None
    device_plugin_config_file: NotRequired[str]


def run(host: Host, config: Config) -> CheckResult:
    """Read each GPU's MIG mode and layout and hold it against the device plugin's strategy."""
    data: MigData = {"gpus": [], "device_plugin_mig_strategy": None}
    strategy = _strategy(host, config, data)
    count = gpu_count(host.nvml)
    if count is None:
        if not nvidia_gpus(host.fs):
            return CheckResult(NAME, "no NVIDIA GPU on this node", data=data)
        return CheckResult(
            NAME,
            "NVML unavailable (the driver check says why): MIG layout unknown",
            data=data,
            floor=Status.UNKNOWN,
        )
    gpus = [_gpu(host, d) for d in open_gpus(host.nvml, count)]
    data["gpus"] = cast(list[MigGpu], gpus)  # built as plain dicts, the absent left out
    findings = [f for g in gpus for f in _gpu_findings(g)]
    if strategy is not None:
        findings += _strategy_findings(strategy, gpus)
    return CheckResult(NAME, _summary(gpus, strategy), findings, data)


def _strategy(host: Host, config: Config, data: MigData) -> str | None:
    """The plugin's MIG strategy; "unknown" when its config is invalid, None when not given."""
    file = device_plugin_file(host, config)
    if file is None:
        return None
    plugin = file.result
    strategy = plugin.mig_strategy if isinstance(plugin, DevicePluginConfig) else "unknown"
    data["device_plugin_mig_strategy"] = strategy
    data["device_plugin_config_file"] = file.path
    return strategy


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


# --- judging ---------------------------------------------------------------------------


def _gpu_findings(gpu: dict[str, Any]) -> list[Finding]:
    if "mig_mode_current" not in gpu:
        return []
    resource = gpu_resource(gpu["index"], gpu.get("uuid"))
    current, pending = gpu["mig_mode_current"], gpu["mig_mode_pending"]
    where = f"GPU {gpu['index']}"
    if current != pending:
        return [
            Finding(
                "MIG_PENDING_CHANGE",
                Severity.WARNING,
                f"{where}: MIG mode is {_on(current)} but {_on(pending)} is pending: the "
                "change takes effect only after a GPU reset (nvidia-smi -r) or a reboot",
                Action.RESET_GPU,
                resource,
            )
        ]
    if current == 1 and not gpu.get("mig_device_count"):
        return [
            Finding(
                "MIG_NO_INSTANCES",
                Severity.WARNING,
                f"{where} has MIG enabled but no GPU instance: the whole GPU is unusable "
                "(and the device plugin refuses it). Create instances (nvidia-smi mig -cgi "
                "... -C, or the MIG manager's config) or disable MIG",
                Action.FIX_CONFIG,
                resource,
            )
        ]
    return []


def _strategy_findings(strategy: str, gpus: list[dict[str, Any]]) -> list[Finding]:
    on = [g for g in gpus if g.get("mig_mode_current") == 1]
    off = [g for g in gpus if g.get("mig_mode_current") == 0]
    if strategy == "none" and on:
        return [
            _conflict(
                f"the device plugin's MIG strategy is none but MIG is enabled on "
                f"{_gpus(on)}: the plugin hands out whole GPUs, on which pods cannot use the "
                "MIG devices. Set migStrategy to single or mixed, or disable MIG"
            )
        ]
    if strategy != "single" or not on:
        return []  # mixed takes any layout; single with MIG off everywhere acts as none
    if off:
        return [
            _conflict(
                f"the device plugin's MIG strategy is single but MIG is off on {_gpus(off)} "
                f"and on on {_gpus(on)}: single needs every GPU MIG-enabled (the plugin fails "
                "to start). Enable MIG on all GPUs or use migStrategy mixed"
            )
        ]
    profiles = sorted(
        {
            ci.get("profile", "unknown")
            for g in on
            for gi in g.get("gpu_instances", [])
            for ci in gi.get("compute_instances", [])
        }
    )
    if len(profiles) > 1:
        return [
            _conflict(
                f"the device plugin's MIG strategy is single but the MIG devices have "
                f"{len(profiles)} profiles ({', '.join(profiles)}): single needs one "
                "identical profile on every GPU (the plugin fails to start). Use one "
                "profile everywhere or migStrategy mixed"
            )
        ]
    return []


def _conflict(message: str) -> Finding:
    return Finding("MIG_STRATEGY_CONFLICT", Severity.WARNING, message, Action.FIX_CONFIG)


def _gpus(gpus: list[dict[str, Any]]) -> str:
    indices = [str(g["index"]) for g in gpus]
    return f"GPU{'s' if len(indices) != 1 else ''} {', '.join(indices)}"


def _on(mode: int) -> str:
    return "on" if mode == 1 else "off"


def _summary(gpus: list[dict[str, Any]], strategy: str | None) -> str:
    total = len(gpus)
    if total == 0:
        return "NVML sees no GPU"
    capable = [g for g in gpus if g.get("mig_capable")]
    if not capable:
        return f"no MIG-capable GPU ({total} GPU{'s' if total != 1 else ''})"
    on = [g for g in capable if g.get("mig_mode_current") == 1]
    if on:
        devices = sum(g.get("mig_device_count", 0) for g in on)
        profiles = sorted(
            {
                ci.get("profile", "?")
                for g in on
                for gi in g.get("gpu_instances", [])
                for ci in gi.get("compute_instances", [])
            }
        )
        shown = f" ({', '.join(profiles)})" if profiles else ""
        summary = f"MIG on {len(on)} of {total} GPUs: {devices} MIG devices{shown}"
    else:
        summary = f"MIG disabled on all {len(capable)} MIG-capable GPUs"
    pending = [g for g in capable if g.get("mig_mode_pending") != g.get("mig_mode_current")]
    if pending:
        summary += f"; MIG mode change pending on {_gpus(pending)}"
    if strategy == "unknown":
        summary += "; device plugin MIG strategy unknown (its configuration is invalid)"
    elif strategy is not None:
        summary += f"; device plugin MIG strategy {strategy}"
    return summary


def metric_families(data: MigData) -> Iterator[Family]:
    """`gpuprobe_mig_device_info`: one sample per MIG device (compute instance) from the
    check's data, so that a dashboard can draw each GPU's MIG layout."""
    # `d[key] if key in d`, not `.get`: mypy holds an index to the TypedDict's keys. The
    # values are still held to numbers and text: a report may come from elsewhere.
    gpus: object = data["gpus"] if "gpus" in data else None
    if not isinstance(gpus, list):
        return
    family = Family(
        "gpuprobe_mig_device_info",
        "A MIG device: its GPU, GPU instance, compute instance, profile and UUID",
        (*GPU_LABELS, "gpu_instance", "compute_instance", "profile", "mig_uuid"),
    )
    for gpu in (cast(MigGpu, g) for g in mappings(gpus)):
        if number(gpu["index"] if "index" in gpu else None) is None:
            continue
        instances = gpu["gpu_instances"] if "gpu_instances" in gpu else None
        for gi in (cast(GpuInstance, i) for i in mappings(instances)):
            gi_id = number(gi["id"] if "id" in gi else None)
            members = gi["compute_instances"] if "compute_instances" in gi else None
            for ci in (cast(ComputeInstance, c) for c in mappings(members)):
                ci_id = number(ci["id"] if "id" in ci else None)
                if gi_id is None or ci_id is None:
                    continue
                profile = (
                    label(ci["profile"] if "profile" in ci else None)
                    or label(gi["profile"] if "profile" in gi else None)
                    or ""
                )
                family.add(
                    [
                        *gpu_labels(gpu),
                        str(int(gi_id)),
                        str(int(ci_id)),
                        profile,
                        label(ci["uuid"] if "uuid" in ci else None) or "",
                    ],
                    1,
                )
    yield family


CHECK: Check[MigData] = Check(
    NAME,
    run,
    metrics=metric_families,
    condition="GPUHardwareReady",
    summary_keys={
        "gpus": {
            "index": None,
            "lost": None,
            "mig_mode_current": None,
            "gpu_instances": {"compute_instances": {"profile": None}},
        }
    },
)
