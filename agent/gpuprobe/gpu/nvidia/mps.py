"""NVIDIA's MPS control daemon on the node (`nvidia-cuda-mps-control`), which GPU sharing with
MPS needs: the device plugin's MPS daemon starts it on every node it shares GPUs on
(k8s-device-plugin `cmd/mps-control-daemon`)."""

from __future__ import annotations

from gpuprobe.host import Host

MPS_CONTROL = "nvidia-cuda-mps-control"


def mps_control_daemons(host: Host) -> list[int]:
    """The pids of the MPS control daemons running on the node (by process name or argv[0])."""
    return [p.pid for p in host.processes().named(MPS_CONTROL)]
