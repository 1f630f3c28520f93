"""The GPU backends on replayed snapshots: NVIDIA's through NVML, AMD's through amdgpu's
sysfs files, and the registry that gives a node the backends of the vendors it shows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import SNAPSHOTS
from gpuprobe.gpu.amd.backend import AmdBackend
from gpuprobe.gpu.backend import (
    DriverFacts,
    GpuBackend,
    GpuHealth,
    GpuIdentity,
    GpuProcess,
    GpuUse,
    InterconnectLink,
    MemoryHealth,
    Partition,
    PcieLink,
)
from gpuprobe.gpu.backends import node_backends
from gpuprobe.gpu.nvidia.backend import NvidiaBackend
from gpuprobe.host import snapshot_host

H100_ADDRESSES = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
]
MI300X_ADDRESSES = [
    "0000:0c:00.0",
    "0000:22:00.0",
    "0000:38:00.0",
    "0000:5c:00.0",
    "0000:9f:00.0",
    "0000:af:00.0",
    "0000:bf:00.0",
    "0000:df:00.0",
]


def h100_uuid(index: int) -> str:
    return f"GPU-5f1c{index:04x}-8e2b-4c1d-9a7e-{index:012x}"


def mi300x_unique_id(index: int) -> str:
    return f"{0x7C3A51D2E0B4F600 + index * 0x1111:016x}"


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """The healthy HGX H100 node with two MI300X GPUs (and amdgpu) added from an AMD node."""
    root = tmp_path / "mixed"
    shutil.copytree(SNAPSHOTS / "synthetic-h100-8gpu-healthy", root, symlinks=True)
    amd = SNAPSHOTS / "synthetic-amd-xgmi-link-down" / "rootfs"
    for address in MI300X_ADDRESSES[:2]:
        shutil.copytree(amd / f"sys/bus/pci/devices/{address}",
                        root / f"rootfs/sys/bus/pci/devices/{address}", symlinks=True)  # fmt: skip
    shutil.copytree(amd / "sys/module/amdgpu", root / "rootfs/sys/module/amdgpu")
    return root


def test_nvidias_backend_names_each_gpu_and_the_driver_as_nvml_tells_them() -> None:
    backend = NvidiaBackend(snapshot_host(str(SNAPSHOTS / "synthetic-h100-8gpu-healthy")))
    assert backend.present()
    assert backend.driver() == DriverFacts(
        "nvidia", "550.54.15", library_error=None, library_version="550.54.15"
    )
    assert backend.gpus() == [
        GpuIdentity("nvidia", i, h100_uuid(i), address, "NVIDIA H100 80GB HBM3")
        for i, address in enumerate(H100_ADDRESSES)
    ]
    assert [d.address for d in backend.bus_gpus()] == H100_ADDRESSES
    assert backend.count() == 8
    assert backend.gpus()[3].resource == f"gpu:3:{h100_uuid(3)}"


def test_nvidias_backend_gives_workloads_each_gpu_with_its_mig_devices_and_processes() -> None:
    uses = NvidiaBackend(snapshot_host(str(SNAPSHOTS / "synthetic-k8s-mig-mixed"))).uses()
    assert len(uses) == 8
    first = uses[0]
    assert (first.index, first.uuid, first.partitioned) == (0, h100_uuid(0), True)
    # NVIDIA's device plugin names a GPU by index and UUID (no minor number was recorded here,
    # so no CDI device node names it).
    assert (first.plugin_ids, first.minor, first.device_node) == (("0", h100_uuid(0)), None, None)
    assert first.partitions[:2] == [
        Partition(0, 0, 2, 0, "MIG-7b3d0000-1c9e-5a0f-8d42-000000000000",
                  "NVIDIA H100 80GB HBM3 MIG 3g.40gb"),
        Partition(0, 1, 3, 0, "MIG-7b3d0001-1c9e-5a0f-8d42-000000000001",
                  "NVIDIA H100 80GB HBM3 MIG 2g.20gb"),
    ]  # fmt: skip
    assert [p.resource for p in first.partitions] == [
        "mig:0:2:0",
        "mig:0:3:0",
        "mig:0:9:0",
        "mig:0:10:0",
    ]
    assert first.processes == [
        GpuProcess(44001, 0, 2, 0, 536870912),
        GpuProcess(44003, 0, 9, 0, 536870912),
    ]


def test_nvidias_backend_names_each_gpus_cdi_device_node_by_its_minor() -> None:
    """The DRA snapshot records each GPU's minor number (i for GPU i)."""
    uses = NvidiaBackend(snapshot_host(str(SNAPSHOTS / "synthetic-k8s-dra-claims"))).uses()
    assert [(u.minor, u.device_node) for u in uses[:2]] == [
        (0, "/dev/nvidia0"),
        (1, "/dev/nvidia1"),
    ]


