"""The node's GPUs as one run of the checks sees them: `GpuView`, built from the vendors'
backends (`gpu.backends`), the only door through which checks and workloads reach GPUs.

Vendor-neutral facts (the backends present, each vendor's driver, how many GPUs a vendor
has, every shown vendor's GPUs' health, uses and partitions) are asked through the view's
methods; what only one vendor can tell (NVIDIA's NVSwitches
and busy GPUs, AMD's RAS and DRM facts) through its typed backend, `view.nvidia` or
`view.amd`. The view asks when asked and keeps nothing: a replayed NVML answers repeated
calls in order, so a check reads through the view exactly what it read through the vendor's
readers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from gpuprobe.gpu.amd.backend import AmdBackend
from gpuprobe.gpu.backend import (
    DriverFacts,
    GpuBackend,
    GpuHealth,
    GpuUse,
    Partition,
    Vendor,
)
from gpuprobe.gpu.backends import all_backends, node_backends
from gpuprobe.gpu.nvidia.backend import NvidiaBackend
from gpuprobe.host import Host


class GpuView:
    """One node's GPUs through its vendors' backends."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.nvidia = NvidiaBackend(host)
        self.amd = AmdBackend(host)

    def backends(self, skip: Collection[Vendor] = ()) -> list[GpuBackend]:
        """The backends of the vendors this node shows (`gpu.backends.node_backends`); a
        vendor in `skip` is not asked (a check whose rules cover it already)."""
        return node_backends(self.host, skip)

    def every_backend(self) -> list[GpuBackend]:
        """Every vendor's backend, shown or not (`gpu.backends.all_backends`): for a reader
        whose answer is empty on a vendor the node does not show, spared the asking."""
        return all_backends(self.host)

    def health(self) -> list[GpuHealth]:
        """Every shown vendor's GPUs' health, in the backends' order."""
        return [health for backend in self.backends() for health in backend.health()]

    def uses(self) -> list[GpuUse]:
        """Every shown vendor's GPUs as workloads get them, in the backends' order."""
        return [use for backend in self.backends() for use in backend.uses()]

    def partitions(self) -> list[Partition]:
        """Every partition given to workloads as a device (NVIDIA's MIG devices), by GPU."""
        return [partition for use in self.uses() for partition in use.partitions]

    def driver(self, vendor: Vendor) -> DriverFacts:
        """The vendor's driver as its backend tells it (whether or not the node shows it)."""
        return self._backend(vendor).driver()

    def gpu_count(self, vendor: Vendor) -> int:
        """How many of the vendor's GPUs the node has: the PCI bus's count, else (NVIDIA)
        NVML's. NVML is asked only when the bus shows none (a VM or snapshot without sysfs),
        so a hung NVML does not hold up a check that only needs to know whether GPUs are
        there."""
        by_bus: dict[str, Callable[[], int]] = {
            "amd": lambda: len(self.amd.bus()),
            "nvidia": lambda: len(self.nvidia.bus_gpus()) or self.nvidia.count() or 0,
        }
        count = by_bus.get(vendor)  # another vendor: as many as its backend lists
        return count() if count is not None else len(self._backend(vendor).gpus())

    def _backend(self, vendor: Vendor) -> GpuBackend:
        """The vendor's backend (NVIDIA's and AMD's kept typed as `.nvidia`, `.amd`)."""
        known: dict[str, GpuBackend] = {"nvidia": self.nvidia, "amd": self.amd}
        if vendor in known:
            return known[vendor]
        return next(b for b in self.every_backend() if b.vendor == vendor)
