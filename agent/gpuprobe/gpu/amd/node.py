"""Everything the checks read about a node's AMD GPUs, in one call."""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.gpu.amd.sysfs import AmdGpu, AmdgpuModule, read_gpus, read_module
from gpuprobe.host import Host
from gpuprobe.host.rocm_smi import NOT_ASKED, SmiProbe

ROCM_VERSION = "/opt/rocm/.info/version"


@dataclass(frozen=True)
class AmdNode:
    """The amdgpu module, the AMD GPUs on the bus, the host's ROCm release (where ROCm is
    installed on the host; images usually bring their own) and what ROCm SMI said."""

    module: AmdgpuModule
    gpus: list[AmdGpu]
    rocm_version: str | None
    smi: SmiProbe


def read_amd(host: Host, *, ask_library: bool = False) -> AmdNode:
    """The node's AMD facts. `ask_library` asks ROCm SMI (`host.rocm_smi`: once per agent,
    never on a snapshot) when the node has AMD GPUs."""
    gpus = read_gpus(host.fs)
    rocm = host.fs.try_read_text(ROCM_VERSION)
    smi = host.rocm_smi.probe() if ask_library and gpus else NOT_ASKED
    return AmdNode(read_module(host.fs), gpus, rocm.strip() or None if rocm else None, smi)
