"""The NVIDIA driver's files on the host: the loaded kernel module's version
(`/proc/driver/nvidia/version`) and the NVML libraries installed."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.gpu import cuda
from gpuprobe.host.fs import HostFS

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
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")


@dataclass(frozen=True)
class KernelModule:
    """The loaded NVIDIA kernel module: its version, and whether it is the open one."""

    version: str
    open: bool


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


def library_versions(fs: HostFS) -> list[str]:
    """The versions of every `libnvidia-ml.so.<version>` file in the usual library dirs."""
    found = set()
    for directory in LIBRARY_DIRS:
        for path in fs.glob(f"{directory}/libnvidia-ml.so.*.*"):
            suffix = path.rsplit("libnvidia-ml.so.", 1)[1]
            if _VERSION.fullmatch(suffix):
                found.add(suffix)
    return sorted(found, key=cuda.parse_version)
