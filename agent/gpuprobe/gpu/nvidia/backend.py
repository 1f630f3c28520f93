"""NVIDIA's GPUs behind the vendor-neutral interface (`gpu.backend.GpuBackend`), through NVML
(`host.nvml`) and the PCI bus and driver files (`host.fs`).

The backend asks only when asked, and as the NVIDIA readers of this package ask: a replayed
NVML answers repeated calls in order, so reading through the backend or through the readers
gives the same answers.
"""

from __future__ import annotations

from gpuprobe.gpu.backend import DriverFacts, GpuIdentity, GpuProcess, GpuUse, Partition, Vendor
from gpuprobe.gpu.nvidia.device import gpu_count, open_gpus
from gpuprobe.gpu.nvidia.driver import loaded_version, read_stack
from gpuprobe.gpu.pci import PciDevice, nvidia_gpus
from gpuprobe.host import Host
from gpuprobe.workloads.inventory import Gpu, read_inventory


class NvidiaBackend:
    """The node's NVIDIA GPUs as NVML and the PCI bus show them."""

    vendor: Vendor = "nvidia"

    def __init__(self, host: Host) -> None:
        self.host = host

    def present(self) -> bool:
        """The node shows NVIDIA GPUs or their driver: on the bus, the kernel module loaded,
        NVML started or answering as only a loaded driver does."""
        return read_stack(self.host).seen

    def driver(self) -> DriverFacts:
        """The driver version (NVML's, else the loaded kernel module's) and NVML's init error."""
        return DriverFacts(
            "nvidia", loaded_version(self.host), library_error=self.host.nvml.init_error
        )

    def bus_gpus(self) -> list[PciDevice]:
        """The NVIDIA GPUs on the PCI bus, in address order (asks NVML nothing)."""
        return nvidia_gpus(self.host.fs)

    def count(self) -> int | None:
        """How many GPUs NVML counts; None when NVML is unavailable or cannot count."""
        return gpu_count(self.host.nvml)

    def gpus(self) -> list[GpuIdentity]:
        """Each GPU NVML counts: UUID, PCI address and name (None where NVML cannot tell)."""
        nvml = self.host.nvml
        return [
            GpuIdentity("nvidia", d.index, d.uuid(), d.pci_bus_id(), d.name())
            for d in open_gpus(nvml, gpu_count(nvml) or 0)
        ]

    def uses(self) -> list[GpuUse]:
        """Each GPU as workloads get it: its device-node minor, MIG devices, load and
        processes (`gpuprobe.workloads.inventory`)."""
        return [_use(gpu) for gpu in read_inventory(self.host.nvml)]


def _use(gpu: Gpu) -> GpuUse:
    """The inventory's GPU in the interface's terms."""
    return GpuUse(
        GpuIdentity("nvidia", gpu.index, gpu.uuid, None, None),
        minor=gpu.minor,
        partitioned=gpu.mig_enabled,
        partitions=[Partition(m.gpu, m.slot, m.gi, m.ci, m.uuid, m.name) for m in gpu.migs],
        utilization_percent=gpu.utilization_percent,
        samples=gpu.samples,
        processes=None
        if gpu.processes is None
        else [GpuProcess(p.pid, p.gpu, p.gi, p.ci, p.used_memory_bytes) for p in gpu.processes],
    )
