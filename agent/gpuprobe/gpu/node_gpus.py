"""The node's GPUs as a check needs them beside its own facts, read through `host`: how many
NVML counts and who they are, which are busy, the NVIDIA and AMD devices on the PCI bus, the
loaded NVIDIA driver's version.

Thin on purpose: each answer comes from the vendor's own reader (`gpu.nvidia.device`,
`gpu.pci`, `gpu.amd.sysfs`); this module only takes the host, so a check hands over `host`
and never touches its files or NVML.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.gpu.amd import sysfs as amd_sysfs
from gpuprobe.gpu.nvidia import device
from gpuprobe.gpu.pci import PciDevice, nvidia_devices, nvidia_gpus
from gpuprobe.host import Host
from gpuprobe.host.nvml import NvmlError


@dataclass(frozen=True)
class NvmlGpu:
    """A GPU as NVML lists it: its index, UUID ("" when NVML cannot tell it) and PCI address
    (None when NVML cannot read it: a GPU lost since NVML counted it)."""

    index: int
    uuid: str
    pci_bus_id: str | None


def nvml_gpu_count(host: Host) -> int | None:
    """How many GPUs NVML counts (None when NVML cannot tell)."""
    return device.gpu_count(host.nvml)


def nvml_gpus(host: Host) -> list[NvmlGpu]:
    """Every GPU NVML counts, in NVML's order."""
    found = []
    for index in range(device.gpu_count(host.nvml) or 0):
        gpu = device.Device(host.nvml, index)
        found.append(NvmlGpu(index, gpu.uuid() or "", gpu.pci_bus_id()))
    return found


def busy_gpus(host: Host) -> list[int]:
    """The NVML indices of the GPUs with a compute or graphics process on them."""
    return device.busy_gpus(host.nvml)


def nvidia_driver_version(host: Host) -> str | None:
    """The loaded NVIDIA driver's version as NVML tells it (None when NVML cannot)."""
    if host.nvml.init_error is not None:
        return None
    try:
        return device.driver_version(host.nvml) or None
    except NvmlError:
        return None


def nvidia_pci_devices(host: Host) -> list[PciDevice]:
    """Every NVIDIA PCI function on the bus (GPUs, NVSwitches), in address order."""
    return nvidia_devices(host.fs)


def nvidia_pci_gpus(host: Host) -> list[PciDevice]:
    """The NVIDIA GPUs on the PCI bus, in address order (NVML's default order)."""
    return nvidia_gpus(host.fs)


def amd_gpus(host: Host) -> list[amd_sysfs.AmdGpu]:
    """Every AMD GPU on the PCI bus with the amdgpu driver's facts of it."""
    return amd_sysfs.read_gpus(host.fs)


def amd_gpu_addresses(host: Host) -> list[tuple[str, int]]:
    """The AMD GPUs on the PCI bus, in address order: (address, device id)."""
    return amd_sysfs.amd_gpu_addresses(host.fs)
