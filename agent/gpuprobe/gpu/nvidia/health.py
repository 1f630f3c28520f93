"""A GPU's health as NVML tells it: ECC, remapped rows, PCIe, NVLink, fabric, clocks, load.

`read_health` asks NVML and returns the figures (the `gpus` check's per-GPU data keys); a
query the GPU does not support leaves its key out. The `gpus` check judges them
(`gpuprobe.checks.nvidia.gpu_health`). Answers are
read as pynvml returns them (tuples as lists, structs as objects) and in the shapes other
tools write into snapshots (a remapped-rows list or object, utilization as an object or a
pair), so a snapshot recorded by another hand is judged the same.

Field facts (nvml.h, nvidia-ml-py's pynvml.py): temperature sensor 0 is the GPU; threshold 0
shutdown, 1 slowdown; power in milliwatts; ECC error type 0 corrected, 1 uncorrected, counter
0 volatile, 1 aggregate; fabric state 0 not supported, 1 not started, 2 in progress, 3
completed; field 230 NVML_FI_DEV_GET_GPU_RECOVERY_ACTION.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuprobe.gpu.nvidia.device import Device
from gpuprobe.host.processes import ProcessTable
from gpuprobe.report import Action, Severity

# nvmlClocksEventReason* bits (nvml.h).
CLOCK_EVENT_REASONS = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
    0x200: "BoardLimit",
    0x400: "Reliability",
}
FABRIC_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
RECOVERY_ACTIONS = {
    0: "NONE",
    1: "GPU_RESET",
    2: "NODE_REBOOT",
    3: "DRAIN_P2P",
    4: "DRAIN_AND_RESET",
    5: "RECOVER_IMEX_DOMAIN",
    6: "BUS_RESET",
    7: "SYSTEM_REBOOT",
}
FIELD_GPU_RECOVERY_ACTION = 230
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS before Blackwell; asked further while links answer
NVLINK_HARD_LIMIT = 36
FABRIC_MANAGER = ("nv-fabricmanager", "nvidia-fabricmanager")


def read_health(device: Device, processes: ProcessTable) -> dict[str, Any]:
    """Every health figure NVML gives for one GPU (unsupported ones left out)."""
    facts: dict[str, Any] = {}
    get = device.get
    facts["temperature_celsius"] = as_int(
        get("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV", args=(0,))
    )
    facts["temperature_slowdown_celsius"] = as_int(
        get("nvmlDeviceGetTemperatureThreshold", args=(1,))
    )
    facts["temperature_shutdown_celsius"] = as_int(
        get("nvmlDeviceGetTemperatureThreshold", args=(0,))
    )
    facts["power_watts"] = _watts(get("nvmlDeviceGetPowerUsage"))
    facts["power_limit_watts"] = _watts(
        get("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit")
    )
    gpu_util, memory_util = _utilization(get("nvmlDeviceGetUtilizationRates"))
    facts["utilization_gpu_percent"] = gpu_util
    facts["utilization_memory_percent"] = memory_util
    facts.update(_ecc(get))
    facts.update(_remapped_rows(get("nvmlDeviceGetRemappedRows")))
    pending_pages = as_int(get("nvmlDeviceGetRetiredPagesPendingStatus"))
    facts["retired_pages_pending"] = None if pending_pages is None else pending_pages != 0
    facts.update(_pcie(get))
    facts["nvlinks"] = _nvlinks(device) or None
    facts.update(_fabric(get("nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo")))
    facts["clock_event_reasons"] = _reasons(
        get("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
    )
    facts["processes"] = _processes(
        get(
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetComputeRunningProcesses_v2",
        ),
        processes,
    )
    facts["recovery_action"] = recovery_action(
        get("nvmlDeviceGetFieldValues", args=([FIELD_GPU_RECOVERY_ACTION],))
    )
    mig = current_pending(get("nvmlDeviceGetMigMode"))
    facts["mig_mode_current"] = mig[0] if mig else None
    facts["idle"] = is_idle(facts)
    return {k: v for k, v in facts.items() if v is not None}


def is_idle(facts: dict[str, Any]) -> bool | None:
    """No process on the GPU and no utilization; None when NVML cannot list its processes."""
    if facts.get("processes") is None:
        return None
    busy = facts.get("utilization_gpu_percent")
    return not facts["processes"] and (busy is None or busy == 0)


# --- reading answers, in the shapes they come in --------------------------------------


def as_int(value: Any) -> int | None:
    """An integer answer however it is written (int, bool, whole float, "0x8", {"value": 3})."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip(), 0)
        except ValueError:
            return None
    if isinstance(value, dict) and len(value) == 1:
        return as_int(next(iter(value.values())))
    return None


