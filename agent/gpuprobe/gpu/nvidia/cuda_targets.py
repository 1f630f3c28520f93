"""What an image's CUDA requirement is held against on an NVIDIA node: the driver's version
and the CUDA version it supports, and each GPU's brand, compute capability, bus, MIG devices
and name (the facts the NVIDIA container runtime's `NVIDIA_REQUIRE_*` rules name).

`nvmlSystemGetCudaDriverVersion` encodes the CUDA version as `1000 * major + 10 * minor`;
`nvmlDeviceGetBrand` answers an `nvmlBrandType_t` number (the caller names it).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from gpuprobe.gpu import cuda
from gpuprobe.gpu.nvidia.device import Device, gpu_count, text
from gpuprobe.gpu.nvidia.health import as_int
from gpuprobe.gpu.nvidia.inventory import mig_devices, mig_enabled
from gpuprobe.host import Host
from gpuprobe.host.nvml import NvmlError


@dataclass(frozen=True)
class DriverCuda:
    """The driver's version (`550.54.15`) and the CUDA version it supports (`12.4`); None
    where NVML cannot tell."""

    version: str | None
    cuda: str | None


@dataclass(frozen=True)
class CudaTarget:
    """One GPU as requirement rules see it: its `nvmlBrandType_t`, compute capability
    (`9.0`), PCI bus id as NVML writes it, and its MIG devices' UUIDs."""

    index: int
    uuid: str | None
    minor: int | None
    brand: int | None
    capability: str | None
    bus_id: str | None
    mig_uuids: tuple[str, ...]
    name: str | None


def read_driver_cuda(host: Host) -> DriverCuda:
    """The driver's versions (both None when NVML cannot start)."""
    nvml = host.nvml
    if nvml.init_error is not None:
        return DriverCuda(None, None)
    version = cuda_text = None
    with contextlib.suppress(NvmlError):
        version = text(nvml.call("nvmlSystemGetDriverVersion"))
    for fn in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        try:
            encoded = as_int(nvml.call(fn))
        except NvmlError:
            continue
        if encoded:
            cuda_text = cuda.cuda_version_text(encoded)
            break
    return DriverCuda(version, cuda_text)


def read_cuda_targets(host: Host) -> list[CudaTarget]:
    """Every GPU NVML counts (none when NVML is unavailable)."""
    nvml = host.nvml
    found = []
    for index in range(gpu_count(nvml) or 0):
        device = Device(nvml, index)
        brand = as_int(device.get("nvmlDeviceGetBrand"))
        capability = device.get("nvmlDeviceGetCudaComputeCapability")
        arch = None
        if isinstance(capability, list | tuple) and len(capability) == 2:
            arch = f"{capability[0]}.{capability[1]}"
        pci = device.get("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo")
        bus = text(pci.get("busId")) if isinstance(pci, dict) else None
        migs = mig_devices(nvml, device) if mig_enabled(device) else []
        uuid = device.uuid()
        minor = as_int(device.get("nvmlDeviceGetMinorNumber"))
        mig_uuids = tuple(m.uuid for m in migs if m.uuid)
        found.append(CudaTarget(index, uuid, minor, brand, arch, bus, mig_uuids, device.name()))
    return found
