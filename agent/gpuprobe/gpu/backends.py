"""Which GPU backends a node has: one per vendor whose GPUs or driver it shows.

`VENDORS` is the registry: each entry makes a vendor's backend for a host, and a backend
says itself whether the node shows its vendor (`present`). A node with GPUs of both vendors
gets both, NVIDIA's first; a node with none gets none.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from gpuprobe.gpu.amd.backend import AmdBackend
from gpuprobe.gpu.backend import GpuBackend, Vendor
from gpuprobe.gpu.nvidia.backend import NvidiaBackend
from gpuprobe.host import Host

VENDORS: tuple[Callable[[Host], GpuBackend], ...] = (NvidiaBackend, AmdBackend)


def all_backends(host: Host) -> list[GpuBackend]:
    """Every vendor's backend, in `VENDORS` order, whether or not the node shows it (one
    that does not has no GPUs to give)."""
    return [make(host) for make in VENDORS]


def node_backends(host: Host, skip: Collection[Vendor] = ()) -> list[GpuBackend]:
    """The backends of the vendors this node shows, in `VENDORS` order; a vendor in `skip`
    is not asked whether the node shows it."""
    backends = [make(host) for make in VENDORS]
    return [b for b in backends if b.vendor not in skip and b.present()]
