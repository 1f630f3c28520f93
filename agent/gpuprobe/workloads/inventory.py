"""The GPUs and MIG devices a workload can be given, with the names the kubelet may use for
them, and the processes NVML sees on each.

A device plugin names a GPU by its UUID or its index (its `DEVICE_ID_STRATEGY`), a MIG device
by its MIG UUID or `<gpu index>:<mig index>`; a CDI spec names a GPU's device node
`/dev/nvidia<minor>`. MIG devices are found the way the device plugin finds them: each slot
below `nvmlDeviceGetMaxMigDeviceCount` asked with `nvmlDeviceGetMigDeviceHandleByIndex`.
Processes come from `nvmlDeviceGetComputeRunningProcesses` and
`nvmlDeviceGetGraphicsRunningProcesses`; on a MIG-enabled GPU each names the GPU and compute
instance it runs in. Utilization comes from `nvmlDeviceGetUtilizationRates` (now) and
`nvmlDeviceGetSamples(gpu, NVML_GPU_UTILIZATION_SAMPLES, 0)`: the driver's buffer of recent
GPU-utilization samples (`(value type, [{"timeStamp": µs, "sampleValue": union}])`), always
asked from timestamp 0 so that a replay finds the same call; the caller keeps what is new.
MIG-enabled GPUs serve neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprobe.gpu.nvidia.device import Device, gpu_count, open_gpus, text
from gpuprobe.gpu.nvidia.health import as_int, current_pending
from gpuprobe.host.nvml import Nvml, NvmlError
from gpuprobe.report import gpu_resource

# NVML's "no instance" (0xFFFFFFFF) in a process entry's gpuInstanceId / computeInstanceId.
NO_INSTANCE = 0xFFFFFFFF
NVML_GPU_UTILIZATION_SAMPLES = 1
# nvmlValueType_t: which member of the sample's value union holds the value.
VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
MIG_SLOT_LIMIT = 64
COMPUTE = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
)
GRAPHICS = (
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
)


@dataclass(frozen=True)
class MigDev:
    """One MIG device: its slot (MIG index), GPU and compute instance, UUID and name."""

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
    """A process NVML sees on a GPU (gi/ci set when it runs in a MIG device)."""

    pid: int
    gpu: int
    gi: int | None = None
    ci: int | None = None
    used_memory_bytes: int | None = None


@dataclass
class Gpu:
    """One GPU: index, UUID, device-node minor, MIG devices, load and processes."""

    index: int
    uuid: str | None
    minor: int | None = None
    mig_enabled: bool = False
    migs: list[MigDev] = field(default_factory=list)
    utilization_percent: int | None = None
    # Recent utilization samples (timestamp in µs, percent), oldest first; None: not served.
    samples: list[tuple[int, float]] | None = None
    processes: list[GpuProcess] | None = None  # None: NVML cannot list them

    @property
    def resource(self) -> str:
        """The finding resource `gpu:<index>:<uuid>`."""
        return gpu_resource(self.index, self.uuid)


def read_inventory(nvml: Nvml) -> list[Gpu]:
    """Every GPU NVML counts (none when NVML is unavailable)."""
    count = gpu_count(nvml) or 0
    return [_gpu(nvml, device) for device in open_gpus(nvml, count)]


def _gpu(nvml: Nvml, device: Device) -> Gpu:
    gpu = Gpu(device.index, text(device.get("nvmlDeviceGetUUID")))
    gpu.minor = as_int(device.get("nvmlDeviceGetMinorNumber"))
    mode = current_pending(device.get("nvmlDeviceGetMigMode"))
    gpu.mig_enabled = bool(mode and mode[0] == 1)
    if gpu.mig_enabled:
        gpu.migs = mig_devices(nvml, device)
    else:
        gpu.utilization_percent = _utilization(device.get("nvmlDeviceGetUtilizationRates"))
        gpu.samples = utilization_samples(
            device.get("nvmlDeviceGetSamples", args=(NVML_GPU_UTILIZATION_SAMPLES, 0))
        )
    compute, graphics = device.get(*COMPUTE), device.get(*GRAPHICS)
    if isinstance(compute, list) or isinstance(graphics, list):
        entries = (compute if isinstance(compute, list) else []) + (
            graphics if isinstance(graphics, list) else []
        )
        gpu.processes = _processes(device.index, entries)
    return gpu


def mig_devices(nvml: Nvml, gpu: Device) -> list[MigDev]:
    """The MIG devices of a MIG-enabled GPU, found as the device plugin finds them."""
    slots = as_int(gpu.get("nvmlDeviceGetMaxMigDeviceCount")) or 7
    found = []
    for slot in range(min(slots, MIG_SLOT_LIMIT)):
        try:
            nvml.call("nvmlDeviceGetMigDeviceHandleByIndex", gpu.index, slot)
        except NvmlError:
            continue
        mig = Device(nvml, f"{gpu.index}:{slot}")
        gi = as_int(mig.get("nvmlDeviceGetGpuInstanceId"))
        ci = as_int(mig.get("nvmlDeviceGetComputeInstanceId"))
        if gi is None or ci is None:
            continue
        uuid, name = text(mig.get("nvmlDeviceGetUUID")), text(mig.get("nvmlDeviceGetName"))
        found.append(MigDev(gpu.index, slot, gi, ci, uuid, name))
    return found


def utilization_samples(value: Any) -> list[tuple[int, float]] | None:
    """nvmlDeviceGetSamples' answer as (timestamp µs, percent) pairs, oldest first."""
    if not isinstance(value, list | tuple) or len(value) != 2 or not isinstance(value[1], list):
        return None
    member = VALUE_FIELDS.get(as_int(value[0]) or 0, "uiVal")
    found = []
    for sample in value[1]:
        if not isinstance(sample, dict) or (stamp := as_int(sample.get("timeStamp"))) is None:
            continue
        union = sample.get("sampleValue")
        raw = union.get(member) if isinstance(union, dict) else union
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            found.append((stamp, float(raw)))
    return sorted(found)


def _utilization(value: Any) -> int | None:
    if isinstance(value, dict):
        return as_int(value.get("gpu"))
    if isinstance(value, list | tuple) and value:
        return as_int(value[0])
    return None


def _processes(gpu: int, entries: list[Any]) -> list[GpuProcess]:
    found: dict[int, GpuProcess] = {}
    for entry in entries:
        if not isinstance(entry, dict) or (pid := as_int(entry.get("pid"))) is None:
            continue
        gi, ci = as_int(entry.get("gpuInstanceId")), as_int(entry.get("computeInstanceId"))
        found.setdefault(
            pid,
            GpuProcess(
                pid,
                gpu,
                None if gi in (None, NO_INSTANCE) else gi,
                None if ci in (None, NO_INSTANCE) else ci,
                as_int(entry.get("usedGpuMemory")),
            ),
        )
    return [found[pid] for pid in sorted(found)]
