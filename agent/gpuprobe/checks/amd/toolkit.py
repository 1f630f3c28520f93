"""AMD's part of the `toolkit` check: AMD GPUs need no runtime of their own on Kubernetes
(the AMD device plugin passes `/dev/kfd` and `/dev/dri/renderD<N>` into the container), so
where the bus shows AMD GPUs their device nodes are held against the host, and an engine's
`amd` runtime (AMD Container Toolkit), where one is configured, against its binary
(`gpuprobe.checks.amd.rules.container_findings`)."""

from __future__ import annotations

from gpuprobe.checks.amd import rules as amd
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.rules.vendor_part import Part
from gpuprobe.containers.engines import Engine
from gpuprobe.gpu.amd.access import read_container_access


class AmdToolkit:
    """AMD's rules of the `toolkit` check (`checks.rules.vendor_part.ToolkitRules`)."""

    def judge(self, ctx: CheckContext, engines: list[Engine]) -> Part | None:
        """`data.amd` and its findings; None without AMD GPUs on the bus."""
        gpus = ctx.gpus.amd.sysfs_gpus()
        if not gpus:
            return None
        data, findings = amd.container_findings(read_container_access(ctx.host, gpus, engines))
        return Part(_summary(data), findings, {"amd": data}, len(gpus))


def _summary(data: amd.AmdContainerData) -> str:
    nodes = len(data["render_nodes"])
    text = f"AMD GPUs: /dev/kfd {'present' if data['kfd'] else 'MISSING'}"
    text += f", {sum(data['render_nodes'].values())} of {nodes} render nodes"
    if data["runtimes"]:
        text += ", AMD runtime in " + ", ".join(str(r["engine"]) for r in data["runtimes"])
    return text
