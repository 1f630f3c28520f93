"""The GPU interface every vendor plugs into: typed facts about one node's GPUs.

A backend reads one vendor's GPUs through its own transport (NVIDIA: NVML, `gpu.nvidia`;
AMD: the amdgpu driver's sysfs files and, where present, ROCm SMI, `gpu.amd`) and answers in
the types below; checks judge those facts and never name a vendor's library call.
`gpu.backends.node_backends(host)` gives the backends of a node, one per vendor whose GPUs or
driver it shows; a node with both vendors is legal.

What a backend cannot tell is None (or an empty list), never a guess; why it cannot tell is
in `errors` (the call or file → the reason), so a check can say "unknown" instead of "OK".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from gpuprobe.report import gpu_resource

Vendor = Literal["nvidia", "amd"]


@dataclass(frozen=True)
class GpuIdentity:
    """Who a GPU is: the index the node's tools use, its stable id (NVIDIA's `GPU-<uuid>`,
    AMD's `unique_id`), its PCI address as sysfs writes it, its product name and vendor."""

    vendor: Vendor
    index: int
    uuid: str | None
    pci_address: str | None
    name: str | None

    @property
    def stable_id(self) -> str | None:
        """The id the GPU's finding resource names: NVIDIA's UUID (None when NVML cannot tell
        it), AMD's unique_id else its PCI address (as `gpu.amd.sysfs.AmdGpu` names it)."""
        if self.vendor == "amd":
            return self.uuid or self.pci_address
        return self.uuid

    @property
    def resource(self) -> str:
        """The finding resource `gpu:<index>:<id>` (`stable_id`, empty when unknown)."""
        return gpu_resource(self.index, self.stable_id)


@dataclass(frozen=True)
class DriverFacts:
    """The vendor's kernel driver and user-space library as the backend sees them."""

    vendor: Vendor
    # The loaded driver's version (`550.54.15`; amdgpu's module version), None: unknown.
    version: str | None
    # Why the backend's library could not start (NVML's init error), None: it started or
    # the vendor has no such library.
    library_error: str | None = None
    # The version the vendor's library reports (NVML's), None: it did not start, cannot
    # tell, or the vendor has no such library. `version` falls back from it to the module's.
    library_version: str | None = None


@dataclass(frozen=True)
class MemoryHealth:
    """Device memory's errors and repairs since the driver loaded: uncorrectable and
    correctable error counts (NVIDIA: volatile ECC; AMD: RAS counts summed over the blocks),
    memory retired (NVIDIA: remapped rows; AMD: retired VRAM pages), a retirement waiting for a
    reset, and a retirement that failed. None: the GPU cannot tell."""

    uncorrectable_errors: int | None = None
    correctable_errors: int | None = None
    retired: int | None = None
    retirement_pending: bool | None = None
    retirement_failed: bool | None = None


@dataclass(frozen=True)
class PcieLink:
    """The GPU's PCIe link now and at most: generation (NVIDIA) or speed (GT/s, AMD), and
    lanes. None: the GPU cannot tell."""

    generation: int | None = None
    generation_max: int | None = None
    speed_gts: float | None = None
    speed_max_gts: float | None = None
    width: int | None = None
    width_max: int | None = None


@dataclass(frozen=True)
class InterconnectLink:
    """One GPU-to-GPU link (NVIDIA NVLink `nvlink` by link number, AMD XGMI `xgmi` by the
    hive node it reaches directly) and whether it is up."""

    kind: str
    index: int
    up: bool


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's health as its driver tells it: lost (fallen off the bus, or hung) and a
    reset required, its memory, PCIe link, GPU-to-GPU links (None: the GPU has none or cannot
    tell), temperature (NVIDIA's core, AMD's junction), why its clocks are held back (NVIDIA's
    clock event reasons) and what could not be read (`errors`: the call or file → reason)."""

    identity: GpuIdentity
    lost: bool = False
    reset_required: bool = False
    memory: MemoryHealth = MemoryHealth()
    pcie: PcieLink = PcieLink()
    links: list[InterconnectLink] | None = None
    temperature_celsius: float | None = None
    clock_event_reasons: list[str] | None = None
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Partition:
    """One partition of a GPU given to workloads as a device (NVIDIA MIG: GPU instance `gi`,
    compute instance `ci`, its `slot` the MIG device index)."""

    gpu: int
    slot: int
    gi: int
    ci: int
    uuid: str | None
    name: str | None

    @property
    def resource(self) -> str:
        """The finding resource `mig:<gpu>:<gi>:<ci>`."""
        return f"mig:{self.gpu}:{self.gi}:{self.ci}"


@dataclass(frozen=True)
class GpuProcess:
    """A process the GPU's driver sees on a GPU (gi/ci set when it runs in a partition)."""

    pid: int
    gpu: int
    gi: int | None = None
    ci: int | None = None
    used_memory_bytes: int | None = None


@dataclass
class GpuUse:
    """One GPU as workloads get it: its identity, the names a device plugin or CDI spec may
    give it (`minor`: NVIDIA's `/dev/nvidia<minor>`; AMD's render node), its partitions, its
    load and the processes on it (None: the driver cannot list them)."""

    identity: GpuIdentity
    minor: int | None = None
    # The device IDs a device plugin names the GPU by (NVIDIA's: its index and UUID; AMD's:
    # its PCI address alone, since its index would name an NVIDIA GPU's), and the device node
    # a CDI spec gives a container for it (NVIDIA's `/dev/nvidia<minor>`; None: none named).
    plugin_ids: tuple[str, ...] = ()
    device_node: str | None = None
    partitioned: bool = False
    partitions: list[Partition] = field(default_factory=list)
    utilization_percent: int | None = None
    # Recent utilization samples (timestamp in µs, percent), oldest first; None: not served.
    samples: list[tuple[int, float]] | None = None
    processes: list[GpuProcess] | None = None

    @property
    def index(self) -> int:
        return self.identity.index

    @property
    def uuid(self) -> str | None:
        return self.identity.uuid

    @property
    def resource(self) -> str:
        return self.identity.resource


@dataclass(frozen=True)
class VendorUses:
    """One vendor's GPUs as workloads get them, and the processes that hold the vendor's
    compute device but no GPU's own device node (`unplaced`, by pid: GPU processes whose GPU
    is unknown, such as AMD's holding `/dev/kfd` alone; None: the vendor has no such device,
    or its processes' descriptors cannot be read)."""

    gpus: list[GpuUse]
    unplaced: list[int] | None = None


class GpuBackend(Protocol):
    """One vendor's GPUs on one node."""

    vendor: Vendor

    def present(self) -> bool:
        """Whether the node shows this vendor's GPUs or driver (`gpu.backends` asks)."""
        ...

    def driver(self) -> DriverFacts:
        """The vendor's driver and library facts."""
        ...

    def gpus(self) -> list[GpuIdentity]:
        """The GPUs the driver sees, by index (none when it cannot tell)."""
        ...

    def health(self) -> list[GpuHealth]:
        """Each GPU's health: lost, memory, PCIe link, GPU-to-GPU links, temperature, clocks."""
        ...

    def uses(self) -> list[GpuUse]:
        """Each GPU as workloads get it: partitions, load, processes."""
        ...
