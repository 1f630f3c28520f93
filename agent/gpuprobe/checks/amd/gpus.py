"""AMD's part of the `gpus` check: the AMD GPUs on the bus (`vendor: amd`, indexed in PCI
order on their own) with the amdgpu driver's facts, judged by `gpuprobe.checks.amd.rules`."""

from __future__ import annotations

from gpuprobe.checks.amd import rules as amd
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.rules.sections import GPUS, GpusConfig
from gpuprobe.checks.rules.vendor_part import Part
from gpuprobe.config import Config
from gpuprobe.gpu.amd.node import AmdNode, read_amd
from gpuprobe.report import Finding, Status


class AmdGpus:
    """AMD's rules of the `gpus` check (`checks.rules.vendor_part.GpusRules`)."""

    def count(self, ctx: CheckContext) -> int:
        """The AMD GPUs on the PCI bus."""
        return len(ctx.gpus.amd.bus())

    def judge(
        self, ctx: CheckContext, config: Config, idle_since: dict[str, float], others: int
    ) -> Part | None:
        """The AMD GPUs' facts and findings (None: the bus shows none); the expected count
        is theirs alone on a node without other GPUs."""
        node = read_amd(ctx.host)
        if not node.gpus:
            return None
        expected = config.section(GPUS, GpusConfig).expect
        findings = amd.count_findings(node.gpus, node.module)
        if not others and expected is not None and len(node.gpus) != expected:
            findings.insert(0, amd.expected_finding(len(node.gpus), expected))
        for gpu in node.gpus:
            findings += amd.health_findings(gpu, node.module)
        data = {
            "amd_gpus_on_pci_bus": len(node.gpus),
            "gpus_seen_by_amdgpu": sum(g.bound for g in node.gpus),
            "gpus": [amd.gpu_facts(g) for g in node.gpus],
        }
        # No driver: nothing tells how the GPUs are.
        floor = Status.OK if node.module.loaded else Status.UNKNOWN
        return Part(_summary(node, findings), findings, data, len(node.gpus), floor)


def _summary(node: AmdNode, findings: list[Finding]) -> str:
    seen = [g for g in node.gpus if g.bound]
    if not node.module.loaded:
        return (
            f"{len(node.gpus)} AMD GPUs on the PCI bus; amdgpu is not loaded, so their "
            "health is unknown (the driver check says why)"
        )
    names = sorted({g.name for g in seen})
    summary = f"{len(seen)} AMD GPU{'s' if len(seen) != 1 else ''}: {', '.join(names)}"
    if len(seen) < len(node.gpus):
        summary = f"amdgpu drives {len(seen)} of the {len(node.gpus)} AMD GPUs on the PCI bus"
    troubled = sorted({f.resource for f in findings if f.resource.startswith("gpu:")})
    if troubled:
        summary += f"; {len(troubled)} with findings"
    return summary