def _watts(milliwatts: Any) -> float | None:
    value = as_int(milliwatts)
    return None if value is None else value / 1000.0


def current_pending(value: Any) -> tuple[int, int] | None:
    """A [current, pending] answer (MIG mode, ECC mode), as a list or an object."""
    if isinstance(value, list | tuple) and len(value) >= 2:
        first, second = as_int(value[0]), as_int(value[1])
    elif isinstance(value, dict):
        first = as_int(_pick(value, "current", "curr"))
        second = as_int(_pick(value, "pending"))
    else:
        first = second = as_int(value)
    if first is None:
        return None
    return first, first if second is None else second


def _pick(d: dict[str, Any], *names: str) -> Any:
    """The value of the first key that contains one of `names` (case-insensitive)."""
    for name in names:
        for key, value in d.items():
            if name in key.lower():
                return value
    return None


def _utilization(value: Any) -> tuple[int | None, int | None]:
    if isinstance(value, dict):
        return as_int(value.get("gpu")), as_int(value.get("memory"))
    if isinstance(value, list | tuple) and len(value) == 2:
        return as_int(value[0]), as_int(value[1])
    return None, None


def _ecc(get: Callable[..., Any]) -> dict[str, Any]:
    mode = current_pending(get("nvmlDeviceGetEccMode"))
    facts: dict[str, Any] = {"ecc_mode_enabled": None if mode is None else mode[0] == 1}
    for name, error_type, counter in (
        ("ecc_uncorrected_volatile", 1, 0),
        ("ecc_uncorrected_aggregate", 1, 1),
        ("ecc_corrected_volatile", 0, 0),
        ("ecc_corrected_aggregate", 0, 1),
    ):
        facts[name] = as_int(get("nvmlDeviceGetTotalEccErrors", args=(error_type, counter)))
    return facts


def _remapped_rows(value: Any) -> dict[str, Any]:
    """(correctable, uncorrectable, pending, failure) from a list or an object."""
    if isinstance(value, list | tuple) and len(value) >= 4:
        corr, unc, pending, failure = (as_int(v) for v in value[:4])
    elif isinstance(value, dict):
        corr = _sum_ints(v for k, v in value.items() if k.lower().startswith("corr"))
        unc = _sum_ints(v for k, v in value.items() if k.lower().startswith("unc"))
        pending = as_int(_pick(value, "pending"))
        failure = as_int(_pick(value, "fail"))
    else:
        return {}
    return {
        "remapped_rows_correctable": corr,
        "remapped_rows_uncorrectable": unc,
        "remapped_rows_pending": None if pending is None else pending != 0,
        "remapped_rows_failure": None if failure is None else failure != 0,
    }


def _sum_ints(values: Any) -> int | None:
    ints = [i for i in (as_int(v) for v in values) if i is not None]
    return sum(ints) if ints else None


def _pcie(get: Callable[..., Any]) -> dict[str, Any]:
    return {
        "pcie_link_width": as_int(get("nvmlDeviceGetCurrPcieLinkWidth")),
        "pcie_link_width_max": as_int(get("nvmlDeviceGetMaxPcieLinkWidth")),
        "pcie_link_generation": as_int(get("nvmlDeviceGetCurrPcieLinkGeneration")),
        "pcie_link_generation_max": as_int(
            get("nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetGpuMaxPcieLinkGeneration")
        ),
    }


