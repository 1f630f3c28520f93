"""Check `gpus` (inventory) on snapshots: counts, identities, lost GPUs."""

from __future__ import annotations

from gpuprobe.report import Status
from helpers import codes, config, run_check


def test_healthy_node_lists_eight_gpus_and_raises_nothing() -> None:
    result = run_check("gpus", "synthetic-h100-8gpu-healthy")
    assert result.findings == []
    assert result.summary == "8 GPUs: NVIDIA H100 80GB HBM3"
    assert result.data["gpus_on_pci_bus"] == 8
    assert result.data["gpus_seen_by_nvml"] == 8
    assert result.data["nvswitches_on_pci_bus"] == 4
    assert result.data["gpus"][2] == {
        "index": 2,
        "uuid": "GPU-5f1c0002-8e2b-4c1d-9a7e-000000000002",
        "name": "NVIDIA H100 80GB HBM3",
        "serial": "1654922000002",
        "pci_bus_id": "0000:3a:00.0",
        "memory_total_bytes": 85520809984,
        "persistence_mode": True,
        "compute_mode": "Default",
    }


def test_expected_count_met() -> None:
    assert (
        run_check("gpus", "synthetic-h100-8gpu-healthy", config(gpus={"expect": 8})).findings == []
    )


def test_more_gpus_than_expected_is_a_config_warning() -> None:
    result = run_check("gpus", "synthetic-h100-8gpu-healthy", config(gpus={"expect": 4}))
    assert codes(result) == [("GPU_COUNT_MISMATCH", "WARNING", "FIX_CONFIG", "node")]


def test_fewer_on_the_bus_than_expected() -> None:
    result = run_check("gpus", "synthetic-h100-8gpu-healthy", config(gpus={"expect": 10}))
    assert codes(result) == [("GPU_COUNT_MISMATCH", "CRITICAL", "REBOOT_NODE", "node")]
    assert result.findings[0].message.startswith("10 GPUs are expected but the PCI bus shows 8")


def test_gpu_fallen_off_the_bus_is_named_by_its_pci_address() -> None:
    result = run_check("gpus", "synthetic-gpu-fallen-off-bus")
    assert codes(result) == [("GPU_COUNT_MISMATCH", "CRITICAL", "REBOOT_NODE", "node")]
    assert result.findings[0].message.startswith(
        "the PCI bus shows 8 NVIDIA GPUs but NVML sees 7 (not seen: 0000:5d:00.0)"
    )
    assert result.summary == "NVML sees 7 of the 8 GPUs on the PCI bus"


def test_lost_gpu_is_named_while_the_others_are_reported() -> None:
    result = run_check("gpus", "synthetic-gpu-lost")
    assert codes(result) == [
        ("GPU_LOST", "CRITICAL", "REBOOT_NODE", "gpu:5:GPU-5f1c0005-8e2b-4c1d-9a7e-000000000005")
    ]
    assert result.summary == "1 of 8 GPUs lost"
    lost = result.data["gpus"][5]
    assert lost["lost"] is True
    assert lost["nvml_errors"] == {"nvmlDeviceGetName": "GpuIsLost"}
    assert [g.get("name") for g in result.data["gpus"]].count("NVIDIA H100 80GB HBM3") == 7


def test_no_gpu_node_is_ok_with_nothing_to_count() -> None:
    result = run_check("gpus", "kvm-epyc-nogpu")
    assert result.status is Status.OK
    assert result.summary == "no NVIDIA GPU on this node"
    assert result.data["gpus"] == []


def test_nvml_unavailable_with_gpus_on_the_bus_is_unknown_without_a_second_finding() -> None:
    result = run_check("gpus", "synthetic-driver-not-loaded")
    assert result.status is Status.UNKNOWN
    assert result.findings == []
