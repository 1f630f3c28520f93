"""What one GPU's health figures mean (`gpuprobe.gpu.nvidia.gpus.NvidiaGpuFacts`, as
`gpuprobe.gpu.nvidia.health.read_health` reads them): the `gpus` check's findings on ECC,
remapped rows, PCIe, NVLink, fabric, clock event reasons, recovery action and idleness."""

from __future__ import annotations

from typing import Any

from gpuprobe.gpu.nvidia.gpus import NvidiaGpuFacts
from gpuprobe.gpu.nvidia.health import RECOVERY_VERDICTS
from gpuprobe.report import Action, Finding, Severity


def health_findings(
    facts: NvidiaGpuFacts,
    resource: str,
    where: str,
    *,
    nvswitch_system: bool,
    fabric_manager_running: bool | None,
) -> list[Finding]:
    """The findings one GPU's health figures raise."""
    findings: list[Finding] = []
    for judge in (_ecc_findings, _remap_findings, _pcie_findings, _clock_findings):
        findings += judge(facts, resource, where)
    findings += _nvlink_findings(facts, resource, where, nvswitch_system)
    findings += _fabric_findings(facts, resource, where, fabric_manager_running)
    findings += _recovery_findings(facts, resource, where)
    return findings


def _ecc_findings(facts: NvidiaGpuFacts, resource: str, where: str) -> list[Finding]:
    volatile = facts.ecc_uncorrected_volatile
    if not volatile:
        return []
    aggregate = facts.ecc_uncorrected_aggregate
    lifetime = f" ({aggregate} over its lifetime)" if aggregate is not None else ""
    return [
        Finding(
            "ECC_UNCORRECTABLE",
            Severity.CRITICAL,
            f"{where} has {volatile} uncorrectable ECC error{_s(volatile)} since the driver "
            f"loaded{lifetime}: its memory returned corrupt data. Drain it and reset the GPU; "
            "inspect it if uncorrectable errors return",
            Action.RESET_GPU,
            resource,
        )
    ]


def _remap_findings(facts: NvidiaGpuFacts, resource: str, where: str) -> list[Finding]:
    findings = []
    unc = facts.remapped_rows_uncorrectable
    rows = f"{unc} uncorrectable row{_s(unc)} remapped" if unc else "rows remapped"
    if facts.remapped_rows_failure:
        findings.append(
            Finding(
                "ROW_REMAP_FAILURE",
                Severity.CRITICAL,
                f"{where}: row remapping failed (no spare row left for a failing memory row): "
                "take the GPU out of service and have it inspected or replaced",
                Action.HARDWARE_INSPECTION,
                resource,
            )
        )
    if facts.remapped_rows_pending:
        findings.append(
            Finding(
                "ROW_REMAP_PENDING",
                Severity.CRITICAL,
                f"{where} has {rows}; a GPU reset is pending to activate the remapping: drain "
                "the GPU and reset it",
                Action.RESET_GPU,
                resource,
            )
        )
    if facts.retired_pages_pending:
        findings.append(
            Finding(
                "RETIRED_PAGES_PENDING",
                Severity.CRITICAL,
                f"{where} has memory pages waiting to be retired: drain the GPU and reset it "
                "(or reboot) so the failing pages are taken out of use",
                Action.RESET_GPU,
                resource,
            )
        )
    return findings


def _pcie_findings(facts: NvidiaGpuFacts, resource: str, where: str) -> list[Finding]:
    width, widest = facts.pcie_link_width, facts.pcie_link_width_max
    if width is None or widest is None or width >= widest or width == 0:
        return []  # a lower *generation* is power saving on an idle GPU, not a fault
    gen = facts.pcie_link_generation
    at = f" at Gen{gen}" if gen else ""
    return [
        Finding(
            "PCIE_LINK_DEGRADED",
            Severity.WARNING,
            f"{where}: PCIe link runs x{width}{at} of its x{widest}: host-to-GPU bandwidth is "
            "cut. Reseat the GPU or its riser and check the slot",
            Action.HARDWARE_INSPECTION,
            resource,
        )
    ]


def _nvlink_findings(
    facts: NvidiaGpuFacts, resource: str, where: str, nvswitch_system: bool
) -> list[Finding]:
    links = facts.nvlinks or []
    down = [link["link"] for link in links if not link["up"]]
    if not down:
        return []
    # A PCIe card without an NVLink bridge reports every link down: only links that should
    # be up count, on a board whose other links are up or that has NVSwitches.
    if len(down) == len(links) and not nvswitch_system:
        return []
    named = ", ".join(str(n) for n in down)
    return [
        Finding(
            "NVLINK_DOWN",
            Severity.CRITICAL,
            f"{where}: NVLink link{_s(len(down))} {named} down ({len(links) - len(down)} of "
            f"{len(links)} up): GPU-to-GPU traffic is cut or slowed. Drain the GPU and reset "
            "it; inspect the board if the link stays down",
            Action.RESET_GPU,
            resource,
        )
    ]


