"""The XID check's PCIe part: AER counters of the GPUs, NVSwitches and bridges above them.

Read each run from sysfs (`gpuprobe.gpu.aer`). The counters count since boot: a fatal or
non-fatal count above zero on a device is PCIE_AER_FATAL (CRITICAL) or PCIE_AER_NONFATAL
(WARNING) on it, for the rest of the boot (the counters only reset at a reboot). Correctable
errors are normal in small numbers; the daemon keeps each device's correctable totals of its
rounds within `xid.aer_window_seconds`, and a rise faster than `xid.aer_correctable_per_hour`
over them is PCIE_AER_CORRECTABLE (WARNING): the link is marginal. A one-shot check has one
reading and judges no rate. A finding on a GPU names the GPU (`gpu:`), on an NVSwitch the
switch (`nvswitch:`), on a bridge or root port its address (`pci:`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuprobe.checks.xid.memory import XidMemory
from gpuprobe.checks.xid.model import Gpu
from gpuprobe.checks.xid.settings import xid_settings
from gpuprobe.config import Config
from gpuprobe.gpu import aer
from gpuprobe.gpu.view import GpuView
from gpuprobe.host import Host
from gpuprobe.report import Action, Finding, Severity, gpu_resource


@dataclass(frozen=True)
class Where:
    """What a PCI address is to the report: its resource and how messages name it."""

    resource: str
    name: str


def read(
    host: Host, config: Config, gpus: dict[str, Gpu], memory: XidMemory, now: datetime
) -> tuple[list[Finding], list[dict[str, Any]]]:
    """The AER findings and the data of every device read (see the module's docstring)."""
    places = _places(host, gpus)
    devices = aer.read_host(host, list(places))
    history = memory.aer
    stamp = now.timestamp()
    findings: list[Finding] = []
    data: list[dict[str, Any]] = []
    for device in devices:
        where = places.get(device.address) or Where(f"pci:{device.address}", _bridge_name(device))
        rate = None
        correctable = device.counts.get("correctable")
        if correctable is not None:
            rate = _rate(history, device.address, stamp, correctable.total, config)
        findings += _findings(device, where, rate, config)
        data.append(
            {
                "address": device.address,
                "resource": where.resource,
                "below": device.below,
                "root_port": device.root_port,
                **{kind: counts.total for kind, counts in device.counts.items()},
                "errors": {
                    kind: counts.errors for kind, counts in device.counts.items() if counts.errors
                },
                "correctable_per_hour": None if rate is None else round(rate, 3),
            }
        )
    return findings, data


def _places(host: Host, gpus: dict[str, Gpu]) -> dict[str, Where]:
    """The GPUs (NVML's, then those only on the PCI bus) and NVSwitches, by PCI address."""
    places: dict[str, Where] = {}
    for gpu in gpus.values():
        if gpu.pci_bus_id and gpu.index is not None:
            places[gpu.pci_bus_id] = Where(
                gpu_resource(gpu.index, gpu.uuid), f"GPU {gpu.index} ({gpu.pci_bus_id})"
            )
    for device in GpuView(host).nvidia.bus_devices():
        if device.is_gpu and device.address not in places:
            places[device.address] = Where(f"pci:{device.address}", f"GPU {device.address}")
        elif device.is_nvswitch:
            places[device.address] = Where(
                f"nvswitch:{device.address}", f"NVSwitch {device.address}"
            )
    return places


def _bridge_name(device: aer.AerDevice) -> str:
    what = "root port" if device.root_port else "PCIe bridge"
    return f"{what} {device.address} (above {device.below})"


def _rate(
    history: dict[str, list[list[float]]],
    address: str,
    stamp: float,
    total: int,
    config: Config,
) -> float | None:
    """Correctable errors per hour over the kept readings (None with fewer than two)."""
    readings = [
        r
        for r in history.get(address, [])
        if stamp - r[0] <= xid_settings(config).aer_window_seconds
    ]
    if not readings or readings[-1][0] < stamp:
        readings.append([stamp, float(total)])
    if total < readings[0][1]:  # counters went back: a new boot's, start again
        readings = [[stamp, float(total)]]
    history[address] = readings
    first, last = readings[0], readings[-1]
    if last[0] <= first[0]:
        return None
    return (last[1] - first[1]) * 3600.0 / (last[0] - first[0])


def _findings(
    device: aer.AerDevice, where: Where, rate: float | None, config: Config
) -> list[Finding]:
    found = []
    for kind, code, severity in (
        ("fatal", "PCIE_AER_FATAL", Severity.CRITICAL),
        ("nonfatal", "PCIE_AER_NONFATAL", Severity.WARNING),
    ):
        counts = device.counts.get(kind)
        if counts is None or counts.total <= 0:
            continue
        named = ", ".join(f"{name} {n}" for name, n in sorted(counts.errors.items()))
        detail = f" ({named})" if named else ""
        found.append(
            Finding(
                code,
                severity,
                f"{where.name}: {counts.total} {'fatal' if kind == 'fatal' else 'non-fatal'} "
                f"PCIe AER error{'s' if counts.total != 1 else ''} since boot{detail}: the "
                "PCIe link to it failed; drain it, reseat or replace its riser or cable, and "
                "reboot to retrain the link",
                Action.HARDWARE_INSPECTION,
                where.resource,
            )
        )
    limit = xid_settings(config).aer_correctable_per_hour
    if rate is not None and rate > limit:
        counts = device.counts["correctable"]
        named = ", ".join(f"{name} {n}" for name, n in sorted(counts.errors.items()))
        found.append(
            Finding(
                "PCIE_AER_CORRECTABLE",
                Severity.WARNING,
                f"{where.name}: correctable PCIe AER errors rise {rate:.0f}/h (above "
                f"{limit:g}/h; {counts.total} since boot: {named or 'no detail'}): the link "
                "is marginal; reseat or replace its riser or cable",
                Action.HARDWARE_INSPECTION,
                where.resource,
            )
        )
    return found
