"""Each NVIDIA GPU's compute mode and MIG mode: what GPU sharing (time-slicing, MPS) depends
on. NVML's compute modes (nvml.h `nvmlComputeMode_t`) keep their numbers and get their names."""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.gpu.nvidia.device import gpu_count, open_gpus
from gpuprobe.host import Host
from gpuprobe.report import gpu_resource

DEFAULT, EXCLUSIVE_THREAD, PROHIBITED, EXCLUSIVE_PROCESS = 0, 1, 2, 3
COMPUTE_MODES = {
    DEFAULT: "Default",
    EXCLUSIVE_THREAD: "ExclusiveThread",
    PROHIBITED: "Prohibited",
    EXCLUSIVE_PROCESS: "ExclusiveProcess",
}


@dataclass(frozen=True)
class GpuModes:
    """One GPU's modes; None where NVML cannot tell them."""

    index: int
    uuid: str | None
    compute_mode: int | None
    mig_enabled: bool | None

    @property
    def resource(self) -> str:
        """The finding resource `gpu:<index>:<uuid>`."""
        return gpu_resource(self.index, self.uuid)

    @property
    def mode_name(self) -> str:
        """The compute mode's name (`ExclusiveProcess`), `unknown` when NVML cannot tell."""
        if self.compute_mode is None:
            return "unknown"
        return COMPUTE_MODES.get(self.compute_mode, str(self.compute_mode))


def read_modes(host: Host) -> list[GpuModes]:
    """Every GPU NVML counts, with its compute and MIG mode (none without NVML)."""
    found = []
    for device in open_gpus(host.nvml, gpu_count(host.nvml) or 0):
        mig = device.get("nvmlDeviceGetMigMode")
        mode = device.get("nvmlDeviceGetComputeMode")
        found.append(
            GpuModes(
                device.index,
                device.uuid(),
                mode if isinstance(mode, int) and not isinstance(mode, bool) else None,
                (mig[0] == 1) if isinstance(mig, list) and mig else None,
            )
        )
    return found
