"""A process's pod and container from /proc/<pid>/cgroup, in the shapes real nodes write:
cgroup v1 and v2, the systemd and cgroupfs drivers, containerd, CRI-O and cri-dockerd."""

from __future__ import annotations

import pytest

from gpuprobe.workloads.cgroups import PodCgroup, parse_cgroup_file

UID = "6f8b0c2e-3d7a-4b1e-9c55-2a1f0e9d8c7b"
SYSTEMD_UID = UID.replace("-", "_")
CID = "3f4e9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f"

# cgroup v1 files list every hierarchy; the pod's path appears under each controller.
V1_SYSTEMD_CONTAINERD = "\n".join(
    [
        "12:hugetlb:/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope",
        "11:memory:/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope",
        "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope",
        "0::/",
    ]
)
V1_CGROUPFS_DOCKER = "\n".join(
    [
        f"11:devices:/kubepods/besteffort/pod{UID}/{CID}",
        f"10:memory:/kubepods/besteffort/pod{UID}/{CID}",
        f"1:name=systemd:/kubepods/besteffort/pod{UID}/{CID}",
    ]
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}"
            f".slice/cri-containerd-{CID}.scope\n",
            PodCgroup(UID, CID, "containerd", 2, "systemd"),
        ),
        (  # a Guaranteed pod: no QoS level
            f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/crio-{CID}.scope\n",
            PodCgroup(UID, CID, "cri-o", 2, "systemd"),
        ),
        (
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}"
            f".slice/docker-{CID}.scope\n",
            PodCgroup(UID, CID, "docker", 2, "systemd"),
        ),
        (f"0::/kubepods/burstable/pod{UID}/{CID}\n", PodCgroup(UID, CID, None, 2, "cgroupfs")),
        (
            f"0::/kubepods/pod{UID}/crio-{CID}\n",
            PodCgroup(UID, CID, "cri-o", 2, "cgroupfs"),
        ),
        (V1_SYSTEMD_CONTAINERD, PodCgroup(UID, CID, "containerd", 1, "systemd")),
        (V1_CGROUPFS_DOCKER, PodCgroup(UID, CID, None, 1, "cgroupfs")),
        (  # read from inside another cgroup namespace: relative to the reader's own cgroup
            f"0::/../../kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
            PodCgroup(UID, CID, "containerd", 2, "systemd"),
        ),
        (  # a kubelet run under a cgroup root (kind, k3s in a slice)
            "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
            f"kubelet-kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
            PodCgroup(UID, CID, "containerd", 2, "systemd"),
        ),
        (  # a static pod: its UID is the manifest's hash, 32 hex digits
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod0c4dc5e3b1a1e9f5b6b2f2d3a9e8c7b1.slice/cri-containerd-{CID}.scope",
            PodCgroup("0c4dc5e3b1a1e9f5b6b2f2d3a9e8c7b1", CID, "containerd", 2, "systemd"),
        ),
        (  # CRI-O's monitor is in the pod but is not the container
            f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/crio-conmon-{CID}.scope\n",
            PodCgroup(UID, None, None, 2, "systemd"),
        ),
    ],
)
def test_pod_and_container_from_real_cgroup_shapes(text: str, expected: PodCgroup) -> None:
    assert parse_cgroup_file(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/nvidia-persistenced.service\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        f"0::/system.slice/docker-{CID}.scope\n",  # a container no kubelet started
        "12:memory:/\n0::/init.scope\n",
        "",
        "garbage without colons",
    ],
)
def test_processes_outside_pods_have_no_pod(text: str) -> None:
    assert parse_cgroup_file(text) is None
