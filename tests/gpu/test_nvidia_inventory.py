"""NVIDIA's GPUs as workloads get them (NVML replayed from snapshots), in the GPU
interface's types; and the NVIDIA facts the pods, device_plugin and storage checks ask for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import SNAPSHOTS
from gpuprobe.gpu.backend import GpuIdentity, GpuProcess, Partition
from gpuprobe.gpu.nvidia.cuda_targets import (
    CudaTarget,
    DriverCuda,
    read_cuda_targets,
    read_driver_cuda,
)
from gpuprobe.gpu.nvidia.inventory import (
    any_mig_enabled,
    gpus_computing,
    read_uses,
    utilization_samples,
)
from gpuprobe.host import snapshot_host

UUID = "GPU-5f1c{:04x}-8e2b-4c1d-9a7e-{:012x}"
MIG_UUID = "MIG-7b3d{:04x}-1c9e-5a0f-8d42-{:012x}"
H100 = "NVIDIA H100 80GB HBM3"


def host(name: str):  # type: ignore[no-untyped-def]
    return snapshot_host(str(SNAPSHOTS / name))


def test_a_whole_gpu_with_its_load_and_processes() -> None:
    uses = read_uses(host("synthetic-k8s-gpus-by-uuid").nvml)
    assert len(uses) == 8
    first = uses[0]
    assert first.identity == GpuIdentity("nvidia", 0, UUID.format(0, 0), None, None)
    assert first.resource == f"gpu:0:{UUID.format(0, 0)}"
    assert (first.partitioned, first.partitions, first.utilization_percent) == (False, [], 97)
    assert first.processes == [GpuProcess(41000, 0, None, None, 536870912)]


def test_a_mig_enabled_gpu_is_handed_out_in_partitions() -> None:
    nvml = host("synthetic-k8s-mig-mixed").nvml
    gpu0 = read_uses(nvml)[0]
    assert gpu0.partitioned is True
    assert gpu0.partitions == [
        Partition(0, 0, 2, 0, MIG_UUID.format(0, 0), f"{H100} MIG 3g.40gb"),
        Partition(0, 1, 3, 0, MIG_UUID.format(1, 1), f"{H100} MIG 2g.20gb"),
        Partition(0, 2, 9, 0, MIG_UUID.format(2, 2), f"{H100} MIG 1g.10gb"),
        Partition(0, 3, 10, 0, MIG_UUID.format(3, 3), f"{H100} MIG 1g.10gb"),
    ]
    assert gpu0.partitions[0].resource == "mig:0:2:0"
    assert (gpu0.utilization_percent, gpu0.samples) == (None, None)
    assert gpu0.processes == [
        GpuProcess(44001, 0, 2, 0, 536870912),
        GpuProcess(44003, 0, 9, 0, 536870912),
    ]


def test_samples_are_read_from_the_value_union_oldest_first() -> None:
    samples = [
        {"timeStamp": 20, "sampleValue": {"uiVal": 40}},
        {"timeStamp": 10, "sampleValue": {"uiVal": 95}},
        {"timeStamp": None, "sampleValue": {"uiVal": 1}},
    ]
    assert utilization_samples([1, samples]) == [(10, 95.0), (20, 40.0)]
    assert utilization_samples("NotSupported") is None


def test_mig_mode_and_busy_gpus() -> None:
    assert any_mig_enabled(host("synthetic-k8s-mig-mixed")) is True
    assert any_mig_enabled(host("synthetic-k8s-gpus-by-uuid")) is False
    assert any_mig_enabled(host("synthetic-amd-mi300x-8gpu-healthy")) is None
    assert gpus_computing(host("synthetic-gpu-processes")) == [0, 3]
    assert gpus_computing(host("synthetic-h100-8gpu-idle")) == []


def test_a_graphics_process_alone_does_not_make_a_gpu_computing(tmp_path: Path) -> None:
    """A display server on GPU 0 (a graphics process, no compute one) leaves it free for
    the storage test, as before the readers moved."""
    copy = tmp_path / "snap"
    shutil.copytree(SNAPSHOTS / "synthetic-gpu-processes", copy, symlinks=True)
    nvml = json.loads((copy / "nvml.json").read_text())
    for call in nvml["calls"]:
        if call["fn"].startswith("nvmlDeviceGetComputeRunningProcesses") and call["args"] == [0]:
            call["ret"] = []
    graphics = {"pid": 1200, "usedGpuMemory": 16777216}
    nvml["calls"].append(
        {"fn": "nvmlDeviceGetGraphicsRunningProcesses", "args": [0], "ret": [graphics]}
    )
    (copy / "nvml.json").write_text(json.dumps(nvml))
    assert gpus_computing(snapshot_host(str(copy))) == [3]


def test_what_an_images_cuda_is_held_against() -> None:
    node = host("synthetic-k8s-gpus-by-uuid")
    assert read_driver_cuda(node) == DriverCuda("550.54.15", "12.4")
    assert read_cuda_targets(node)[0] == CudaTarget(
        0, UUID.format(0, 0), None, None, None, "00000000:18:00.0", (), H100
    )
    no_nvml = host("synthetic-amd-mi300x-8gpu-healthy")
    assert read_driver_cuda(no_nvml) == DriverCuda(None, None)
    assert read_cuda_targets(no_nvml) == []
