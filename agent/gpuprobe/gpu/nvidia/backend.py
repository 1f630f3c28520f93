"""NVIDIA's GPUs behind the vendor-neutral interface (`gpu.backend.GpuBackend`), through NVML
(`host.nvml`) and the PCI bus and driver files (`host.fs`).

The backend asks only when asked, and as the NVIDIA readers of this package ask: a replayed
NVML answers repeated calls in order, so reading through the backend or through the readers
gives the same answers.
"""

from __future__ import annotations

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
from gpuprobe.gpu.nvidia.device import Device, busy_gpus, gpu_count, open_gpus
from gpuprobe.gpu.nvidia.driver import kernel_module, nvml_driver_version, read_stack
from gpuprobe.gpu.nvidia.gpus import GpuReading, read_gpus
from gpuprobe.gpu.nvidia.inventory import any_mig_enabled, read_uses
from gpuprobe.gpu.pci import PciDevice, nvidia_devices, nvidia_gpus
from gpuprobe.host import Host


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
        """The driver version in use (NVML's, else the loaded kernel module's), NVML's own
        answer and NVML's init error: the one place the node's NVIDIA driver version is
        worked out."""
        library = nvml_driver_version(self.host)
        module = None if library else kernel_module(self.host.fs)
        version = library or (module.version if module else None)
        return DriverFacts(
            "nvidia", version, library_error=self.host.nvml.init_error, library_version=library
        )

    def bus_gpus(self) -> list[PciDevice]:
        """The NVIDIA GPUs on the PCI bus, in address order (asks NVML nothing)."""
        return nvidia_gpus(self.host.fs)

    def count(self) -> int | None:
        """How many GPUs NVML counts; None when NVML is unavailable or cannot count."""
        return gpu_count(self.host.nvml)

    def bus_devices(self) -> list[PciDevice]:
        """Every NVIDIA PCI function on the bus (GPUs, NVSwitches), in address order."""
        return nvidia_devices(self.host.fs)

    def busy(self, graphics: bool = True) -> list[int]:
        """The NVML indices of the GPUs with a compute or graphics process on them
        (`graphics=False`: a compute process only; a display server's does not count)."""
        return busy_gpus(self.host.nvml, graphics=graphics)

    def partitioned(self) -> bool | None:
        """Whether any GPU has MIG on now; None when NVML cannot count the GPUs."""
        return any_mig_enabled(self.host)

    def listed(self) -> list[GpuIdentity]:
        """Each GPU NVML counts, by index, with its UUID and PCI address as NVML tells them
        (None where it cannot); asks for no handle and no name, so a GPU lost since NVML
        counted it is still listed."""
        nvml = self.host.nvml
        listed = []
        for index in range(gpu_count(nvml) or 0):
            gpu = Device(nvml, index)
            listed.append(GpuIdentity("nvidia", index, gpu.uuid(), gpu.pci_bus_id(), None))
        return listed

    def gpus(self) -> list[GpuIdentity]:
        """Each GPU NVML counts: UUID, PCI address and name (None where NVML cannot tell)."""
        nvml = self.host.nvml
        return [
            GpuIdentity("nvidia", d.index, d.uuid(), d.pci_bus_id(), d.name())
            for d in open_gpus(nvml, gpu_count(nvml) or 0)
        ]

    def health(self) -> list[GpuHealth]:
        """Each GPU NVML counts, its health as `gpu.nvidia.health` reads it."""
        count = self.count()
        if count is None:
            return []
        readings = read_gpus(self.host, count, self.bus_gpus(), self.host.processes())
        return [_health(reading) for reading in readings]

    def uses(self) -> list[GpuUse]:
        """Each GPU as workloads get it: its device-node minor, MIG devices, load and
        processes (`gpuprobe.gpu.nvidia.inventory`)."""
        return read_uses(self.host.nvml)


def _health(reading: GpuReading) -> GpuHealth:
    """The `gpus` check's facts of one GPU in the interface's terms."""
    facts = reading.facts
    links = facts.nvlinks
    return GpuHealth(
        GpuIdentity("nvidia", reading.index, facts.uuid, facts.address, facts.name),
        lost=reading.lost,
        reset_required=reading.reset_required,
        memory=MemoryHealth(
            facts.ecc_uncorrected_volatile,
            facts.ecc_corrected_volatile,
            _sum(facts.remapped_rows_correctable, facts.remapped_rows_uncorrectable),
            _any(facts.remapped_rows_pending, facts.retired_pages_pending),
            facts.remapped_rows_failure,
        ),
        pcie=PcieLink(
            generation=facts.pcie_link_generation,
            generation_max=facts.pcie_link_generation_max,
            width=facts.pcie_link_width,
            width_max=facts.pcie_link_width_max,
        ),
        links=None
        if links is None
        else [InterconnectLink("nvlink", link["link"], link["up"]) for link in links],
        temperature_celsius=facts.temperature_celsius,
        clock_event_reasons=facts.clock_event_reasons,
        errors=dict(facts.nvml_errors or {}),
    )


def _sum(*counts: int | None) -> int | None:
    """The sum of the counts NVML gave; None when it gave none."""
    given = [c for c in counts if c is not None]
    return sum(given) if given else None


def _any(*flags: bool | None) -> bool | None:
    """True when a flag is set, False when all given are clear, None when none is given."""
    given = [f for f in flags if f is not None]
    return any(given) if given else None
