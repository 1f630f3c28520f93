"""AMD's GPUs as workloads get them, in the GPU interface's types (`gpu.backend.GpuUse`):
each GPU the amdgpu driver took, by its index in PCI address order, its render node (the
name a CDI spec or device plugin gives its `/dev/dri/renderD<minor>`), its load
(`gpu_busy_percent`) and the processes holding its render node (`gpu.amd.processes`).

The AMD GPU device plugin (ROCm/k8s-device-plugin) names each GPU by its PCI address (the
device directory under `/sys/module/amdgpu/drivers/pci:amdgpu/`), which the identity
carries. amdgpu keeps no per-process memory or sample buffer here: a process's
`used_memory_bytes` and the samples stay None.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.gpu.amd.processes import DeviceHandles, read_device_handles, render_minor
from gpuprobe.gpu.amd.sysfs import AmdGpu, read_gpus
from gpuprobe.gpu.backend import GpuIdentity, GpuProcess, GpuUse
from gpuprobe.host import Host


@dataclass(frozen=True)
class AmdUses:
    """The node's AMD GPUs as workloads get them, and the processes that hold the KFD and
    no GPU's render node (`kfd_only`, by pid: GPU processes whose GPU is unknown; None when
    the processes' descriptors cannot be read)."""

    gpus: list[GpuUse]
    kfd_only: list[int] | None


def read_amd_uses(host: Host) -> AmdUses:
    """Every AMD GPU the driver took, with its processes; /proc is read only when there is
    one."""
    bound = [gpu for gpu in read_gpus(host.fs) if gpu.bound]
    if not bound:
        return AmdUses([], [])
    handles = read_device_handles(host.fs)
    uses = [_use(gpu, handles) for gpu in bound]
    if handles is None:
        return AmdUses(uses, None)
    known = {use.minor for use in uses if use.minor is not None}
    return AmdUses(uses, [h.pid for h in handles if h.kfd and not h.render_minors & known])


def read_uses(host: Host) -> list[GpuUse]:
    """Every AMD GPU the driver took, as workloads get it."""
    return read_amd_uses(host).gpus


def _use(gpu: AmdGpu, handles: list[DeviceHandles] | None) -> GpuUse:
    identity = GpuIdentity("amd", gpu.index, gpu.unique_id, gpu.pci_address, gpu.name)
    minor = render_minor(gpu.render_node)
    ids = (gpu.pci_address,) if gpu.pci_address else ()
    use = GpuUse(identity, minor=minor, plugin_ids=ids, utilization_percent=gpu.busy_percent)
    if handles is not None and minor is not None:  # no render node: its processes unknown
        use.processes = [GpuProcess(h.pid, gpu.index) for h in handles if h.computes_on(minor)]
    return use