def _nvlinks(device: Device) -> list[dict[str, Any]]:
    """The state of every link the GPU answers for: past NVML_NVLINK_MAX_LINKS (18) only
    while links keep answering, so Blackwell's larger count is read and others are not
    asked 36 times."""
    links: list[dict[str, Any]] = []
    for link in range(NVLINK_HARD_LIMIT):
        if link >= NVLINK_MAX_LINKS and (not links or links[-1]["link"] != link - 1):
            break
        state = as_int(device.get("nvmlDeviceGetNvLinkState", args=(link,)))
        if state is not None:
            links.append({"link": link, "up": state == 1})
        if device.lost:
            break
    return links


def _fabric(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        state, status = as_int(value.get("state")), as_int(value.get("status"))
    else:
        state, status = as_int(value), None
    if state is None:
        return {}
    facts: dict[str, Any] = {"fabric_state": FABRIC_STATES.get(state, str(state))}
    if status is not None:
        facts["fabric_status"] = status
    return facts


def _reasons(value: Any) -> list[str] | None:
    mask = as_int(value)
    if mask is None:
        return None
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"0x{unknown:x}")
    return names


def _processes(value: Any, table: ProcessTable) -> list[dict[str, Any]] | None:
    if not isinstance(value, list):
        return None
    found = []
    for entry in value:
        if not isinstance(entry, dict):
            continue
        pid = as_int(entry.get("pid"))
        if pid is None:
            continue
        used = as_int(_pick(entry, "usedgpumemory", "used_memory", "usedmemory"))
        process = table.by_pid(pid)
        found.append(
            {"pid": pid, "name": process.name if process else None, "used_memory_bytes": used}
        )
    return found


def recovery_action(value: Any) -> str | None:
    """The GPU recovery action field, from nvmlDeviceGetFieldValues' answer."""
    entries = value if isinstance(value, list) else [value]
    for entry in entries:
        if isinstance(entry, dict):
            if as_int(entry.get("nvmlReturn")) not in (None, 0):
                return None  # the driver does not support the field
            raw = entry.get("value")
            number = as_int(raw) if not isinstance(raw, dict) else _union_value(entry, raw)
        else:
            number = as_int(entry)
        if number is not None:
            return RECOVERY_ACTIONS.get(number, str(number))
    return None


def _union_value(entry: dict[str, Any], raw: dict[str, Any]) -> int | None:
    """The integer in an nvmlValue_t union, read by the field's value type."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    value_type = as_int(entry.get("valueType"))
    name = member.get(1 if value_type is None else value_type, "uiVal")
    return as_int(raw.get(name, raw.get("uiVal")))


# What each recovery action asks for: the severity and repair action gpuprobe gives it, and
# the words for it (the `gpus` check, and the `xid` check on a GpuRecoveryAction event).
RECOVERY_VERDICTS = {
    "GPU_RESET": (Severity.CRITICAL, Action.RESET_GPU, "a GPU reset"),
    "BUS_RESET": (Severity.CRITICAL, Action.RESET_GPU, "a bus reset"),
    "DRAIN_AND_RESET": (Severity.CRITICAL, Action.RESET_GPU, "draining and a GPU reset"),
    "NODE_REBOOT": (Severity.CRITICAL, Action.REBOOT_NODE, "a node reboot"),
    "SYSTEM_REBOOT": (Severity.CRITICAL, Action.REBOOT_NODE, "a system reboot"),
    # An operator must drain the GPU's peer-to-peer work: as severe as Xid 154's Drain P2P.
    "DRAIN_P2P": (Severity.CRITICAL, Action.DRAIN_NODE, "draining peer-to-peer work"),
    "RECOVER_IMEX_DOMAIN": (Severity.WARNING, Action.FIX_CONFIG, "recovering its IMEX domain"),
}
