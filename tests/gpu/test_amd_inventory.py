"""AMD GPUs as workloads get them: identity from sysfs, render node, busy percent, and the
processes computing on them (holding the KFD and the GPU's render node)."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import SNAPSHOTS
from gpuprobe.gpu.amd.inventory import read_amd_uses, read_uses
from gpuprobe.gpu.amd.sysfs import amd_gpu_addresses
from gpuprobe.gpu.backend import GpuIdentity, GpuProcess
from gpuprobe.host import snapshot_host

WORKLOADS = SNAPSHOTS / "synthetic-amd-k8s-workloads"
PCI = ["0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0", "0000:9f:00.0"]


def unique_id(i: int) -> str:
    return f"{0x7C3A51D2E0B4F600 + i * 0x1111:016x}"


def test_each_gpu_with_its_render_node_load_and_processes() -> None:
    uses = read_uses(snapshot_host(str(WORKLOADS)))
    assert len(uses) == 8
    first = uses[0]
    assert first.identity == GpuIdentity("amd", 0, unique_id(0), PCI[0], "AMD Instinct MI300X")
    assert first.resource == f"gpu:0:{unique_id(0)}"
    assert (first.minor, first.utilization_percent, first.samples) == (128, 100, None)
    assert first.processes == [GpuProcess(61001, 0)]
    assert [u.minor for u in uses] == [128 + 8 * i for i in range(8)]
    assert [[p.pid for p in u.processes or []] for u in uses] == [
        [61001],
        [61001],
        [],
        [63001],
        [],
        [],
        [],
        [],
    ]
    assert all(not u.partitioned and u.partitions == [] for u in uses)


def test_a_process_holding_only_the_kfd_is_on_no_gpu() -> None:
    assert read_amd_uses(snapshot_host(str(WORKLOADS))).kfd_only == [7001]


def test_a_gpu_the_driver_did_not_take_is_given_to_no_workload() -> None:
    host = snapshot_host(str(SNAPSHOTS / "synthetic-amd-gpu-not-initialized"))
    uses = read_uses(host)
    assert [u.index for u in uses] == [0, 1, 2, 4, 5, 6, 7]
    assert len(amd_gpu_addresses(host.fs)) == 8
    # No process table was recorded: every GPU's processes are unknown.
    assert all(u.processes is None for u in uses)


def with_process(tmp_path: Path, pid: int, targets: list[str]) -> Path:
    """The workloads snapshot with one more process holding `targets`."""
    copy = tmp_path / "snap"
    if not copy.exists():
        shutil.copytree(WORKLOADS, copy, symlinks=True)
    fd = copy / f"rootfs/proc/{pid}/fd"
    fd.mkdir(parents=True, exist_ok=True)
    for n, target in enumerate(targets, start=len(list(fd.iterdir()))):
        (fd / str(n)).symlink_to(target)
    return copy


def test_a_monitor_holding_every_render_node_computes_on_none(tmp_path: Path) -> None:
    """amd-smi and the device metrics exporter open every render node to ask the driver,
    and no KFD: they are not work on the GPUs."""
    nodes = [f"/dev/dri/renderD{128 + 8 * i}" for i in range(8)]
    uses = read_amd_uses(snapshot_host(str(with_process(tmp_path, 9001, nodes))))
    assert [[p.pid for p in u.processes or []] for u in uses.gpus] == (
        [[61001], [61001], [], [63001]] + [[]] * 4
    )
    assert uses.kfd_only == [7001]


def test_a_kfd_process_on_a_render_node_of_no_known_gpu_is_on_no_gpu(tmp_path: Path) -> None:
    """A partition's render node (a partitioned MI300's `amdgpu_xcp` devices) names no GPU
    of the bus: the process still counts as a GPU process whose GPU is unknown."""
    copy = with_process(tmp_path, 7001, ["/dev/dri/renderD200"])
    assert read_amd_uses(snapshot_host(str(copy))).kfd_only == [7001]


def test_unreadable_descriptors_leave_the_processes_unknown(tmp_path: Path) -> None:
    copy = tmp_path / "snap"
    shutil.copytree(WORKLOADS, copy, symlinks=True)
    (copy / "rootfs/proc/1/fd").mkdir(parents=True, exist_ok=True)
    for link in (copy / "rootfs/proc/1/fd").iterdir():
        link.unlink()
    uses = read_amd_uses(snapshot_host(str(copy)))
    assert uses.kfd_only is None
    assert all(u.processes is None for u in uses.gpus)


def test_a_node_without_amd_gpus_has_none() -> None:
    host = snapshot_host(str(SNAPSHOTS / "synthetic-h100-8gpu-healthy"))
    assert read_amd_uses(host).gpus == []
    assert len(amd_gpu_addresses(host.fs)) == 0
