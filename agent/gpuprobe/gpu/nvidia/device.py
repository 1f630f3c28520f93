"""GPUs as NVML reports them, asked the way the field expects.

A query that a device does not support (NotSupported, on consumer GPUs or with MIG on)
leaves that fact out and is never a failure. A query that raises GpuIsLost marks the GPU
lost, ResetRequired marks it as needing a reset; any other error is kept, by function name,
so the check can show it in `data`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprobe.gpu.pci import normalize_bus_id
from gpuprobe.host.nvml import Nvml, NvmlError

# Errors that mean "this device does not have that": the fact is left out.
ABSENT = frozenset({"NotSupported", "FunctionNotFound", "NotFound", "InvalidArgument"})


@dataclass
class Device:
    """One GPU (or MIG device) as NVML answers about it.

    `ref` is the device's NVML reference: its index, or `"<gpu>:<mig index>"`.
    """

    nvml: Nvml
    ref: int | str
    lost: bool = False
    reset_required: bool = False
    errors: dict[str, str] = field(default_factory=dict)

    def get(self, *fns: str, args: tuple[Any, ...] = ()) -> Any:
        """The first of `fns` that answers for this device (older names after newer), or None.

        A GPU found lost is asked nothing more: each query of a lost GPU can take seconds.
        """
        if self.lost:
            return None
        for fn in fns:
            try:
                return self.nvml.call(fn, self.ref, *args)
            except NvmlError as exc:
                if exc.name in ABSENT:
                    continue
                self._failed(fn, exc.name)
                return None
        return None

    def _failed(self, fn: str, error: str) -> None:
        if error == "GpuIsLost":
            self.lost = True
        elif error == "ResetRequired":
            self.reset_required = True
        self.errors[fn] = error

    def uuid(self) -> str | None:
        """The device's UUID (`GPU-...`, `MIG-...`); None when NVML cannot tell it."""
        return text(self.get("nvmlDeviceGetUUID"))

    def name(self) -> str | None:
        """The product name (`NVIDIA H100 80GB HBM3`); None when NVML cannot tell it."""
        return text(self.get("nvmlDeviceGetName"))

    def pci_bus_id(self) -> str | None:
        """The PCI address as sysfs writes it (`0000:18:00.0`); None when NVML cannot tell it."""
        pci = self.get("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo")
        bus_id = text(pci.get("busId")) if isinstance(pci, dict) else None
        return normalize_bus_id(bus_id) if bus_id else None

    @property
    def index(self) -> int:
        """The GPU's index (a MIG device's parent GPU index)."""
        return self.ref if isinstance(self.ref, int) else int(str(self.ref).split(":")[0])


def gpu_count(nvml: Nvml) -> int | None:
    """How many GPUs NVML counts; None when NVML is unavailable or cannot count."""
    if nvml.init_error is not None:
        return None
    try:
        return int(nvml.call("nvmlDeviceGetCount"))
    except NvmlError:
        return None


def open_gpus(nvml: Nvml, count: int) -> list[Device]:
    """A Device for each GPU index below `count`; one whose handle fails is marked so."""
    devices = []
    for index in range(count):
        device = Device(nvml, index)
        try:
            nvml.call("nvmlDeviceGetHandleByIndex", index)
        except NvmlError as exc:
            device._failed("nvmlDeviceGetHandleByIndex", exc.name)
        devices.append(device)
    return devices


def driver_version(nvml: Nvml) -> str:
    """The driver version NVML reports (`550.54.15`); raises NvmlError."""
    return str(nvml.call("nvmlSystemGetDriverVersion")).strip()


def text(value: Any) -> str | None:
    """An NVML string answer, stripped; None when absent or blank."""
    if value is None:
        return None
    result = str(value).strip()
    return result or None


# A GPU's processes: compute, then graphics (newer function names before older).
COMPUTE_PROCESSES = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses",
)
GRAPHICS_PROCESSES = (
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses",
)


def busy_gpus(nvml: Nvml, graphics: bool = True) -> list[int]:
    """The GPUs with a compute or graphics process on them (active tests wait for none);
    `graphics=False`: a compute process only (a display server's does not count)."""
    kinds = (COMPUTE_PROCESSES, GRAPHICS_PROCESSES) if graphics else (COMPUTE_PROCESSES,)
    busy = []
    for device in open_gpus(nvml, gpu_count(nvml) or 0):
        if any(device.get(*fns) for fns in kinds):
            busy.append(device.index)
    return busy
