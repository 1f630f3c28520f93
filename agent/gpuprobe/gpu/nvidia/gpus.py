"""The node's NVIDIA GPUs as the `gpus` check lists them: the PCI bus, NVML's count, and each
GPU's identity (index, UUID, name, serial, PCI bus id, memory, persistence and compute mode)
with its health (`gpu.nvidia.health`). What NVML cannot tell is left out; a GPU NVML reports
lost is named, its neighbours still read.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
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
class NvidiaGpuFacts:
    """One GPU's facts as NVML answered (None: NVML cannot tell), in the order the `gpus`
    check's `data.gpus[i]` lists them (`to_data`): its identity, then its health
    (`gpu.nvidia.health.read_health`), then what the queries found out about the GPU itself.
    """

    index: int
    vendor: str = VENDOR
    # Lost when opened (its handle lost: NVML told nothing more), or lost while read.
    lost_on_open: bool = False
    uuid: str | None = None
    name: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    persistence_mode: bool | None = None
    compute_mode: str | None = None
    temperature_celsius: int | None = None
    temperature_slowdown_celsius: int | None = None
    temperature_shutdown_celsius: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    utilization_gpu_percent: int | None = None
    utilization_memory_percent: int | None = None
    ecc_mode_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    ecc_corrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    retired_pages_pending: bool | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    pcie_link_generation: int | None = None
    pcie_link_generation_max: int | None = None
    # Each link NVML answers for: {"link": n, "up": bool}.
    nvlinks: list[dict[str, Any]] | None = None
    fabric_state: str | None = None
    fabric_status: int | None = None
    clock_event_reasons: list[str] | None = None
    # Each compute process: {"pid", "name", "used_memory_bytes"}.
    processes: list[dict[str, Any]] | None = None
    recovery_action: str | None = None
    mig_mode_current: int | None = None
    idle: bool | None = None
    lost_while_read: bool = False
    nvml_errors: dict[str, str] | None = None
    # The PCI address of a GPU NVML cannot name, from its place on the bus.
    bus_place: str | None = None

    @property
    def lost(self) -> bool:
        """NVML reports the GPU lost (fallen off the bus, or hung)."""
        return self.lost_on_open or self.lost_while_read

    @property
    def address(self) -> str | None:
        """The GPU's PCI address: NVML's, else its place on the bus."""
        return self.pci_bus_id or self.bus_place

    def to_data(self) -> dict[str, Any]:
        """The `gpus` check's entry: what NVML told, in its order (a GPU lost when opened
        says so before anything else; one lost while read, after its health)."""
        data: dict[str, Any] = {"index": self.index, "vendor": self.vendor}
        if self.lost_on_open:
            data["lost"] = True
        for name in _READ_KEYS:
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        if self.lost_while_read:
            data["lost"] = True
        if self.nvml_errors:
            data["nvml_errors"] = dict(self.nvml_errors)
        if self.bus_place is not None:
            data["pci_bus_id"] = self.bus_place
        return data


# The fields NVML's answers fill, in the data's order (between the vendor and `lost`).
_READ_KEYS = tuple(
    f.name
    for f in fields(NvidiaGpuFacts)
    if f.name
    not in {"index", "vendor", "lost_on_open", "lost_while_read", "nvml_errors", "bus_place"}
)


@dataclass(frozen=True)
class GpuReading:
    """One GPU as NVML answered: its facts, and whether NVML found it lost or needing a
    reset."""

    index: int
    lost: bool
    reset_required: bool
    facts: NvidiaGpuFacts


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
        lost_on_open = device.lost
        answers = identity(device)
        if not device.lost:
            answers.update(read_health(device, processes))
        answers.pop("index")
        answers.pop("lost", None)
        facts = NvidiaGpuFacts(
            device.index,
            lost_on_open=lost_on_open,
            lost_while_read=device.lost and not lost_on_open,
            nvml_errors=dict(device.errors) if device.errors else None,
            **answers,
        )
        readings.append(GpuReading(device.index, device.lost, device.reset_required, facts))
    return _place_on_bus(readings, bus, count)


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


def _place_on_bus(readings: list[GpuReading], bus: list[PciDevice], count: int) -> list[GpuReading]:
    """Give a GPU NVML cannot name (its handle lost) its PCI address from its place on the
    bus: NVML numbers GPUs in PCI bus order, so index i is the i-th NVIDIA GPU on the bus
    when NVML sees every one of them."""
    if count != len(bus):
        return readings  # a GPU missing from NVML shifts the order: the place says nothing
    placed = []
    for reading in readings:
        facts = reading.facts
        if facts.uuid is None and facts.pci_bus_id is None:
            facts = replace(facts, bus_place=bus[facts.index].address)
        placed.append(replace(reading, facts=facts))
    return placed
