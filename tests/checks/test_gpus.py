"""Check `gpus` on snapshots: counts, identities, lost GPUs, and each GPU's health."""

from __future__ import annotations

import pytest

from gpuprobe.checks import gpus
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.gpu import own_load
from gpuprobe.gpu.own_load import own_gpu_test, own_gpu_test_running
from gpuprobe.host import snapshot_host
from gpuprobe.report import Status
from helpers import FakeClock, codes, config, run_check, snapshot

UUID = "GPU-5f1c{0:04x}-8e2b-4c1d-9a7e-{0:012x}"


def gpu(index: int) -> str:
    """The resource of GPU `index` of the synthetic HGX H100 node."""
    return f"gpu:{index}:{UUID.format(index)}"


def test_healthy_node_lists_eight_gpus_and_raises_nothing() -> None:
    result = run_check("gpus", "synthetic-h100-8gpu-healthy")
    assert result.findings == []
    assert result.status is Status.OK
    assert result.summary == "8 GPUs: NVIDIA H100 80GB HBM3"
    assert result.data["gpus_on_pci_bus"] == 8
    assert result.data["gpus_seen_by_nvml"] == 8
    assert result.data["nvswitches_on_pci_bus"] == 4
    assert result.data["fabric_manager_running"] is True
    assert result.data["gpus"][2] == {
        "index": 2,
        "vendor": "nvidia",
        "uuid": "GPU-5f1c0002-8e2b-4c1d-9a7e-000000000002",
        "name": "NVIDIA H100 80GB HBM3",
        "serial": "1654922000002",
        "pci_bus_id": "0000:3a:00.0",
        "memory_total_bytes": 85520809984,
        "memory_used_bytes": 543096832,
        "persistence_mode": True,
        "compute_mode": "Default",
        "temperature_celsius": 43,
        "temperature_slowdown_celsius": 87,
        "temperature_shutdown_celsius": 92,
        "power_watts": 614.0,
        "power_limit_watts": 700.0,
        "utilization_gpu_percent": 97,
        "utilization_memory_percent": 41,
        "ecc_mode_enabled": True,
        "ecc_uncorrected_volatile": 0,
        "ecc_uncorrected_aggregate": 0,
        "ecc_corrected_volatile": 0,
        "ecc_corrected_aggregate": 3,
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "pcie_link_width": 16,
        "pcie_link_width_max": 16,
        "pcie_link_generation": 5,
        "pcie_link_generation_max": 5,
        "nvlinks": [{"link": n, "up": True} for n in range(18)],
        "fabric_state": "COMPLETED",
        "fabric_status": 0,
        "clock_event_reasons": [],
        "processes": [{"pid": 41002, "name": "python3", "used_memory_bytes": 536870912}],
        "recovery_action": "NONE",
        "mig_mode_current": 0,
        "idle": False,
        "idle_seconds": None,
    }
    # Running into the power cap is a fact, not a fault; retired pages are not an H100's.
    assert result.data["gpus"][0]["clock_event_reasons"] == ["SwPowerCap"]
    assert "retired_pages_pending" not in result.data["gpus"][0]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("synthetic-ecc-uncorrectable", [("ECC_UNCORRECTABLE", "CRITICAL", "RESET_GPU", gpu(2))]),
        ("synthetic-remap-pending", [("ROW_REMAP_PENDING", "CRITICAL", "RESET_GPU", gpu(3))]),
        (
            "synthetic-remap-failure",
            [("ROW_REMAP_FAILURE", "CRITICAL", "HARDWARE_INSPECTION", gpu(6))],
        ),
        (
            "synthetic-retired-pages-pending",
            [("RETIRED_PAGES_PENDING", "CRITICAL", "RESET_GPU", gpu(1))],
        ),
        (
            "synthetic-pcie-degraded",
            [("PCIE_LINK_DEGRADED", "WARNING", "HARDWARE_INSPECTION", gpu(4))],
        ),
        ("synthetic-nvlink-down", [("NVLINK_DOWN", "CRITICAL", "RESET_GPU", gpu(1))]),
        (
            "synthetic-fabric-not-started",
            [("FABRIC_NOT_READY", "CRITICAL", "FIX_CONFIG", gpu(i)) for i in range(8)],
        ),
        ("synthetic-fabric-in-progress", [("FABRIC_NOT_READY", "WARNING", "NONE", gpu(0))]),
        (
            "synthetic-thermal-slowdown",
            [("THERMAL_SLOWDOWN", "WARNING", "HARDWARE_INSPECTION", gpu(7))],
        ),
        ("synthetic-hw-slowdown", [("HW_SLOWDOWN", "WARNING", "HARDWARE_INSPECTION", gpu(0))]),
        (
            "synthetic-power-brake",
            [
                ("HW_SLOWDOWN", "WARNING", "HARDWARE_INSPECTION", gpu(2)),
                ("POWER_BRAKE", "WARNING", "HARDWARE_INSPECTION", gpu(2)),
            ],
        ),
        (
            "synthetic-recovery-node-reboot",
            [("GPU_RECOVERY_REQUIRED", "CRITICAL", "REBOOT_NODE", gpu(5))],
        ),
        ("synthetic-gpus-idle", []),
        ("synthetic-mig-single", []),
        ("synthetic-mig-mixed", []),
        ("synthetic-mig-no-instances", []),
    ],
)
def test_each_health_fault_raises_exactly_its_finding(
    name: str, expected: list[tuple[str, str, str, str]]
) -> None:
    assert codes(run_check("gpus", name)) == expected