def _fabric_findings(
    facts: NvidiaGpuFacts, resource: str, where: str, fabric_manager_running: bool | None
) -> list[Finding]:
    state = facts.fabric_state
    status = facts.fabric_status
    failed = state == "COMPLETED" and status not in (None, 0)
    if state not in ("NOT_STARTED", "IN_PROGRESS") and not failed:
        return []
    what = (
        f"NVSwitch fabric registration completed with error {status}"
        if failed
        else f"NVSwitch fabric registration is {str(state).lower().replace('_', ' ')}"
    )
    if fabric_manager_running is False:
        return [
            Finding(
                "FABRIC_NOT_READY",
                Severity.CRITICAL,
                f"{where}: {what} and no nvidia-fabricmanager runs: CUDA cannot start on an "
                "NVSwitch system without it. Start the fabric manager (systemctl start "
                "nvidia-fabricmanager) at the driver's exact version",
                Action.FIX_CONFIG,
                resource,
            )
        ]
    if state == "IN_PROGRESS":
        return [
            Finding(
                "FABRIC_NOT_READY",
                Severity.WARNING,
                f"{where}: {what}: CUDA applications fail until it completes. Wait and check "
                "again; reboot the node if it never completes",
                Action.NONE,
                resource,
            )
        ]
    return [
        Finding(
            "FABRIC_NOT_READY",
            Severity.CRITICAL,
            f"{where}: {what}: CUDA cannot start. Read the fabric manager's log, restart it, "
            "and reboot the node if the GPU still does not register",
            Action.REBOOT_NODE,
            resource,
        )
    ]


def _clock_findings(facts: NvidiaGpuFacts, resource: str, where: str) -> list[Finding]:
    reasons = set(facts.clock_event_reasons or [])
    findings = []
    temperature = facts.temperature_celsius
    slowdown = facts.temperature_slowdown_celsius
    hot = temperature is not None and slowdown is not None and temperature >= slowdown
    if reasons & {"SwThermalSlowdown", "HwThermalSlowdown"} or hot:
        degrees = f" at {temperature} °C" if temperature is not None else ""
        limit = f" (slowdown at {slowdown} °C)" if slowdown is not None else ""
        findings.append(
            Finding(
                "THERMAL_SLOWDOWN",
                Severity.WARNING,
                f"{where} is slowed down by heat{degrees}{limit}: check the cooling and airflow "
                "(fans, inlet temperature, blocked heatsink)",
                Action.HARDWARE_INSPECTION,
                resource,
            )
        )
    if "HwSlowdown" in reasons:
        findings.append(
            Finding(
                "HW_SLOWDOWN",
                Severity.WARNING,
                f"{where}: hardware slowdown is active (clocks cut by half or more, from heat, "
                "a power brake or a power excursion): check the power supplies and cooling",
                Action.HARDWARE_INSPECTION,
                resource,
            )
        )
    if "HwPowerBrakeSlowdown" in reasons:
        findings.append(
            Finding(
                "POWER_BRAKE",
                Severity.WARNING,
                f"{where}: the external power brake is asserted (the system's power supply "
                "cannot feed the GPUs): check the power supplies and the chassis power budget",
                Action.HARDWARE_INSPECTION,
                resource,
            )
        )
    return findings


def _recovery_findings(facts: NvidiaGpuFacts, resource: str, where: str) -> list[Finding]:
    verdict = RECOVERY_VERDICTS.get(facts.recovery_action or "NONE")
    if verdict is None:
        return []
    severity, action, what = verdict
    return [
        Finding(
            "GPU_RECOVERY_REQUIRED",
            severity,
            f"{where}: the driver's recovery action is {facts.recovery_action}: the GPU "
            f"needs {what} before it is trusted again",
            action,
            resource,
        )
    ]


def idle_finding(idle_seconds: float, window: float, resource: str, where: str) -> Finding:
    """GPU_IDLE: a GPU with no process and no utilization for longer than the window."""
    return Finding(
        "GPU_IDLE",
        Severity.WARNING,
        f"{where} has had no process and no utilization for {_duration(idle_seconds)} "
        f"(window {_duration(window)}): an idle GPU is paid for and unused. Schedule work "
        "on it or release it",
        Action.NONE,
        resource,
    )


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _s(n: Any) -> str:
    return "" if n == 1 else "s"
