"""A vendor whose backend offers no rules (`checks.rules.vendors`), shown by the neutral
checks from the GPU interface alone (`gpu.backend.GpuBackend`): its GPUs' identity and
health in the `gpus` check, its driver in the `driver` check. Nothing judges them, so the
check cannot vouch for them (`floor` UNKNOWN), never a false OK."""

from __future__ import annotations

from typing import Any

from gpuprobe.checks.rules.vendor_part import Part
from gpuprobe.gpu.backend import GpuBackend, GpuHealth
from gpuprobe.report import Status


def gpus_part(backend: GpuBackend) -> Part:
    """The vendor's GPUs as its backend tells them, in the `gpus` check's entries."""
    health = backend.health()
    names = sorted({h.identity.name for h in health if h.identity.name})
    count = f"{len(health)} {backend.vendor} GPU{'s' if len(health) != 1 else ''}"
    summary = f"{count}{': ' + ', '.join(names) if names else ''}; no rules judge them"
    data = {"gpus": [_entry(h) for h in health]}
    return Part(summary, [], data, len(health), Status.UNKNOWN)


def _entry(health: GpuHealth) -> dict[str, Any]:
    gpu = health.identity
    entry: dict[str, Any] = {"index": gpu.index, "vendor": gpu.vendor}
    named = {"uuid": gpu.uuid, "name": gpu.name, "pci_bus_id": gpu.pci_address}
    entry.update({key: value for key, value in named.items() if value is not None})
    entry["lost"] = health.lost
    if health.temperature_celsius is not None:
        entry["temperature_celsius"] = health.temperature_celsius
    if health.errors:
        entry["errors"] = dict(health.errors)
    return entry


def driver_part(backend: GpuBackend, data: dict[str, Any], first: bool) -> Part:
    """The vendor's driver as its backend tells it, under `data.<vendor>`; the first vendor's
    version is the check's `driver_version`."""
    facts = backend.driver()
    data[backend.vendor] = {"vendor": backend.vendor, "driver_version": facts.version}
    if first:
        data["driver_version"] = facts.version
    if facts.version is None:
        return Part(f"{backend.vendor} driver version unknown", floor=Status.UNKNOWN)
    return Part(f"{backend.vendor} driver {facts.version}; no rules judge it", floor=Status.UNKNOWN)