def test_nvidias_backend_without_a_loaded_driver_tells_why_and_lists_no_gpu() -> None:
    backend = NvidiaBackend(snapshot_host(str(SNAPSHOTS / "synthetic-driver-not-loaded")))
    assert backend.present()  # its GPUs are on the bus
    assert backend.driver() == DriverFacts("nvidia", None, library_error="DriverNotLoaded")
    assert (backend.count(), backend.gpus(), backend.uses()) == (None, [], [])


def test_amds_backend_reads_the_mi300x_node_from_amdgpus_sysfs_files() -> None:
    backend = AmdBackend(snapshot_host(str(SNAPSHOTS / "synthetic-amd-mi300x-8gpu-healthy")))
    assert backend.present()
    assert backend.driver() == DriverFacts("amd", "6.10.5")
    identities = [
        GpuIdentity("amd", i, mi300x_unique_id(i), address, "AMD Instinct MI300X")
        for i, address in enumerate(MI300X_ADDRESSES)
    ]
    assert backend.gpus() == identities
    assert backend.gpus()[1].resource == f"gpu:1:{mi300x_unique_id(1)}"
    uses = backend.uses()
    # No process table was recorded: the processes are unknown.
    # AMD's device plugin names a GPU by its PCI address alone; no CDI device node is known.
    assert uses[0] == GpuUse(
        identities[0], minor=128, plugin_ids=(MI300X_ADDRESSES[0],), utilization_percent=100
    )
    assert [u.minor for u in uses] == list(range(128, 192, 8))


def test_amds_backend_without_amdgpu_names_the_gpus_by_their_pci_address() -> None:
    backend = AmdBackend(snapshot_host(str(SNAPSHOTS / "synthetic-amd-driver-not-loaded")))
    assert backend.present()
    assert backend.driver() == DriverFacts("amd", None)
    gpus = backend.gpus()
    assert [(g.uuid, g.pci_address) for g in gpus] == [(None, a) for a in MI300X_ADDRESSES]
    assert gpus[0].resource == "gpu:0:0000:0c:00.0"
    assert backend.uses() == []  # without the driver no workload can be given one


def troubled(backend: GpuBackend) -> list[GpuHealth]:
    """The GPUs whose health differs from a healthy GPU's in the synthetic snapshots."""
    return [
        h
        for h in backend.health()
        if h.lost
        or h.errors
        or h.memory.uncorrectable_errors
        or h.memory.retired
        or h.memory.retirement_pending
        or (h.pcie.width or 0) < (h.pcie.width_max or 0)
        or any(not link.up for link in h.links or [])
    ]


def test_nvidias_backend_tells_a_healthy_gpus_health() -> None:
    backend = NvidiaBackend(snapshot_host(str(SNAPSHOTS / "synthetic-h100-8gpu-healthy")))
    first = backend.health()[0]
    assert first == GpuHealth(
        GpuIdentity("nvidia", 0, h100_uuid(0), H100_ADDRESSES[0], "NVIDIA H100 80GB HBM3"),
        memory=MemoryHealth(0, 0, 0, False, False),
        pcie=PcieLink(generation=5, generation_max=5, width=16, width_max=16),
        links=[InterconnectLink("nvlink", link, True) for link in range(18)],
        temperature_celsius=first.temperature_celsius,
        clock_event_reasons=first.clock_event_reasons,
    )
    assert troubled(backend) == []


