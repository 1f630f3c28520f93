"""Check `driver` on snapshots: each driver fault raises exactly its finding."""

from __future__ import annotations

from gpuprobe.report import Status
from helpers import codes, config, run_check


def test_healthy_node_reports_versions_and_no_finding() -> None:
    result = run_check("driver", "synthetic-h100-8gpu-healthy")
    assert result.status is Status.OK
    assert result.findings == []
    assert result.summary == "driver 550.54.15, CUDA 12.4 (runs toolkits up to 12.4 Update 1)"
    assert result.data == {
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "nvidia_gpus_on_pci_bus": 8,
        "kernel_module_version": "550.54.15",
        "kernel_module_type": "open",
        "nvml_init_error": None,
        "vendors": ["nvidia"],
        "nvml_version": "12.550.54.15",
        "cuda_toolkit_max": "12.4.1",
        "cuda_toolkit_max_release": "12.4 Update 1",
        "required_cuda": [],
    }


def test_library_mismatch_names_both_versions() -> None:
    result = run_check("driver", "synthetic-library-mismatch")
    assert codes(result) == [("DRIVER_LIBRARY_MISMATCH", "CRITICAL", "REBOOT_NODE", "node")]
    assert result.findings[0].message.startswith(
        "kernel module 550.54.15 and NVML library 550.90.07 differ"
    )
    assert result.data["library_versions"] == ["550.90.07"]


def test_module_other_than_library_is_a_mismatch_too() -> None:
    result = run_check("driver", "synthetic-module-library-differ")
    assert codes(result) == [("DRIVER_LIBRARY_MISMATCH", "CRITICAL", "REBOOT_NODE", "node")]
    assert "kernel module 550.90.07 and NVML library 550.54.15" in result.findings[0].message


def test_library_mismatch_without_the_pci_bus_in_view_is_still_a_mismatch() -> None:
    # The loaded module answered nvmlInit with its own version: GPUs are there.
    result = run_check("driver", "synthetic-library-mismatch-nvml-only")
    assert codes(result) == [("DRIVER_LIBRARY_MISMATCH", "CRITICAL", "REBOOT_NODE", "node")]
    assert result.findings[0].message.startswith(
        "the kernel module and the NVML library differ (a driver upgrade without a reboot)"
    )
    assert result.summary == "driver kernel module and library differ"
    assert result.data["nvidia_gpus_on_pci_bus"] == 0


def test_library_mismatch_is_judged_before_expected_gpus_go_missing() -> None:
    cfg = config(gpus={"expect": 8})
    result = run_check("driver", "synthetic-library-mismatch-nvml-only", cfg)
    assert codes(result) == [("DRIVER_LIBRARY_MISMATCH", "CRITICAL", "REBOOT_NODE", "node")]


def test_no_permission_without_the_pci_bus_in_view_is_an_init_failure_not_no_gpu() -> None:
    result = run_check("driver", "synthetic-nvml-no-permission-nvml-only")
    assert codes(result) == [("NVML_INIT_FAILED", "UNKNOWN", "FIX_CONFIG", "node")]
    assert result.findings[0].message == (
        "NVML's NoPermission shows a loaded NVIDIA driver but NVML failed to initialise with "
        "NoPermission: the agent lacks access to /dev/nvidia*"
    )


def test_driver_not_loaded() -> None:
    result = run_check("driver", "synthetic-driver-not-loaded")
    assert codes(result) == [("DRIVER_NOT_LOADED", "CRITICAL", "FIX_CONFIG", "node")]
    assert result.findings[0].message.startswith("8 NVIDIA GPUs on the PCI bus but")


def test_driver_not_found_when_gpus_are_on_the_bus() -> None:
    result = run_check("driver", "synthetic-driver-not-found")
    assert codes(result) == [("DRIVER_NOT_FOUND", "CRITICAL", "FIX_CONFIG", "node")]
    assert result.data["driver_version"] is None
    assert result.data["nvml_init_error"] == "LibraryNotFound"


def test_no_gpu_node_is_unknown_not_a_failure() -> None:
    result = run_check("driver", "kvm-epyc-nogpu")
    assert codes(result) == [("NO_GPU", "UNKNOWN", "NONE", "node")]
    assert result.status is Status.UNKNOWN


def test_no_gpu_is_critical_when_gpus_are_expected() -> None:
    result = run_check("driver", "kvm-epyc-nogpu", config(gpus={"expect": 8}))
    assert codes(result) == [("NO_GPU", "CRITICAL", "REBOOT_NODE", "node")]


def test_driver_too_old_for_required_cuda() -> None:
    cfg = config(driver={"required_cuda": ["12.2", "12.4", "13.0"]})
    result = run_check("driver", "synthetic-driver-too-old", cfg)
    assert codes(result) == [
        ("DRIVER_TOO_OLD", "CRITICAL", "FIX_CONFIG", "node"),
        ("DRIVER_TOO_OLD", "WARNING", "FIX_CONFIG", "node"),
    ]
    messages = sorted(f.message for f in result.findings)
    assert "cannot run CUDA 13.0" in messages[0]
    assert "CUDA 13.0 GA needs driver 580.65.06 or newer" in messages[0]
    assert "runs CUDA 12.4 applications only under minor-version compatibility" in messages[1]
    assert result.data["required_cuda"] == [
        {"version": "12.2", "support": "full", "min_driver": "535.54.03"},
        {"version": "12.4", "support": "minor-version-compatibility", "min_driver": "550.54.14"},
        {"version": "13.0", "support": "none", "min_driver": "580.65.06"},
    ]


def test_driver_below_the_configured_minimum() -> None:
    result = run_check(
        "driver", "synthetic-h100-8gpu-healthy", config(driver={"min_version": "550.90.07"})
    )
    assert codes(result) == [("DRIVER_TOO_OLD", "WARNING", "FIX_CONFIG", "node")]
    ok = run_check(
        "driver", "synthetic-h100-8gpu-healthy", config(driver={"min_version": "550.54"})
    )
    assert ok.findings == []
