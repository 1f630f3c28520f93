"""AMD's part of the `driver` check: the amdgpu module, the AMD GPUs on the bus, the host's
ROCm release and what ROCm SMI said, under `data.amd`, judged by `gpuprobe.checks.amd.rules`;
on a node whose GPUs are all AMD's, amdgpu's version is the check's `driver_version`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprobe.checks.amd import rules as amd
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.rules.vendor_part import Part
from gpuprobe.config import Config
from gpuprobe.gpu.amd.node import AmdNode, read_amd


class AmdDriver:
    """AMD's rules of the `driver` check (`checks.rules.vendor_part.DriverRules`)."""

    def read(self, ctx: CheckContext) -> AmdDriverReading:
        """The node's AMD facts (ROCm SMI asked, once per agent, where AMD GPUs are)."""
        return AmdDriverReading(read_amd(ctx.host, ask_library=True))


@dataclass(frozen=True)
class AmdDriverReading:
    """The amdgpu module and the AMD GPUs, read once for the check's run."""

    node: AmdNode

    def facts(self, data: dict[str, Any]) -> None:
        """`data.amd` when AMD GPUs are on the bus."""
        node = self.node
        if node.gpus:
            data["amd"] = amd.driver_data(node.module, node.gpus, node.rocm_version, node.smi)

    def judge(self, config: Config, data: dict[str, Any], first: bool) -> Part:
        """amdgpu loaded and driving every AMD GPU on the bus."""
        node = self.node
        if first:
            data["driver_version"] = node.module.driver_version
        findings = amd.driver_findings(node.module, node.gpus)
        return Part(amd.driver_summary(node.module, node.gpus), findings, gpus=len(node.gpus))
