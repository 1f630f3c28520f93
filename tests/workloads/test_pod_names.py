"""Pods' names by UID and containers' names by ID, from the kubelet's log directories."""

from __future__ import annotations

from pathlib import Path

from gpuprobe.host.fs import HostFS
from gpuprobe.workloads.pods import PodName, read_pod_directory

UID = "6f8b0c2e-3d7a-4b1e-9c55-2a1f0e9d8c7b"
CID = "3f4e9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f"


def test_names_come_from_var_log_pods_and_var_log_containers(tmp_path: Path) -> None:
    pods = tmp_path / "var/log/pods"
    (pods / f"ml-team_llama-train-0_{UID}/trainer").mkdir(parents=True)
    (pods / "kube-system_kube-proxy-x7k2p_0c4dc5e3b1a1e9f5b6b2f2d3a9e8c7b1").mkdir()
    (pods / "not-a-pod-dir").mkdir()
    containers = tmp_path / "var/log/containers"
    containers.mkdir(parents=True)
    (containers / f"llama-train-0_ml-team_trainer-sidecar-{CID}.log").symlink_to(
        f"/var/log/pods/ml-team_llama-train-0_{UID}/trainer-sidecar/0.log"
    )
    (containers / "unrelated.log").touch()
    directory = read_pod_directory(HostFS(tmp_path))
    assert directory.pods == {
        UID: PodName("ml-team", "llama-train-0"),
        "0c4dc5e3b1a1e9f5b6b2f2d3a9e8c7b1": PodName("kube-system", "kube-proxy-x7k2p"),
    }
    assert directory.container(CID) == "trainer-sidecar"
    assert directory.container("f" * 64) == ""
    assert directory.container(None) == ""


def test_a_host_without_the_directories_names_nobody(tmp_path: Path) -> None:
    directory = read_pod_directory(HostFS(tmp_path))
    assert directory.pods == {} and directory.containers == {}
