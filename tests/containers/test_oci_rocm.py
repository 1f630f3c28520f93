"""A container given /dev/kfd is a ROCm container: the pods check counts its pod as a GPU pod."""

from __future__ import annotations

import json
from pathlib import Path

from gpuprobe.containers import oci
from gpuprobe.host import live_host

ID = "7c" * 32


def write_spec(root: Path, devices: list[dict[str, object]]) -> None:
    """A containerd task's config.json as the CRI plugin writes it (trimmed to what is read):
    the AMD device plugin's device specs land in `linux.devices`."""
    task = root / oci.CONTAINERD_TASKS.lstrip("/") / ID
    task.mkdir(parents=True)
    spec = {
        "ociVersion": "1.1.0",
        "process": {"env": ["PATH=/usr/bin", "HIP_VISIBLE_DEVICES=0"]},
        "annotations": {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.sandbox-namespace": "ml-team",
            "io.kubernetes.cri.sandbox-name": "llama-rocm-0",
            "io.kubernetes.cri.sandbox-uid": "0b1e2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d",
            "io.kubernetes.cri.container-name": "trainer",
            "io.kubernetes.cri.image-name": "docker.io/rocm/pytorch:rocm6.3_ubuntu22.04_py3.10",
        },
        "linux": {"devices": devices},
    }
    (task / "config.json").write_text(json.dumps(spec))


def test_a_container_given_dev_kfd_runs_rocm(tmp_path: Path) -> None:
    write_spec(
        tmp_path,
        [
            {"path": "/dev/kfd", "type": "c", "major": 235, "minor": 0, "fileMode": 438},
            {"path": "/dev/dri/renderD128", "type": "c", "major": 226, "minor": 128},
        ],
    )
    [spec] = oci.read_specs(live_host(str(tmp_path)))
    assert spec.rocm_devices is True
    assert spec.pod is not None and (spec.pod.namespace, spec.pod.pod) == (
        "ml-team",
        "llama-rocm-0",
    )
    assert spec.gpu_minors == ()


def test_a_container_without_dev_kfd_does_not(tmp_path: Path) -> None:
    write_spec(tmp_path, [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}])
    [spec] = oci.read_specs(live_host(str(tmp_path)))
    assert spec.rocm_devices is False
