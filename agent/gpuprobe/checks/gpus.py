"""Check `gpus`: are all the GPUs there, and what are they?

Counts the NVIDIA GPUs on the PCI bus (the ground truth), holds NVML's count and the
expected count against it, and lists each GPU's identity: index, UUID, name, serial, PCI bus
id, memory, persistence and compute mode. A GPU NVML reports lost is named while the others
are still reported.
"""

from __future__ import annotations

from typing import Any

from gpuprobe.config import Config
from gpuprobe.devices import Device, gpu_count, open_gpus, text
from gpuprobe.host import Host
from gpuprobe.pci import PciDevice, normalize_bus_id, nvidia_devices
from gpuprobe.report import Action, CheckResult, Finding, Severity, Status, gpu_resource

NAME = "gpus"
COMPUTE_MODES = {0: "Default", 1: "ExclusiveThread", 2: "Prohibited", 3: "ExclusiveProcess"}


def run(host: Host, config: Config) -> CheckResult:
    """Count, list and identify the GPUs."""
    pci = nvidia_devices(host.fs)
    bus = [d for d in pci if d.is_gpu]
    expected = config.gpus.expect
    count = gpu_count(host.nvml)
    data: dict[str, Any] = {
        "gpus_on_pci_bus": len(bus),
        "gpus_seen_by_nvml": count,
        "expected_gpus": expected,
        "nvswitches_on_pci_bus": sum(d.is_nvswitch for d in pci),
        "gpus": [],
    }
    if count is None:
        findings = _count_findings(bus, None, expected, [])
        if not bus:
            return CheckResult(NAME, "no NVIDIA GPU on this node", findings, data)
        return CheckResult(
            NAME,
            f"{len(bus)} GPUs on the PCI bus; NVML unavailable (the driver check says why)",
            findings,
            data,
            floor=Status.UNKNOWN,
        )
    devices = open_gpus(host.nvml, count)
    inventories = [inventory(d) for d in devices]
    data["gpus"] = inventories
    findings = _count_findings(bus, count, expected, inventories)
    findings += [
        f for d, inv in zip(devices, inventories, strict=True) for f in _device_findings(d, inv)
    ]
    return CheckResult(NAME, _summary(inventories, devices, len(bus)), findings, data)


def inventory(device: Device) -> dict[str, Any]:
    """One GPU's identity as NVML tells it; what it cannot tell is left out."""
    if device.lost:  # its handle is lost: NVML can tell nothing more
        return {"index": device.index, "lost": True}
    facts: dict[str, Any] = {"index": device.index}
    facts["uuid"] = text(device.get("nvmlDeviceGetUUID"))
    facts["name"] = text(device.get("nvmlDeviceGetName"))
    facts["serial"] = text(device.get("nvmlDeviceGetSerial"))
    pci = device.get("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo")
    bus_id = text(pci.get("busId")) if isinstance(pci, dict) else None
    facts["pci_bus_id"] = normalize_bus_id(bus_id) if bus_id else None
    memory = device.get("nvmlDeviceGetMemoryInfo")
    if isinstance(memory, dict) and isinstance(memory.get("total"), int):
        facts["memory_total_bytes"] = memory["total"]
    persistence = device.get("nvmlDeviceGetPersistenceMode")
    if isinstance(persistence, int):
        facts["persistence_mode"] = persistence == 1
    compute = device.get("nvmlDeviceGetComputeMode")
    if isinstance(compute, int):
        facts["compute_mode"] = COMPUTE_MODES.get(compute, str(compute))
    facts["lost"] = _lost_now(device)
    if device.errors:
        facts["nvml_errors"] = dict(device.errors)
    return {k: v for k, v in facts.items() if v is not None}


def _lost_now(device: Device) -> bool | None:
    """True when a query found the GPU lost (else None, so the fact is left out)."""
    return True if device.lost else None


def _device_findings(device: Device, facts: dict[str, Any]) -> list[Finding]:
    resource = gpu_resource(device.index, facts.get("uuid"))
    where = f"GPU {device.index}" + (f" ({facts['pci_bus_id']})" if "pci_bus_id" in facts else "")
    if device.lost:
        return [
            Finding(
                "GPU_LOST",
                Severity.CRITICAL,
                f"{where} is lost: NVML reports GpuIsLost (fallen off the bus or hung). "
                "Reboot the node; inspect the GPU if it happens again",
                Action.REBOOT_NODE,
                resource,
            )
        ]
    if device.reset_required:
        return [
            Finding(
                "GPU_RESET_REQUIRED",
                Severity.CRITICAL,
                f"{where}: NVML reports that the GPU needs a reset before it can be used",
                Action.RESET_GPU,
                resource,
            )
        ]
    return []


def _count_findings(
    bus: list[PciDevice], count: int | None, expected: int | None, inventories: list[dict[str, Any]]
) -> list[Finding]:
    """At most one GPU_COUNT_MISMATCH: the bus against the expected count, then NVML
    against the bus, then more GPUs than expected."""
    if expected is not None and len(bus) < expected:
        return [
            Finding(
                "GPU_COUNT_MISMATCH",
                Severity.CRITICAL,
                f"{expected} GPUs are expected but the PCI bus shows {len(bus)}: a GPU has "
                "fallen off the bus or is missing. Reboot the node; inspect it if the GPU "
                "stays missing",
                Action.REBOOT_NODE,
            )
        ]
    if count is not None and count < len(bus):
        seen = {inv.get("pci_bus_id") for inv in inventories}
        missing = [d.address for d in bus if d.address not in seen]
        exact = len(missing) == len(bus) - count  # else a lost GPU hides which one is missing
        named = f" (not seen: {', '.join(missing)})" if exact else ""
        return [
            Finding(
                "GPU_COUNT_MISMATCH",
                Severity.CRITICAL,
                f"the PCI bus shows {len(bus)} NVIDIA GPUs but NVML sees {count}{named}: the "
                "driver failed to initialise a GPU. Reboot the node; inspect the GPU if it "
                "stays missing",
                Action.REBOOT_NODE,
            )
        ]
    if expected is not None and count is not None and count > expected:
        return [
            Finding(
                "GPU_COUNT_MISMATCH",
                Severity.WARNING,
                f"{expected} GPUs are expected but NVML sees {count}: correct the expected count",
                Action.FIX_CONFIG,
            )
        ]
    return []


def _summary(inventories: list[dict[str, Any]], devices: list[Device], on_bus: int) -> str:
    total = len(devices)
    if total < on_bus:
        return f"NVML sees {total} of the {on_bus} GPUs on the PCI bus"
    if total == 0:
        return "NVML sees no GPU"
    lost = sum(d.lost for d in devices)
    if lost:
        return f"{lost} of {total} GPUs lost"
    names = sorted({inv["name"] for inv in inventories if "name" in inv})
    model = f": {', '.join(names)}" if names else ""
    return f"{total} GPU{'s' if total != 1 else ''}{model}"
