"""NVIDIA's GPUs as workloads get them: the names the kubelet may use for each GPU and MIG
device, its load, and the processes NVML sees on it, in the GPU interface's types
(`gpuprobe.gpu.backend.GpuUse`).

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

A round asks NVML only what attribution needs: a GPU's identity here carries its index and
UUID; its PCI address and name are the `gpus` view's (`GpuBackend.gpus`) and stay None.
"""

from __future__ import annotations

from typing import Any

from gpuprobe.gpu.backend import GpuIdentity, GpuProcess, GpuUse, Partition
from gpuprobe.gpu.nvidia.device import Device, busy_gpus, gpu_count, open_gpus
from gpuprobe.gpu.nvidia.health import as_int, current_pending
from gpuprobe.host import Host
from gpuprobe.host.nvml import Nvml, NvmlError

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


def read_uses(nvml: Nvml) -> list[GpuUse]:
    """Every GPU NVML counts, as workloads get it (none when NVML is unavailable)."""
    count = gpu_count(nvml) or 0
    return [_use(nvml, device) for device in open_gpus(nvml, count)]


def _use(nvml: Nvml, device: Device) -> GpuUse:
    identity = GpuIdentity("nvidia", device.index, device.uuid(), None, None)
    minor = as_int(device.get("nvmlDeviceGetMinorNumber"))
    use = GpuUse(
        identity,
        minor=minor,
        plugin_ids=(str(device.index), identity.uuid) if identity.uuid else (str(device.index),),
        device_node=None if minor is None else f"/dev/nvidia{minor}",
    )
    use.partitioned = mig_enabled(device)
    if use.partitioned:
        use.partitions = mig_devices(nvml, device)
    else:
        use.utilization_percent = _utilization(device.get("nvmlDeviceGetUtilizationRates"))
        use.samples = utilization_samples(
            device.get("nvmlDeviceGetSamples", args=(NVML_GPU_UTILIZATION_SAMPLES, 0))
        )
    compute, graphics = device.get(*COMPUTE), device.get(*GRAPHICS)
    if isinstance(compute, list) or isinstance(graphics, list):
        entries = (compute if isinstance(compute, list) else []) + (
            graphics if isinstance(graphics, list) else []
        )
        use.processes = _processes(device.index, entries)
    return use


def mig_enabled(device: Device) -> bool:
    """Whether the GPU's MIG mode is on now (False when NVML cannot tell)."""
    mode = current_pending(device.get("nvmlDeviceGetMigMode"))
    return bool(mode and mode[0] == 1)


def any_mig_enabled(host: Host) -> bool | None:
    """Whether any GPU has MIG on now; None when NVML cannot count the GPUs."""
    nvml = host.nvml
    count = gpu_count(nvml)
    if count is None:
        return None
    modes = [Device(nvml, i).get("nvmlDeviceGetMigMode") for i in range(count)]
    return any(isinstance(m, list) and m[:1] == [1] for m in modes)


def gpus_computing(host: Host) -> list[int]:
    """The GPUs with a compute process on them, as NVML tells (none without NVML): the
    storage test waits for none (a display server's graphics process does not hold it)."""
    return busy_gpus(host.nvml, graphics=False)


def mig_devices(nvml: Nvml, gpu: Device) -> list[Partition]:
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
        found.append(Partition(gpu.index, slot, gi, ci, mig.uuid(), mig.name()))
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