def test_remap_pending_message_counts_the_rows() -> None:
    (finding,) = run_check("gpus", "synthetic-remap-pending").findings
    assert finding.message.startswith(
        "GPU 3 (0000:5d:00.0) has 2 uncorrectable rows remapped; a GPU reset is pending"
    )
    facts = run_check("gpus", "synthetic-remap-pending").data["gpus"][3]
    assert facts["remapped_rows_uncorrectable"] == 2
    assert facts["remapped_rows_pending"] is True


def test_uncorrectable_ecc_figures_are_in_data() -> None:
    result = run_check("gpus", "synthetic-ecc-uncorrectable")
    facts = result.data["gpus"][2]
    assert (facts["ecc_uncorrected_volatile"], facts["ecc_uncorrected_aggregate"]) == (3, 3)
    assert "3 uncorrectable ECC errors" in result.findings[0].message


def test_lower_link_generation_on_an_idle_gpu_is_power_saving_not_a_fault() -> None:
    result = run_check("gpus", "synthetic-pcie-degraded")
    idle = result.data["gpus"][5]
    assert (idle["pcie_link_generation"], idle["pcie_link_generation_max"]) == (1, 5)
    assert idle["idle"] is True
    assert idle["clock_event_reasons"] == ["GpuIdle"]
    assert not [f for f in result.findings if f.resource == gpu(5)]
    assert "x8 at Gen5 of its x16" in result.findings[0].message


def test_nvlink_down_names_the_link() -> None:
    result = run_check("gpus", "synthetic-nvlink-down")
    assert "NVLink link 7 down (17 of 18 up)" in result.findings[0].message
    assert {"link": 7, "up": False} in result.data["gpus"][1]["nvlinks"]


def test_fabric_not_started_without_fabric_manager_says_to_start_it() -> None:
    result = run_check("gpus", "synthetic-fabric-not-started")
    assert result.data["fabric_manager_running"] is False
    assert result.data["gpus"][0]["fabric_state"] == "NOT_STARTED"
    assert "no nvidia-fabricmanager runs" in result.findings[0].message


def test_thermal_slowdown_names_the_temperature() -> None:
    result = run_check("gpus", "synthetic-thermal-slowdown")
    assert "at 89 °C (slowdown at 87 °C)" in result.findings[0].message
    assert result.data["gpus"][7]["clock_event_reasons"] == ["HwThermalSlowdown"]


def test_older_throttle_reason_function_name_is_read() -> None:
    result = run_check("gpus", "synthetic-hw-slowdown")
    assert result.data["gpus"][0]["clock_event_reasons"] == ["HwSlowdown"]
    assert result.data["gpus"][1]["clock_event_reasons"] == []


def test_recovery_action_field_is_read() -> None:
    result = run_check("gpus", "synthetic-recovery-node-reboot")
    assert result.data["gpus"][5]["recovery_action"] == "NODE_REBOOT"
    assert result.data["gpus"][4]["recovery_action"] == "NONE"


