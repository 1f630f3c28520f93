"""AMD's GPUs behind the vendor-neutral interface (`gpu.backend.GpuBackend`), through the
amdgpu driver's sysfs files (`gpu.amd.sysfs`, read through `host.fs`, so a snapshot's rootfs
replays them). ROCm SMI is not asked here: it is a second opinion the `driver` check shows,
never what a GPU's facts rest on.
"""

from __future__ import annotations

from gpuprobe.gpu.amd.inventory import read_uses
from gpuprobe.gpu.amd.sysfs import AmdGpu, amd_gpu_addresses, read_gpus, read_module
from gpuprobe.gpu.backend import (
    DriverFacts,
    GpuHealth,
    GpuIdentity,
    GpuUse,
    InterconnectLink,
    MemoryHealth,
    PcieLink,
    Vendor,
)
from gpuprobe.host import Host


class AmdBackend:
    """The node's AMD GPUs (Instinct, Radeon) as the amdgpu driver shows them in sysfs."""

    vendor: Vendor = "amd"

    def __init__(self, host: Host) -> None:
        self.host = host

    def present(self) -> bool:
        """AMD GPUs are on the PCI bus (whether or not amdgpu took them)."""
        return bool(self.bus())

    def driver(self) -> DriverFacts:
        """amdgpu's version: a DKMS build's own, else the kernel's (in-tree); None when the
        module is not loaded."""
        module = read_module(self.host.fs)
        version = module.driver_version if module.loaded else None
        return DriverFacts("amd", version)

    def bus(self) -> list[tuple[str, int]]:
        """The AMD GPUs on the PCI bus, in address order: (address, device id)."""
        return amd_gpu_addresses(self.host.fs)

    def sysfs_gpus(self) -> list[AmdGpu]:
        """Every AMD GPU on the bus with all the amdgpu driver's facts of it (RAS, bad
        pages, XGMI, DRM nodes): the vendor's extras beyond the interface's types."""
        return read_gpus(self.host.fs)

    def gpus(self) -> list[GpuIdentity]:
        """The AMD GPUs on the bus in PCI address order: unique_id, address, product name."""
        return [_identity(gpu) for gpu in read_gpus(self.host.fs)]

    def health(self) -> list[GpuHealth]:
        """Each GPU's RAS counts, retired pages, PCIe link, XGMI links and temperature. A GPU
        amdgpu did not take tells only its PCIe link."""
        return [_health(gpu) for gpu in read_gpus(self.host.fs)]

    def uses(self) -> list[GpuUse]:
        """Each GPU the driver took as workloads get it: its render node's minor, busy
        percent and the processes holding its render node (`gpuprobe.gpu.amd.inventory`)."""
        return read_uses(self.host)


def _identity(gpu: AmdGpu) -> GpuIdentity:
    return GpuIdentity("amd", gpu.index, gpu.unique_id, gpu.pci_address, gpu.name)


def _health(gpu: AmdGpu) -> GpuHealth:
    pages = gpu.bad_pages
    counts = gpu.ras_counts
    temperatures = gpu.temperatures_celsius
    return GpuHealth(
        _identity(gpu),
        memory=MemoryHealth(
            sum(c.uncorrectable for c in counts) if counts else None,
            sum(c.correctable for c in counts) if counts else None,
            pages.reserved if pages else None,
            pages.pending > 0 if pages else None,
            pages.failed > 0 if pages else None,
        ),
        pcie=PcieLink(
            speed_gts=gpu.pcie.speed_gts,
            speed_max_gts=gpu.pcie.max_speed_gts,
            width=gpu.pcie.width,
            width_max=gpu.pcie.max_width,
        ),
        links=None
        if gpu.xgmi is None
        else [InterconnectLink("xgmi", p.node, p.links > 0) for p in gpu.xgmi.peers if p.hops == 1],
        temperature_celsius=temperatures.get("junction", temperatures.get("edge")),
        errors=dict(gpu.errors),
    )
