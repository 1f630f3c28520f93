"""What one run of a check is given to judge: `CheckContext`.

The runner builds it for each run and hands it to the check's function (`run(ctx, config)`).
It carries the node (`host`, which the check hands to its readers) and the node's GPUs
(`gpus`, a `gpu.view.GpuView` built from the vendors' backends: the only way a check sees
GPUs); the kernel journal and the check's own state kept by the runner join it here, so
that a check sees the node only through what its context offers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gpuprobe.gpu.view import GpuView
from gpuprobe.host import Host


@dataclass(frozen=True)
class CheckContext:
    """One run of one check: the node it reads through its readers, and the GPU view the
    runner built for it (`view`; None: one is built from `host` when first asked)."""

    host: Host
    view: GpuView | None = None

    @cached_property
    def gpus(self) -> GpuView:
        """The node's GPUs: the runner's view, else one of `host`."""
        return self.view if self.view is not None else GpuView(self.host)