def test_mig_enabled_gpus_leave_out_what_nvml_refuses_without_a_finding() -> None:
    result = run_check("gpus", "synthetic-mig-single")
    assert result.findings == []
    facts = result.data["gpus"][0]
    assert facts["mig_mode_current"] == 1
    for refused in ("utilization_gpu_percent", "utilization_memory_percent"):
        assert refused not in facts
    assert not [k for k in facts if k.startswith("remapped_rows")]
    assert "nvml_errors" not in facts
    assert facts["idle"] is False  # a process runs on it; utilization is unknown


def test_idle_gpus_are_a_fact_in_one_shot_check() -> None:
    result = run_check("gpus", "synthetic-gpus-idle")
    assert result.findings == []
    assert result.summary == "8 GPUs: NVIDIA H100 80GB HBM3; 2 idle"
    assert [g["idle"] for g in result.data["gpus"]] == [False] * 6 + [True, True]
    assert result.data["gpus"][6]["idle_seconds"] == 0.0
    assert result.data["gpus"][0]["idle_seconds"] is None


def test_gpu_idle_fires_in_the_daemon_once_the_window_has_passed() -> None:
    host = snapshot_host(snapshot("synthetic-gpus-idle"))  # one host: memory carries over
    ctx = CheckContext(host)  # one runner's context: its states
    cfg = config(gpus={"idle_window_seconds": 600})
    host.clock = clock = FakeClock()
    assert gpus.run(ctx, cfg).findings == []
    clock.advance(599)
    first = gpus.run(ctx, cfg)
    assert first.findings == []
    assert first.data["gpus"][6]["idle_seconds"] == 599.0
    clock.advance(2)
    result = gpus.run(ctx, cfg)
    assert codes(result) == [("GPU_IDLE", "WARNING", "NONE", gpu(6))]
    assert result.data["gpus"][6]["idle_seconds"] == 601.0
    assert "no process and no utilization for 10 min" in result.findings[0].message


def test_gpu_idle_clock_restarts_when_the_gpu_gets_work() -> None:
    host = snapshot_host(snapshot("synthetic-gpus-idle"))  # GPU 7 gets a job after one look
    ctx = CheckContext(host)  # one runner's context: its states
    host.clock = clock = FakeClock()
    assert gpus.run(ctx, Config()).data["gpus"][7]["idle"] is True
    clock.advance(3601)
    result = gpus.run(ctx, Config())
    assert codes(result) == [("GPU_IDLE", "WARNING", "NONE", gpu(6))]
    busy = result.data["gpus"][7]
    assert (busy["idle"], busy["idle_seconds"]) == (False, None)
    assert busy["processes"] == [{"pid": 41007, "name": "python3", "used_memory_bytes": 1 << 30}]
    assert "GPU-5f1c0007-8e2b-4c1d-9a7e-000000000007" not in ctx.kept(gpus.KEEPS).idle_since


def test_gpuprobes_own_nccl_test_neither_ends_nor_starts_an_idle_stretch() -> None:
    host = snapshot_host(snapshot("synthetic-gpus-idle"))  # GPU 7 is busy at the second look
    ctx = CheckContext(host)  # one runner's context: its states
    host.clock = clock = FakeClock()
    assert gpus.run(ctx, Config()).data["gpus"][7]["idle"] is True
    clock.advance(3601)
    with own_gpu_test(host):  # the load is gpuprobe's own test, not a tenant's job
        result = gpus.run(ctx, Config())
    assert codes(result) == [
        ("GPU_IDLE", "WARNING", "NONE", gpu(6)),
        ("GPU_IDLE", "WARNING", "NONE", gpu(7)),
    ]
    facts = result.data["gpus"]
    assert (facts[7]["idle"], facts[7]["idle_seconds"]) == (False, 3601.0)
    assert [g["idle_seconds"] for g in facts[:6]] == [None] * 6  # busy before: still not idle


