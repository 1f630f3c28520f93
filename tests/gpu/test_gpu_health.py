"""GPU health figures read from NVML answers in the shapes other hands record them."""

from __future__ import annotations

from typing import Any

import pytest

from gpuprobe.checks.nvidia.gpu_health import health_findings
from gpuprobe.gpu.nvidia.device import Device
from gpuprobe.gpu.nvidia.gpus import NvidiaGpuFacts
from gpuprobe.gpu.nvidia.health import read_health
from gpuprobe.host.nvml import ReplayNvml
from gpuprobe.host.processes import Process, ProcessTable


def health(calls: list[tuple[str, list[Any], Any]]) -> dict[str, Any]:
    """GPU 0's health figures from a replayed record of these (fn, args, ret) calls."""
    record = {
        "format": 1,
        "init_error": None,
        "calls": [{"fn": "nvmlDeviceGetCount", "args": [], "ret": 1}]
        + [{"fn": fn, "args": args, "ret": ret} for fn, args, ret in calls],
    }
    table = ProcessTable([Process(7, "python3")])
    return read_health(Device(ReplayNvml(record), 0), table)


def test_a_gpu_that_answers_nothing_has_no_figures() -> None:
    assert health([]) == {}


@pytest.mark.parametrize(
    "ret",
    [
        [3, 2, 1, 0],
        {"corrRows": 3, "uncRows": 2, "isPending": True, "failureOccurred": False},
        {"correctable": 3, "uncorrectable": 2, "pending": 1, "failure": 0},
        {
            "corrActiveRemaps": 2,
            "corrInactiveRemaps": 1,
            "uncActiveRemaps": 1,
            "uncInactiveRemaps": 1,
            "bPending": 1,
            "bfailureOccurred": 0,
        },
    ],
)
def test_remapped_rows_as_a_list_or_an_object(ret: Any) -> None:
    facts = health([("nvmlDeviceGetRemappedRows", [0], ret)])
    assert facts == {
        "remapped_rows_correctable": 3,
        "remapped_rows_uncorrectable": 2,
        "remapped_rows_pending": True,
        "remapped_rows_failure": False,
    }


def test_function_name_variants_are_all_read() -> None:
    facts = health(
        [
            ("nvmlDeviceGetTemperatureV", [0, 0], 55),
            ("nvmlDeviceGetPowerManagementLimit", [0], 350000),
            ("nvmlDeviceGetCurrentClocksThrottleReasons", [0], "0x60"),
            ("nvmlDeviceGetComputeRunningProcesses_v3", [0], [{"pid": 7, "usedGpuMemory": 9}]),
            ("nvmlDeviceGetGpuFabricInfo", [0], {"state": 2, "status": 0}),
            ("nvmlDeviceGetGpuMaxPcieLinkGeneration", [0], 4),
            ("nvmlDeviceGetUtilizationRates", [0], [12, 3]),
            ("nvmlDeviceGetMigMode", [0], {"currentMode": 1, "pendingMode": 1}),
            ("nvmlDeviceGetEccMode", [0], {"current": 0, "pending": 1}),
        ]
    )
    assert facts == {
        "temperature_celsius": 55,
        "power_limit_watts": 350.0,
        "utilization_gpu_percent": 12,
        "utilization_memory_percent": 3,
        "ecc_mode_enabled": False,
        "pcie_link_generation_max": 4,
        "fabric_state": "IN_PROGRESS",
        "fabric_status": 0,
        "clock_event_reasons": ["SwThermalSlowdown", "HwThermalSlowdown"],
        "processes": [{"pid": 7, "name": "python3", "used_memory_bytes": 9}],
        "mig_mode_current": 1,
        "idle": False,
    }


@pytest.mark.parametrize(
    ("ret", "action"),
    [
        ([{"fieldId": 230, "nvmlReturn": 0, "valueType": 1, "value": {"uiVal": 1}}], "GPU_RESET"),
        ([{"nvmlReturn": 0, "valueType": 3, "value": {"ullVal": 4}}], "DRAIN_AND_RESET"),
        ([{"fieldId": 230, "value": 2}], "NODE_REBOOT"),
        (3, "DRAIN_P2P"),
        ([{"fieldId": 230, "nvmlReturn": 3, "valueType": 1, "value": {"uiVal": 0}}], None),
    ],
)  # fmt: skip
def test_recovery_action_field_in_its_shapes(ret: Any, action: str | None) -> None:
    facts = health([("nvmlDeviceGetFieldValues", [0, [230]], ret)])
    assert facts.get("recovery_action") == action


def test_links_past_eighteen_are_asked_while_they_answer() -> None:
    facts = health([("nvmlDeviceGetNvLinkState", [0, n], 1) for n in range(20)])
    assert [link["link"] for link in facts["nvlinks"]] == list(range(20))


def test_idle_needs_a_process_list() -> None:
    assert "idle" not in health([("nvmlDeviceGetUtilizationRates", [0], {"gpu": 0, "memory": 0})])
    assert health([("nvmlDeviceGetComputeRunningProcesses", [0], [])])["idle"] is True


def judge(facts: dict[str, Any], nvswitch: bool = False, fm: bool | None = None) -> list[str]:
    found = health_findings(
        NvidiaGpuFacts(0, **facts),
        "gpu:0:GPU-x",
        "GPU 0",
        nvswitch_system=nvswitch,
        fabric_manager_running=fm,
    )
    return [f"{f.code}/{f.severity.value}/{f.action.value}" for f in found]


def test_all_links_down_on_a_pcie_card_without_nvswitch_is_no_bridge_not_a_fault() -> None:
    down = {"nvlinks": [{"link": n, "up": False} for n in range(4)]}
    assert judge(down) == []
    assert judge(down, nvswitch=True) == ["NVLINK_DOWN/CRITICAL/RESET_GPU"]


def test_fabric_verdicts() -> None:
    assert judge({"fabric_state": "COMPLETED", "fabric_status": 0}) == []
    assert judge({"fabric_state": "NOT_SUPPORTED"}) == []
    assert judge({"fabric_state": "COMPLETED", "fabric_status": 999}, fm=True) == [
        "FABRIC_NOT_READY/CRITICAL/REBOOT_NODE"
    ]
    assert judge({"fabric_state": "NOT_STARTED"}, fm=None) == [
        "FABRIC_NOT_READY/CRITICAL/REBOOT_NODE"
    ]
    assert judge({"fabric_state": "IN_PROGRESS"}, fm=False) == [
        "FABRIC_NOT_READY/CRITICAL/FIX_CONFIG"
    ]


def test_temperature_at_the_slowdown_threshold_is_thermal_slowdown_once() -> None:
    hot = {"temperature_celsius": 87, "temperature_slowdown_celsius": 87}
    assert judge(hot) == ["THERMAL_SLOWDOWN/WARNING/HARDWARE_INSPECTION"]
    both = {**hot, "clock_event_reasons": ["SwThermalSlowdown", "HwThermalSlowdown"]}
    assert judge(both) == ["THERMAL_SLOWDOWN/WARNING/HARDWARE_INSPECTION"]
    assert judge({"temperature_celsius": 86, "temperature_slowdown_celsius": 87}) == []


def test_facts_that_are_not_faults() -> None:
    assert judge({"clock_event_reasons": ["GpuIdle", "SwPowerCap", "SyncBoost"]}) == []
    assert judge({"ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 7}) == []
    assert judge({"pcie_link_width": 16, "pcie_link_width_max": 16}) == []
    assert judge({"recovery_action": "NONE"}) == []
