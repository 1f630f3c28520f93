"""The node's NVIDIA GPUs as the `gpus` check lists them: the PCI bus, NVML's count, and each
GPU's identity (index, UUID, name, serial, PCI bus id, memory, persistence and compute mode)
with its health (`gpu.nvidia.health`). What NVML cannot tell is left out; a GPU NVML reports
lost is named, its neighbours still read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprobe.gpu.nvidia.device import Device, gpu_count, open_gpus, text
from gpuprobe.gpu.nvidia.health import FABRIC_MANAGER, read_health
from gpuprobe.gpu.nvidia.modes import COMPUTE_MODES
from gpuprobe.gpu.pci import PciDevice, nvidia_devices
from gpuprobe.host import Host
from gpuprobe.host.processes import ProcessTable

VENDOR = "nvidia"


@dataclass(frozen=True)
class NvidiaBus:
    """The NVIDIA functions on the PCI bus: the GPUs (in address order) and the NVSwitches."""

    gpus: list[PciDevice]
    nvswitches: int


@dataclass(frozen=True)
class GpuReading:
    """One GPU as NVML answered: its facts (the `gpus` check's `data.gpus[i]` keys), and
    whether NVML found it lost or needing a reset."""

    index: int
    lost: bool
    reset_required: bool
    facts: dict[str, Any]


def read_bus(host: Host) -> NvidiaBus:
    """The NVIDIA GPUs and NVSwitches on the PCI bus."""
    pci = nvidia_devices(host.fs)
    return NvidiaBus([d for d in pci if d.is_gpu], sum(d.is_nvswitch for d in pci))


def nvml_gpu_count(host: Host) -> int | None:
    """How many GPUs NVML counts; None when NVML is unavailable or cannot count."""
    return gpu_count(host.nvml)


def read_gpus(
    host: Host, count: int, bus: list[PciDevice], processes: ProcessTable | None = None
) -> list[GpuReading]:
    """Each of NVML's `count` GPUs: identity and health (a lost GPU only its index), its
    processes named from `processes` (None: the node's process table, read here)."""
    processes = host.processes() if processes is None else processes
    readings = []
    for device in open_gpus(host.nvml, count):
        facts = identity(device)
        facts = {"index": facts.pop("index"), "vendor": VENDOR, **facts}
        if not device.lost:
            facts.update(read_health(device, processes))
        _finish(device, facts)
        readings.append(GpuReading(device.index, device.lost, device.reset_required, facts))
    _place_on_bus([r.facts for r in readings], bus, count)
    return readings


def fabric_manager_running(host: Host) -> bool:
    """Whether NVIDIA's fabric manager runs on the node (it readies NVSwitch systems)."""
    return bool(host.processes().named(*FABRIC_MANAGER))


def identity(device: Device) -> dict[str, Any]:
    """One GPU's identity as NVML tells it; what it cannot tell is left out."""
    if device.lost:  # its handle is lost: NVML can tell nothing more
        return {"index": device.index, "lost": True}
    facts: dict[str, Any] = {"index": device.index}
    facts["uuid"] = device.uuid()
    facts["name"] = device.name()
    facts["serial"] = text(device.get("nvmlDeviceGetSerial"))
    facts["pci_bus_id"] = device.pci_bus_id()
    memory = device.get("nvmlDeviceGetMemoryInfo")
    if isinstance(memory, dict) and isinstance(memory.get("total"), int):
        facts["memory_total_bytes"] = memory["total"]
        if isinstance(memory.get("used"), int):
            facts["memory_used_bytes"] = memory["used"]
    persistence = device.get("nvmlDeviceGetPersistenceMode")
    if isinstance(persistence, int):
        facts["persistence_mode"] = persistence == 1
    compute = device.get("nvmlDeviceGetComputeMode")
    if isinstance(compute, int):
        facts["compute_mode"] = COMPUTE_MODES.get(compute, str(compute))
    return {k: v for k, v in facts.items() if v is not None}


def _finish(device: Device, facts: dict[str, Any]) -> None:
    """Add what the queries found out about the GPU itself: lost, and NVML's errors."""
    if device.lost:
        facts["lost"] = True
    if device.errors:
        facts["nvml_errors"] = dict(device.errors)


def _place_on_bus(gpus: list[dict[str, Any]], bus: list[PciDevice], count: int) -> None:
    """Give a GPU NVML cannot name (its handle lost) its PCI address from its place on the
    bus: NVML numbers GPUs in PCI bus order, so index i is the i-th NVIDIA GPU on the bus
    when NVML sees every one of them."""
    if count != len(bus):
        return  # a GPU missing from NVML shifts the order: the place says nothing
    for facts in gpus:
        if "uuid" not in facts and "pci_bus_id" not in facts:
            facts["pci_bus_id"] = bus[facts["index"]].address
