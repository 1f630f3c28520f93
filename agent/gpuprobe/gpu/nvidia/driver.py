"""The NVIDIA driver on the host: the GPUs on the bus, the loaded kernel module
(`/proc/driver/nvidia/version`), NVML's start and its versions, the NVML libraries installed.

What shows an NVIDIA driver stack is read here once (`read_stack`), so that the `driver`
check, the backend registry and the helpers other checks share judge the same facts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuprobe.gpu import cuda
from gpuprobe.gpu.nvidia.device import driver_version
from gpuprobe.gpu.pci import nvidia_gpus
from gpuprobe.host import Host
from gpuprobe.host.fs import HostFS
from gpuprobe.host.nvml import NvmlError

MODULE_VERSION_FILE = "/proc/driver/nvidia/version"
# Where libnvidia-ml lies on Debian/Ubuntu, RHEL-likes, arm64, and in the GPU Operator's
# driver container (its root is mounted at /run/nvidia/driver on the host).
LIBRARY_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
    "/run/nvidia/driver/usr/lib/aarch64-linux-gnu",
    "/run/nvidia/driver/usr/lib64",
)
# nvmlInit errors that only a present driver gives: the library reached the loaded kernel
# module (LibRmVersionMismatch: it read the module's version; NoPermission: /dev/nvidiactl
# exists but is closed to the agent). The module loads only when it finds an NVIDIA GPU, so
# GPUs are there even when the PCI bus is not in view (a snapshot of nvml.json alone).
DRIVER_ANSWERED = frozenset({"LibRmVersionMismatch", "NoPermission"})
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")


@dataclass(frozen=True)
class KernelModule:
    """The loaded NVIDIA kernel module: its version, and whether it is the open one."""

    version: str
    open: bool


@dataclass(frozen=True)
class DriverStack:
    """What shows an NVIDIA driver on the node: its GPUs on the PCI bus, the loaded kernel
    module (None: not loaded) and NVML's init error (None: NVML started)."""

    gpus_on_bus: int
    module: KernelModule | None
    init_error: str | None

    @property
    def seen(self) -> bool:
        """Anything shows NVIDIA GPUs: on the bus, their module loaded, NVML up or answering."""
        error = self.init_error
        return (
            bool(self.gpus_on_bus)
            or self.module is not None
            or error is None
            or error in DRIVER_ANSWERED
        )


@dataclass(frozen=True)
class NvmlVersions:
    """The versions NVML tells once it started: the driver's (`550.54.15`; None with
    `driver_error`, the NVML error that kept it back), the CUDA version the driver runs
    (`12.4`) and NVML's own version as NVML gives it."""

    driver: str | None
    driver_error: str | None = None
    cuda: str | None = None
    nvml: Any = None


def read_stack(host: Host) -> DriverStack:
    """The bus, the kernel module and NVML's start; asks NVML nothing but its init outcome."""
    return DriverStack(len(nvidia_gpus(host.fs)), kernel_module(host.fs), host.nvml.init_error)


def read_versions(host: Host) -> NvmlVersions:
    """NVML's driver, CUDA and NVML versions (call only once NVML started). Without the
    driver's version nothing more is asked."""
    driver, error = _nvml_driver(host)
    if driver is None:
        return NvmlVersions(None, driver_error=error)
    cuda_version = None
    for fn in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        value = _optional(host, fn)
        if isinstance(value, int) and value > 0:
            cuda_version = cuda.cuda_version_text(value)
            break
    return NvmlVersions(driver, cuda=cuda_version, nvml=_optional(host, "nvmlSystemGetNVMLVersion"))


def _optional(host: Host, fn: str) -> Any:
    try:
        return host.nvml.call(fn)
    except NvmlError:
        return None


def nvml_driver_version(host: Host) -> str | None:
    """The driver version NVML reports; None when NVML did not start or cannot tell."""
    if host.nvml.init_error is not None:
        return None
    return _nvml_driver(host)[0] or None


def _nvml_driver(host: Host) -> tuple[str | None, str | None]:
    """The one ask of NVML for the driver's version: (the version as NVML gives it, None) or
    (None, the NVML error that kept it back)."""
    try:
        return driver_version(host.nvml), None
    except NvmlError as exc:
        return None, exc.name


def kernel_module(fs: HostFS) -> KernelModule | None:
    """The loaded module from /proc/driver/nvidia/version; None when it is not loaded.

    The first line reads `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ...` or
    `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build ...`.
    """
    text = fs.try_read_text(MODULE_VERSION_FILE)
    if not text:
        return None
    first = text.splitlines()[0]
    _, _, after = first.partition("Kernel Module")
    match = _VERSION.search(after)
    if match is None:
        return None
    return KernelModule(match.group(0), open=" Open " in first)


def library_versions(host: Host) -> list[str]:
    """The versions of every `libnvidia-ml.so.<version>` file in the usual library dirs."""
    found = set()
    for directory in LIBRARY_DIRS:
        for path in host.fs.glob(f"{directory}/libnvidia-ml.so.*.*"):
            suffix = path.rsplit("libnvidia-ml.so.", 1)[1]
            if _VERSION.fullmatch(suffix):
                found.add(suffix)
    return sorted(found, key=cuda.parse_version)
