"""The driver and gpus checks on AMD Instinct MI300X nodes, and on a node with both vendors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import SNAPSHOTS
from gpuprobe.checks import driver, gpus, toolkit
from gpuprobe.checks.context import CheckContext
from gpuprobe.host import snapshot_host
from gpuprobe.report import Status
from helpers import codes, config, run_check


def amd_gpu(index: int) -> str:
    """The resource of AMD GPU `index` of the synthetic MI300X node."""
    return f"gpu:{index}:{0x7C3A51D2E0B4F600 + index * 0x1111:016x}"


def test_a_healthy_mi300x_node_is_judged_on_amdgpu_alone() -> None:
    result = run_check("driver", "synthetic-amd-mi300x-8gpu-healthy")
    assert result.findings == [] and result.status is Status.OK
    assert result.summary == "amdgpu 6.10.5, driving 8 of 8 AMD GPUs"
    data = result.data
    assert (data["driver_version"], data["cuda_driver_version"]) == ("6.10.5", None)
    assert data["vendors"] == ["amd"]
    amd = data["amd"]
    assert {k: amd[k] for k in ("amdgpu_loaded", "kernel_release", "rocm_version")} == {
        "amdgpu_loaded": True,
        "kernel_release": "6.8.0-49-generic",
        "rocm_version": None,
    }
    assert (amd["gpus_on_pci_bus"], amd["gpus_seen_by_driver"]) == (8, 8)
    assert amd["gpus"][0] == {
        "index": 0,
        "vendor": "amd",
        "pci_bus_id": "0000:0c:00.0",
        "name": "AMD Instinct MI300X",
        "unique_id": "7c3a51d2e0b4f600",
        "driver": "amdgpu",
    }
    # A snapshot does not replay the SMI library.
    assert amd["smi"] == {"library": None, "status": "not asked", "version": None,
                          "devices": None}  # fmt: skip


def test_the_gpus_of_a_healthy_mi300x_node() -> None:
    result = run_check("gpus", "synthetic-amd-mi300x-8gpu-healthy")
    assert result.findings == [] and result.status is Status.OK
    assert result.summary == "8 AMD GPUs: AMD Instinct MI300X"
    data = result.data
    assert (data["amd_gpus_on_pci_bus"], data["gpus_seen_by_amdgpu"]) == (8, 8)
    assert data["gpus_on_pci_bus"] == 0 and data["gpus_seen_by_nvml"] is None
    assert data["gpus"][1] == {
        "index": 1,
        "vendor": "amd",
        "uuid": "7c3a51d2e0b50711",
        "unique_id": "7c3a51d2e0b50711",
        "name": "AMD Instinct MI300X",
        "pci_bus_id": "0000:22:00.0",
        "driver": "amdgpu",
        "card": "card9",
        "memory_total_bytes": 206141652992,
        "memory_used_bytes": 143 * 2**30,
        "utilization_gpu_percent": 100,
        "pcie_link_width": 16,
        "pcie_link_width_max": 16,
        "pcie_link_speed_gts": 32.0,
        "pcie_link_speed_max_gts": 32.0,
        "temperatures_celsius": {"junction": 62.0, "mem": 53.0},
        "temperature_celsius": 62.0,
        "ras_errors": {
            block: {"uncorrectable": 0, "correctable": 0}
            for block in ("umc", "sdma", "gfx", "mmhub", "xgmi_wafl")
        },
        "ecc_uncorrected_volatile": 0,
        "ecc_corrected_volatile": 0,
        "bad_pages": {"retired": 0, "pending": 0, "failed": 0},
        "retired_pages_pending": False,
        "xgmi": {
            "hive_id": 11386580467236257794,
            "device_id": 4613629217419446301,
            "physical_id": 1,
            "peers": 7,
            "links_down_to_nodes": [],
            "errors": 0,
        },
    }


@pytest.mark.parametrize(
    ("snapshot", "check", "expected"),
    [
        (
            "synthetic-amd-driver-not-loaded",
            "driver",
            [("DRIVER_NOT_LOADED", "CRITICAL", "FIX_CONFIG", "node")],
        ),
        (
            "synthetic-amd-gpu-not-initialized",
            "gpus",
            [("GPU_COUNT_MISMATCH", "CRITICAL", "REBOOT_NODE", "gpu:3:0000:5c:00.0")],
        ),
        (
            "synthetic-amd-ras-uncorrectable",
            "gpus",
            [
                ("ECC_UNCORRECTABLE", "CRITICAL", "RESET_GPU", amd_gpu(3)),
                ("RETIRED_PAGES_PENDING", "CRITICAL", "RESET_GPU", amd_gpu(3)),
            ],
        ),
        (
            "synthetic-amd-bad-pages-near-threshold",
            "gpus",
            [("RAS_BAD_PAGES", "WARNING", "HARDWARE_INSPECTION", amd_gpu(5))],
        ),
        (
            "synthetic-amd-xgmi-link-down",
            "gpus",
            [
                ("XGMI_LINK_DOWN", "CRITICAL", "REBOOT_NODE", amd_gpu(1)),
                ("XGMI_LINK_DOWN", "CRITICAL", "REBOOT_NODE", amd_gpu(6)),
            ],
        ),
    ],
)
def test_each_amd_fault_snapshot_gives_its_finding(
    snapshot: str, check: str, expected: list[tuple[str, str, str, str]]
) -> None:
    assert codes(run_check(check, snapshot)) == expected


def test_messages_say_what_and_where() -> None:
    [ecc, pending] = run_check("gpus", "synthetic-amd-ras-uncorrectable").findings
    assert ecc.message.startswith(
        "AMD GPU 3 (0000:5c:00.0) has 2 uncorrectable RAS errors since the driver loaded (umc 2): "
    )
    assert pending.message.startswith("AMD GPU 3 (0000:5c:00.0) has 1 bad VRAM page waiting")
    [pages] = run_check("gpus", "synthetic-amd-bad-pages-near-threshold").findings
    assert pages.message == (
        "AMD GPU 5 (0000:af:00.0) has 1800 retired VRAM pages of amdgpu's threshold of 1965: "
        "plan the GPU's replacement"
    )
    link = run_check("gpus", "synthetic-amd-xgmi-link-down").findings[1]
    assert "(at position 2 of the hive's topology)" in link.message


def test_without_amdgpu_the_gpus_health_is_unknown_not_ok() -> None:
    result = run_check("gpus", "synthetic-amd-driver-not-loaded")
    assert result.findings == []
    assert result.status is Status.UNKNOWN
    assert result.summary.startswith("8 AMD GPUs on the PCI bus; amdgpu is not loaded")


def test_an_expected_count_holds_for_amd_gpus() -> None:
    short = run_check("gpus", "synthetic-amd-mi300x-8gpu-healthy", config(gpus={"expect": 16}))
    assert codes(short) == [("GPU_COUNT_MISMATCH", "CRITICAL", "REBOOT_NODE", "node")]
    over = run_check("gpus", "synthetic-amd-mi300x-8gpu-healthy", config(gpus={"expect": 4}))
    assert codes(over) == [("GPU_COUNT_MISMATCH", "WARNING", "FIX_CONFIG", "node")]
    assert (
        run_check(
            "driver", "synthetic-amd-mi300x-8gpu-healthy", config(gpus={"expect": 16})
        ).findings
        == []
    )


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """The healthy HGX H100 node with two MI300X GPUs (and amdgpu) added from the AMD node."""
    root = tmp_path / "mixed"
    shutil.copytree(SNAPSHOTS / "synthetic-h100-8gpu-healthy", root, symlinks=True)
    amd = SNAPSHOTS / "synthetic-amd-xgmi-link-down" / "rootfs"
    for address in ("0000:0c:00.0", "0000:22:00.0"):
        shutil.copytree(amd / f"sys/bus/pci/devices/{address}",
                        root / f"rootfs/sys/bus/pci/devices/{address}", symlinks=True)  # fmt: skip
    shutil.copytree(amd / "sys/module/amdgpu", root / "rootfs/sys/module/amdgpu")
    return root


def test_a_node_with_both_vendors_keeps_nvidias_verdict_and_adds_amds(mixed: Path) -> None:
    cfg = config()
    nvidia_only = driver.run(
        CheckContext(snapshot_host(SNAPSHOTS / "synthetic-h100-8gpu-healthy")), cfg
    )
    both = driver.run(CheckContext(snapshot_host(mixed)), cfg)
    assert both.summary == f"{nvidia_only.summary}; amdgpu 6.10.5, driving 2 of 2 AMD GPUs"
    assert both.data["vendors"] == ["nvidia", "amd"]
    assert both.data["driver_version"] == "550.54.15"
    assert both.findings == []
    result = gpus.run(CheckContext(snapshot_host(mixed)), cfg)
    assert [(g["index"], g["vendor"]) for g in result.data["gpus"]] == [
        *((i, "nvidia") for i in range(8)), (0, "amd"), (1, "amd")
    ]  # fmt: skip
    # GPU 1 of the AMD hive lost its link to position 7, a GPU this node copy left out.
    assert codes(result) == [("XGMI_LINK_DOWN", "CRITICAL", "REBOOT_NODE", amd_gpu(1))]
    assert result.summary == (
        "8 GPUs: NVIDIA H100 80GB HBM3; 2 AMD GPUs: AMD Instinct MI300X; 1 with findings"
    )


def test_the_amd_device_plugin_registered_its_gpus() -> None:
    result = run_check("device_plugin", "synthetic-amd-k8s-device-plugin")
    assert result.findings == []
    assert result.summary == "AMD device plugin registered: amd.com/gpu"
    assert (result.data["amd_gpus"], result.data["amd_plugin_sockets"]) == (8, ["amd.com_gpu"])
    assert result.data["amd_resources"] == ["amd.com/gpu"]
    assert result.data["gpus"] == 0  # NVIDIA's


def test_an_amd_node_without_its_device_plugin_advertises_no_gpu() -> None:
    result = run_check("device_plugin", "synthetic-amd-k8s-no-device-plugin")
    assert codes(result) == [("DEVICE_PLUGIN_NOT_REGISTERED", "CRITICAL", "FIX_CONFIG", "node")]
    assert result.findings[0].message.startswith(
        "no AMD device plugin socket (amd.com_*) in /var/lib/kubelet/device-plugins for the 8 "
        "AMD GPUs on the PCI bus: the kubelet advertises no amd.com/gpu"
    )
    assert result.summary == "no AMD device plugin registered (8 GPUs)"


def test_off_kubernetes_an_amd_node_needs_no_device_plugin() -> None:
    result = run_check("device_plugin", "synthetic-amd-mi300x-8gpu-healthy")
    assert result.findings == []
    assert result.summary == "not a Kubernetes node (no /var/lib/kubelet/device-plugins)"


def test_rocm_containers_need_dev_kfd() -> None:
    result = run_check("toolkit", "synthetic-amd-kfd-missing")
    assert codes(result) == [("GPU_DEVICE_NODE_MISSING", "CRITICAL", "FIX_CONFIG", "node")]
    assert result.findings[0].message.startswith(
        "/dev/kfd missing on a node with 8 AMD GPUs amdgpu drives: ROCm containers cannot "
        "reach any GPU"
    )
    assert result.data["amd"]["kfd"] is False
    healthy = run_check("toolkit", "synthetic-amd-mi300x-8gpu-healthy")
    assert healthy.findings == []
    assert healthy.summary == "AMD GPUs: /dev/kfd present, 8 of 8 render nodes"
    assert healthy.data["amd"]["render_nodes"]["/dev/dri/renderD184"] is True


def test_the_amd_container_runtime_is_held_to_its_binary(tmp_path: Path) -> None:
    root = tmp_path / "node"
    shutil.copytree(SNAPSHOTS / "synthetic-amd-mi300x-8gpu-healthy", root, symlinks=True)
    # What `amd-ctk runtime configure --runtime=docker` writes, with the toolkit since removed.
    daemon = root / "rootfs/etc/docker/daemon.json"
    daemon.parent.mkdir(parents=True)
    daemon.write_text(
        '{\n    "runtimes": {\n        "amd": {\n            "path": "amd-container-runtime",\n'
        '            "runtimeArgs": []\n        }\n    }\n}\n'
    )
    result = toolkit.run(CheckContext(snapshot_host(root)), config())
    assert codes(result) == [
        ("RUNTIME_NOT_CONFIGURED", "CRITICAL", "FIX_CONFIG", "file:/etc/docker/daemon.json")
    ]
    assert result.data["amd"]["runtimes"] == [
        {"engine": "docker", "binary": "amd-container-runtime", "found": False}
    ]
    binary = root / "rootfs/usr/bin/amd-container-runtime"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert toolkit.run(CheckContext(snapshot_host(root)), config()).findings == []


def test_a_stale_amd_cdi_spec_is_named_with_the_nodes_it_lost() -> None:
    result = run_check("cdi", "synthetic-amd-cdi-stale")
    assert codes(result) == [
        ("CDI_SPEC_STALE", "WARNING", "FIX_CONFIG", "file:/var/run/cdi/amd.json")
    ]
    assert "/dev/dri/renderD129, /dev/dri/renderD130, /dev/dri/renderD131, " in (
        result.findings[0].message
    )
    assert "and 3 more" in result.findings[0].message
    assert result.data["specs"][0]["stale"]["missing_device_nodes"] == [
        f"/dev/dri/renderD{n}" for n in range(129, 136)
    ]
