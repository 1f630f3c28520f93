"""A process's pod and container, from its cgroup (`/proc/<pid>/cgroup`).

The kubelet places every container under a pod cgroup named after the pod's UID, and the
runtime names the container's own cgroup after its ID. The shapes, by cgroup driver:

    systemd:  /kubepods.slice/kubepods-burstable.slice/
                kubepods-burstable-pod6f8b0c2e_3d7a_4b1e_9c55_2a1f0e9d8c7b.slice/
                cri-containerd-<64 hex>.scope        (CRI-O: crio-<id>.scope, cri-dockerd:
                                                      docker-<id>.scope)
    cgroupfs: /kubepods/burstable/pod6f8b0c2e-3d7a-4b1e-9c55-2a1f0e9d8c7b/<64 hex>
                                                     (CRI-O: crio-<id>)

Guaranteed pods sit directly under kubepods (no QoS level). cgroup v1 files have one line per
hierarchy (`12:memory:/kubepods/...`), v2 files the single line `0::/kubepods.slice/...`. A
reader inside its own cgroup namespace sees other pods' paths relative to its own cgroup
(`0::/../../kubepods-besteffort-pod<uid>.slice/...`), and a kubelet run under a cgroup root
adds a prefix (`/kubelet.slice/kubelet-kubepods.slice/...`), so the path is searched for the
pod's segment rather than anchored. Static pods' UIDs are 32 hex digits without dashes.
CRI-O's monitor (`crio-conmon-<id>.scope`) is not the container.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
_POD_SEGMENT = re.compile(rf"^(?:[a-z]+-)*pod(?P<uid>{_UID})(?:\.slice)?$")
_CONTAINER_SEGMENT = re.compile(
    r"^(?:(?P<prefix>cri-containerd|crio|docker)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$"
)
RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker"}


@dataclass(frozen=True)
class PodCgroup:
    """Where a process sits: its pod's UID and, when it is in a container's cgroup, the
    container's ID and the runtime that named it (containerd, cri-o, docker; None for the
    cgroupfs driver's bare IDs, which containerd and Docker both write)."""

    pod_uid: str
    container_id: str | None
    runtime: str | None
    cgroup_version: int
    driver: str  # "systemd" or "cgroupfs"


def parse_cgroup_file(text: str) -> PodCgroup | None:
    """The pod a process belongs to, from its /proc/<pid>/cgroup; None for a process
    outside every pod (a host daemon, a container no kubelet started)."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        found = parse_cgroup_path(path)
        if found is not None:
            version = 2 if hierarchy == "0" and controllers == "" else 1
            return PodCgroup(found[0], found[1], found[2], version, found[3])
    return None


def parse_cgroup_path(path: str) -> tuple[str, str | None, str | None, str] | None:
    """(pod UID, container ID, runtime, driver) from one cgroup path, or None."""
    segments = [s for s in path.strip().split("/") if s]
    for i, segment in enumerate(segments):
        pod = _POD_SEGMENT.match(segment)
        if pod is None:
            continue
        driver = "systemd" if segment.endswith(".slice") else "cgroupfs"
        uid = pod.group("uid").replace("_", "-")
        if i + 1 < len(segments):
            container = _CONTAINER_SEGMENT.match(segments[i + 1])
            if container is not None:
                runtime = RUNTIMES.get(container.group("prefix") or "")
                return uid, container.group("id"), runtime, driver
        return uid, None, None, driver
    return None
