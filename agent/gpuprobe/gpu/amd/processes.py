"""Which processes compute on AMD GPUs, from their file descriptors (`/proc/<pid>/fd/<n>`).

amdgpu lists no processes the way NVML does. A ROCm process opens the KFD (`/dev/kfd`, one
for the whole node) and the DRM render node of each GPU it uses (`/dev/dri/renderD<minor>`;
the GPU's `drm/renderD<minor>` in sysfs names which). A descriptor's link names the device
file it opened, so each process's links tell which GPUs it holds. Only a process that holds
the KFD computes: a render node held alone is a monitor's handle (amd-smi and the device
metrics exporter open every render node to ask the driver) or graphics work, and counts on
no GPU. A process that holds the KFD and no known GPU's render node is a GPU process whose
GPU the descriptors do not tell.

Reading another process's descriptors needs the node's PID namespace and the right to
trace it; where pid 1's descriptors cannot be listed (it always holds some), the agent
cannot see any and the processes are unknown (None), never "none".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.host.fs import HostFS

KFD = "/dev/kfd"
_RENDER_NODE = re.compile(r"^/dev/dri/renderD(\d+)$")


@dataclass(frozen=True)
class DeviceHandles:
    """One process's open AMD GPU device files: the render nodes' minors, and the KFD."""

    pid: int
    render_minors: frozenset[int]
    kfd: bool

    def computes_on(self, minor: int) -> bool:
        """Whether the process computes on the GPU of render node `minor`: it holds the KFD
        and that render node."""
        return self.kfd and minor in self.render_minors


def read_device_handles(fs: HostFS) -> list[DeviceHandles] | None:
    """Every process holding a render node or the KFD, by pid; None when the node's
    processes' descriptors cannot be read (no pid 1 in view, or its descriptors closed)."""
    pids = sorted(int(entry) for entry in fs.listdir("/proc") if entry.isdecimal())
    if 1 not in pids or not fs.listdir("/proc/1/fd"):
        return None
    found = []
    for pid in pids:
        minors: set[int] = set()
        kfd = False
        for fd in fs.listdir(f"/proc/{pid}/fd"):
            target = fs.readlink(f"/proc/{pid}/fd/{fd}")
            if target == KFD:
                kfd = True
            elif target and (render := _RENDER_NODE.match(target)):
                minors.add(int(render.group(1)))
        if minors or kfd:
            found.append(DeviceHandles(pid, frozenset(minors), kfd))
    return found


def render_minor(node: str | None) -> int | None:
    """The minor of a render node's name (`renderD128` → 128); None for anything else."""
    found = re.fullmatch(r"renderD(\d+)", node or "")
    return int(found.group(1)) if found else None
