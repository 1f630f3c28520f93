"""AMD's part of the GPUs as workloads get them: beside each GPU's render-node processes
(the backend's `uses()`), the processes that hold `/dev/kfd` and no GPU's render node, read
in the same pass over the processes' descriptors (`gpuprobe.gpu.amd.inventory`)."""

from __future__ import annotations

from gpuprobe.checks.context import CheckContext
from gpuprobe.gpu.amd.inventory import read_amd_uses
from gpuprobe.gpu.backend import VendorUses


class AmdWorkloads:
    """AMD's rules of the GPUs' uses (`checks.rules.vendor_part.WorkloadsRules`)."""

    def uses(self, ctx: CheckContext) -> VendorUses:
        """AMD's GPUs with their processes, and the KFD-only processes (None without a GPU
        amdgpu drives, or when the descriptors cannot be read)."""
        uses = read_amd_uses(ctx.host)
        return VendorUses(uses.gpus, uses.kfd_only if uses.gpus else None)
