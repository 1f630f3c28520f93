"""The NVIDIA readers the driver, mig and sharing checks judge, on replayed snapshots."""

from __future__ import annotations

from conftest import SNAPSHOTS
from gpuprobe.gpu.nvidia.driver import (
    DriverStack,
    KernelModule,
    NvmlVersions,
    library_versions,
    read_stack,
    read_versions,
)
from gpuprobe.gpu.nvidia.gpus import NvidiaGpuFacts
from gpuprobe.gpu.nvidia.mig import read_layouts
from gpuprobe.gpu.nvidia.modes import GpuModes, read_modes
from gpuprobe.host import Host, snapshot_host


def host(name: str) -> Host:
    return snapshot_host(str(SNAPSHOTS / name))


def test_a_healthy_driver_stack_and_its_versions() -> None:
    node = host("synthetic-h100-8gpu-healthy")
    assert read_stack(node) == DriverStack(8, KernelModule("550.54.15", open=True), None)
    assert read_versions(node) == NvmlVersions("550.54.15", cuda="12.4", nvml="12.550.54.15")


def test_a_library_that_differs_from_the_module_is_seen_in_the_stack_and_the_files() -> None:
    node = host("synthetic-library-mismatch")
    stack = read_stack(node)
    assert (stack.init_error, stack.module, stack.seen) == (
        "LibRmVersionMismatch",
        KernelModule("550.54.15", open=True),
        True,
    )
    assert library_versions(node) == ["550.90.07"]


def test_nvml_refusing_as_only_a_loaded_driver_does_shows_the_driver_without_the_bus() -> None:
    stack = read_stack(host("synthetic-nvml-no-permission-nvml-only"))
    assert stack == DriverStack(0, None, "NoPermission") and stack.seen


def test_a_node_without_nvidia_shows_no_stack() -> None:
    stack = read_stack(host("kvm-epyc-nogpu"))
    assert stack == DriverStack(0, None, "LibraryNotFound") and not stack.seen


def test_each_gpus_compute_and_mig_mode() -> None:
    modes = read_modes(host("synthetic-time-slicing-exclusive-gpu"))
    assert modes[:3] == [
        GpuModes(0, "GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000", 0, False),
        GpuModes(1, "GPU-5f1c0001-8e2b-4c1d-9a7e-000000000001", 0, False),
        GpuModes(2, "GPU-5f1c0002-8e2b-4c1d-9a7e-000000000002", 3, False),
    ]
    assert (modes[2].mode_name, modes[2].resource) == (
        "ExclusiveProcess",
        "gpu:2:GPU-5f1c0002-8e2b-4c1d-9a7e-000000000002",
    )


def test_a_mig_layout_groups_the_mig_devices_by_gpu_instance() -> None:
    (gpu,) = read_layouts(host("synthetic-mig-single"), 1)
    assert {k: v for k, v in gpu.items() if k != "gpu_instances"} == {
        "index": 0,
        "uuid": "GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000",
        "name": "NVIDIA H100 80GB HBM3",
        "mig_capable": True,
        "mig_mode_current": 1,
        "mig_mode_pending": 1,
        "mig_device_count": 7,
    }
    instances = gpu["gpu_instances"]
    assert [i["id"] for i in instances] == list(range(7, 14))
    assert instances[0] == {
        "id": 7,
        "profile": "1g.10gb",
        "placement": {"start": 0, "size": 1},
        "memory_bytes": 10468982784,
        "compute_instances": [
            {
                "id": 0,
                "mig_device_index": 0,
                "uuid": "MIG-7b3d0000-1c9e-5a0f-8d42-000000000000",
                "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                "profile": "1g.10gb",
                "memory_bytes": 10468982784,
                "multiprocessor_count": 16,
                "placement": {"start": 0, "size": 1},
                "resource": "mig:0:7:0",
            }
        ],
    }


def test_a_gpus_typed_facts_render_in_the_gpus_checks_key_order() -> None:
    """A GPU lost when opened says so right after its vendor and its place on the bus comes
    last (it has no identity of its own); one lost while read says so after its health."""
    opened = NvidiaGpuFacts(
        3,
        lost_on_open=True,
        nvml_errors={"nvmlDeviceGetHandleByIndex": "GpuIsLost"},
        bus_place="0000:9a:00.0",
    )
    assert list(opened.to_data().items()) == [
        ("index", 3),
        ("vendor", "nvidia"),
        ("lost", True),
        ("nvml_errors", {"nvmlDeviceGetHandleByIndex": "GpuIsLost"}),
        ("pci_bus_id", "0000:9a:00.0"),
    ]
    read = NvidiaGpuFacts(1, uuid="GPU-1", temperature_celsius=40, lost_while_read=True)
    assert list(read.to_data()) == ["index", "vendor", "uuid", "temperature_celsius", "lost"]
    assert (opened.lost, read.lost, NvidiaGpuFacts(0).lost) == (True, True, False)
    assert (opened.address, read.address) == ("0000:9a:00.0", None)