@pytest.mark.parametrize(
    ("snapshot", "index", "fault"),
    [
        ("synthetic-remap-pending", 3, MemoryHealth(0, 0, 2, True, False)),
        (
            "synthetic-pcie-degraded",
            4,
            PcieLink(generation=5, generation_max=5, width=8, width_max=16),
        ),
        ("synthetic-nvlink-down", 1, [InterconnectLink("nvlink", 7, False)]),
    ],
)
def test_nvidias_backend_tells_a_gpus_fault(snapshot: str, index: int, fault: object) -> None:
    (gpu,) = troubled(NvidiaBackend(snapshot_host(str(SNAPSHOTS / snapshot))))
    assert gpu.identity.index == index
    down = [link for link in gpu.links or [] if not link.up]
    assert fault in (gpu.memory, gpu.pcie, down)


def test_nvidias_backend_tells_a_lost_gpu_and_why() -> None:
    (gpu,) = troubled(NvidiaBackend(snapshot_host(str(SNAPSHOTS / "synthetic-gpu-lost"))))
    assert (gpu.identity.index, gpu.identity.uuid, gpu.lost) == (5, h100_uuid(5), True)
    assert gpu.errors == {"nvmlDeviceGetName": "GpuIsLost"}
    assert (gpu.memory, gpu.pcie, gpu.links) == (MemoryHealth(), PcieLink(), None)


def test_amds_backend_tells_ras_errors_retired_pages_and_xgmi_links() -> None:
    def host(name: str) -> AmdBackend:
        return AmdBackend(snapshot_host(str(SNAPSHOTS / name)))

    healthy = host("synthetic-amd-mi300x-8gpu-healthy").health()
    assert healthy[0].pcie == PcieLink(speed_gts=32.0, speed_max_gts=32.0, width=16, width_max=16)
    assert healthy[0].memory == MemoryHealth(0, 0, 0, False, False)
    assert healthy[0].links == [InterconnectLink("xgmi", node, True) for node in range(2, 9)]
    assert troubled(host("synthetic-amd-mi300x-8gpu-healthy")) == []
    (ras,) = troubled(host("synthetic-amd-ras-uncorrectable"))
    assert (ras.identity.uuid, ras.memory) == (
        mi300x_unique_id(3),
        MemoryHealth(2, 17, 1, True, False),
    )
    (pages,) = troubled(host("synthetic-amd-bad-pages-near-threshold"))
    assert (pages.identity.index, pages.memory.retired) == (5, 1800)
    down = troubled(host("synthetic-amd-xgmi-link-down"))
    assert [(g.identity.index, [link for link in g.links or [] if not link.up]) for g in down] == [
        (1, [InterconnectLink("xgmi", 7, False)]),
        (6, [InterconnectLink("xgmi", 2, False)]),
    ]


def test_an_nvidia_node_gets_nvidias_backend_alone() -> None:
    backends = node_backends(snapshot_host(str(SNAPSHOTS / "synthetic-h100-8gpu-healthy")))
    assert [type(b) for b in backends] == [NvidiaBackend]


def test_an_amd_node_gets_amds_backend_alone() -> None:
    backends = node_backends(snapshot_host(str(SNAPSHOTS / "synthetic-amd-mi300x-8gpu-healthy")))
    assert [type(b) for b in backends] == [AmdBackend]


def test_a_node_with_both_vendors_gets_both_backends_nvidias_first(mixed: Path) -> None:
    backends = node_backends(snapshot_host(str(mixed)))
    assert [b.vendor for b in backends] == ["nvidia", "amd"]
    nvidia, amd = backends
    assert [g.pci_address for g in nvidia.gpus()] == H100_ADDRESSES
    assert amd.gpus() == [
        GpuIdentity("amd", i, mi300x_unique_id(i), address, "AMD Instinct MI300X")
        for i, address in enumerate(MI300X_ADDRESSES[:2])
    ]
    assert [b.driver().version for b in backends] == ["550.54.15", "6.10.5"]


def test_a_node_without_gpus_gets_no_backend() -> None:
    assert node_backends(snapshot_host(str(SNAPSHOTS / "kvm-epyc-nogpu"))) == []


def test_nvml_answering_as_only_a_loaded_driver_does_shows_nvidia_without_the_bus() -> None:
    """NoPermission from nvmlInit: the driver is there though the snapshot holds no sysfs."""
    host = snapshot_host(str(SNAPSHOTS / "synthetic-nvml-no-permission-nvml-only"))
    assert [b.vendor for b in node_backends(host)] == ["nvidia"]
