"""NVML's critical events other than XIDs: what each type means, the code, severity and action
it is given (the `xid` check reports them), and what to read when one is drained.

An event names only its GPU and its type (nvml.h: `eventData` is 0 for every type but
XidCriticalError), so a GpuRecoveryAction event is judged by the GPU's recovery action field
(`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`), read when the event is drained. Each maps onto the
code the `gpus` check raises for the same fault from NVML's counters and states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprobe.gpu.nvidia.device import Device
from gpuprobe.gpu.nvidia.health import FIELD_GPU_RECOVERY_ACTION, RECOVERY_VERDICTS, recovery_action
from gpuprobe.host.nvml import Nvml
from gpuprobe.report import Action, Severity

RECOVERY = "GpuRecoveryAction"


@dataclass(frozen=True)
class EventInfo:
    """What an event type means: the finding code, a description, severity and action."""

    type: str
    code: str
    description: str
    severity: Severity
    action: Action

    @property
    def critical(self) -> bool:
        """Critical events are sticky, as critical XIDs are."""
        return self.severity is Severity.CRITICAL


_C = Severity.CRITICAL
EVENTS = {
    "DoubleBitEccError": EventInfo(
        "DoubleBitEccError",
        "ECC_UNCORRECTABLE",
        "a double-bit (uncorrectable) ECC error",
        _C,
        Action.RESET_GPU,
    ),
    "FatalPoisonError": EventInfo(
        "FatalPoisonError",
        "ECC_UNCORRECTABLE",
        "a fatal poison error (corrupted memory was consumed and not contained)",
        _C,
        Action.RESET_GPU,
    ),
    "DramRetirementFailure": EventInfo(
        "DramRetirementFailure",
        "ROW_REMAP_FAILURE",
        "a DRAM retirement failure (a failing row could not be remapped)",
        _C,
        Action.HARDWARE_INSPECTION,
    ),
    "GpuUnavailableError": EventInfo(
        "GpuUnavailableError",
        "GPU_LOST",
        "the GPU became unavailable",
        _C,
        Action.REBOOT_NODE,
    ),
    RECOVERY: EventInfo(
        RECOVERY,
        "GPU_RECOVERY_REQUIRED",
        "a recovery action event (its recovery action field names none: a GPU reset is assumed)",
        _C,
        Action.RESET_GPU,
    ),
}


def info(event_type: str, detail: str = "") -> EventInfo | None:
    """The verdict on an event type (None for a type that raises nothing); `detail` is the
    recovery action a GpuRecoveryAction event found."""
    known = EVENTS.get(event_type)
    if known is None or event_type != RECOVERY or detail not in RECOVERY_VERDICTS:
        return known
    severity, action, what = RECOVERY_VERDICTS[detail]
    description = f"a recovery action event: the driver asks for {what}"
    return EventInfo(RECOVERY, known.code, description, severity, action)


def detail(nvml: Nvml, event_type: str, device: int) -> str:
    """What to keep of an event when it is drained: a GpuRecoveryAction event's recovery
    action (`GPU_RESET`, ...; empty when the field cannot be read)."""
    if event_type != RECOVERY:
        return ""
    return recovery_field(nvml, device) or ""


def recovery_field(nvml: Nvml, device: int) -> str | None:
    """The GPU's recovery action field (`NONE`, `GPU_RESET`, ...; None when it cannot be
    read): what a GpuRecoveryAction event, or an Xid 154 that came only as an event, asks."""
    value: Any = Device(nvml, device).get(
        "nvmlDeviceGetFieldValues", args=([FIELD_GPU_RECOVERY_ACTION],)
    )
    return recovery_action(value)