def test_the_load_counts_as_gpuprobes_own_a_little_after_its_test_ends() -> None:
    host = snapshot_host(snapshot("synthetic-gpus-idle"))
    host.clock = clock = FakeClock()
    assert not own_gpu_test_running(host)
    with own_gpu_test(host):
        assert own_gpu_test_running(host)
    clock.advance(own_load.TRAILING_SECONDS - 0.1)  # NVML's utilization sample still shows it
    assert own_gpu_test_running(host)
    clock.advance(0.2)
    assert not own_gpu_test_running(host)


# --- counts and lost GPUs ------------------------------------------------------------------


def test_a_gpu_fallen_off_the_bus_is_a_count_mismatch_that_names_it() -> None:
    result = run_check("gpus", "synthetic-gpu-fallen-off-bus")
    assert codes(result) == [("GPU_COUNT_MISMATCH", "CRITICAL", "REBOOT_NODE", "node")]
    assert result.findings[0].message.startswith(
        "the PCI bus shows 8 NVIDIA GPUs but NVML sees 7 (not seen: 0000:5d:00.0): "
    )
    assert result.summary == "NVML sees 7 of the 8 GPUs on the PCI bus"


def test_fewer_gpus_than_expected_is_critical() -> None:
    result = run_check("gpus", "synthetic-h100-8gpu-healthy", config(gpus={"expect": 9}))
    assert codes(result) == [("GPU_COUNT_MISMATCH", "CRITICAL", "REBOOT_NODE", "node")]
    assert result.findings[0].message.startswith(
        "9 GPUs are expected but the PCI bus shows 8: a GPU has fallen off the bus"
    )


def test_more_gpus_than_expected_is_a_config_warning() -> None:
    result = run_check("gpus", "synthetic-h100-8gpu-healthy", config(gpus={"expect": 4}))
    assert codes(result) == [("GPU_COUNT_MISMATCH", "WARNING", "FIX_CONFIG", "node")]
    assert result.findings[0].message == (
        "4 GPUs are expected but NVML sees 8: correct the expected count"
    )


def test_exactly_the_expected_count_raises_nothing() -> None:
    assert codes(run_check("gpus", "synthetic-h100-8gpu-healthy", config(gpus={"expect": 8}))) == []


def test_a_gpu_whose_handle_is_lost_is_placed_on_the_pci_bus_with_no_uuid() -> None:
    result = run_check("gpus", "synthetic-gpu-handle-lost")
    assert codes(result) == [("GPU_LOST", "CRITICAL", "REBOOT_NODE", "gpu:2:")]
    assert result.findings[0].message.startswith("GPU 2 (0000:3a:00.0) is lost: ")
    assert result.data["gpus"][2] == {
        "index": 2,
        "vendor": "nvidia",
        "lost": True,
        "pci_bus_id": "0000:3a:00.0",
        "nvml_errors": {"nvmlDeviceGetHandleByIndex": "GpuIsLost"},
    }
    assert result.summary == "1 of 8 GPUs lost"


def test_a_lost_gpu_that_still_tells_its_uuid_keeps_it_in_its_resource() -> None:
    result = run_check("gpus", "synthetic-gpu-lost")
    assert codes(result) == [("GPU_LOST", "CRITICAL", "REBOOT_NODE", gpu(5))]


# --- the fabric manager on NVSwitch nodes ---------------------------------------------------


def test_fabric_manager_stopped_after_registration_is_a_node_warning() -> None:
    result = run_check("gpus", "synthetic-fabric-manager-stopped")
    assert codes(result) == [("FABRIC_NOT_READY", "WARNING", "FIX_CONFIG", "node")]
    assert result.findings[0].message.startswith(
        "4 NVSwitches on the PCI bus and no nvidia-fabricmanager runs: the GPUs registered"
    )
    assert result.data["fabric_manager_running"] is False


def test_fabric_manager_missing_without_the_fabric_api_is_critical() -> None:
    result = run_check("gpus", "synthetic-fabric-manager-missing-no-fabric-api")
    assert codes(result) == [("FABRIC_NOT_READY", "CRITICAL", "FIX_CONFIG", "node")]
    assert "CUDA cannot start on the GPUs (error 802" in result.findings[0].message


def test_per_gpu_fabric_findings_are_not_repeated_for_the_node() -> None:
    result = run_check("gpus", "synthetic-fabric-not-started")
    assert {f.resource for f in result.findings} == {gpu(i) for i in range(8)}
