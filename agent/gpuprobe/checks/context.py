"""What one run of a check is given to judge: `CheckContext`.

The runner builds it for each run and hands it to the check's function (`run(ctx, config)`).
Today it carries the node (`host`, which the check hands to its readers); the GPU view of the
round, the kernel journal and the check's own state kept by the runner join it here, so that
a check sees the node only through what its context offers.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.host import Host


@dataclass(frozen=True)
class CheckContext:
    """One run of one check: the node it reads through its readers."""

    host: Host
