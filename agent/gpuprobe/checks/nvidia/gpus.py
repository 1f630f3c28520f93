"""NVIDIA's part of the `gpus` check: the NVIDIA GPUs on the PCI bus (the ground truth)
against NVML's count and the expected count, each GPU's identity and health as NVML tells it
(read by `gpuprobe.gpu.nvidia.gpus` and `gpuprobe.gpu.nvidia.health`, judged by
`gpuprobe.checks.nvidia.gpu_health`), how long each has been idle, the fabric manager on an
NVSwitch system and the node's IMEX domain (`gpuprobe.checks.nvidia.imex`).

NVIDIA's part leads the check: it always answers (on a node without NVIDIA GPUs its data
still counts none), so the check's first data keys are NVIDIA's.
"""

from __future__ import annotations

from typing import Any

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.nvidia import imex as imex_check
from gpuprobe.checks.nvidia.gpu_health import health_findings, idle_finding
from gpuprobe.checks.rules.sections import GPUS, GpusConfig
from gpuprobe.checks.rules.vendor_part import Part
from gpuprobe.config import Config
from gpuprobe.gpu.nvidia import fabric as imex
from gpuprobe.gpu.nvidia.gpus import (
    GpuReading,
    NvidiaGpuFacts,
    fabric_manager_running,
    nvml_gpu_count,
    read_bus,
    read_gpus,
)
from gpuprobe.gpu.own_load import own_gpu_test_running
from gpuprobe.gpu.pci import PciDevice
from gpuprobe.host import Host
from gpuprobe.report import Action, Finding, Severity, Status, gpu_resource


class NvidiaGpus:
    """NVIDIA's rules of the `gpus` check (`checks.rules.vendor_part.GpusRules`)."""

    def count(self, ctx: CheckContext) -> int:
        """The NVIDIA GPUs on the PCI bus."""
        return len(read_bus(ctx.host).gpus)

    def judge(
        self, ctx: CheckContext, config: Config, idle_since: dict[str, float], others: int
    ) -> Part:
        """NVIDIA's GPUs counted, listed and judged; on a node without them, the counts."""
        return _nvidia(ctx.host, idle_since, config, others)


def _nvidia(host: Host, idle_since: dict[str, float], config: Config, others: int) -> Part:
    """The NVIDIA GPUs (`others`: how many GPUs of other vendors the node has besides)."""
    bus = read_bus(host)
    expected = config.section(GPUS, GpusConfig).expect
    count = nvml_gpu_count(host)
    seen = len(bus.gpus) or count or 0
    data: dict[str, Any] = {
        "gpus_on_pci_bus": len(bus.gpus),
        "gpus_seen_by_nvml": count,
        "expected_gpus": expected,
        "nvswitches_on_pci_bus": bus.nvswitches,
        "gpus": [],
    }
    if count is None:
        findings = _count_findings(bus.gpus, None, expected if not others else None, [])
        if not bus.gpus:
            return Part("no NVIDIA GPU on this node", findings, data, seen)
        return Part(
            f"{len(bus.gpus)} GPUs on the PCI bus; NVML unavailable (the driver check says why)",
            findings,
            data,
            seen,
            floor=Status.UNKNOWN,
        )
    loaded = own_gpu_test_running(host)  # before the readings: a test may end while they run
    readings = read_gpus(host, count, bus.gpus)
    gpus = [r.facts for r in readings]
    # The entries are each GPU's facts as NVML told them, with how long it has been idle.
    entries = [facts.to_data() for facts in gpus]
    data["gpus"] = entries
    idle = _track_idle(host, idle_since, gpus, frozen=loaded or own_gpu_test_running(host))
    for entry, seconds in zip(entries, idle, strict=True):
        if seconds is not _NOT_IDLE:
            entry["idle_seconds"] = seconds
    if data["nvswitches_on_pci_bus"] or any(_fabric_used(g) for g in gpus):
        data["fabric_manager_running"] = fabric_manager_running(host)
    findings = _count_findings(bus.gpus, count, expected, gpus)
    for reading, seconds in zip(readings, idle, strict=True):
        idle_seconds = seconds if isinstance(seconds, float) else None
        findings += _device_findings(reading, config, data, idle_seconds)
    findings += _fabric_manager_findings(data, gpus, findings)
    domain = imex.read(host)
    if domain.in_domain:  # a single-node NVLink system has nothing to say about IMEX
        data["imex"] = domain.to_data()
    findings += imex_check.findings(domain)
    return Part(_summary(readings, len(bus.gpus), findings), findings, data, seen)


def _fabric_manager_findings(
    data: dict[str, Any], gpus: list[NvidiaGpuFacts], findings: list[Finding]
) -> list[Finding]:
    """FABRIC_NOT_READY for the node: NVSwitches on the bus and no nvidia-fabricmanager, when
    no GPU's own fabric state has said so already.

    Without the fabric manager, GPUs without the fabric info API (A100-style: NotSupported)
    cannot start CUDA (error 802, system not yet initialized); with registration COMPLETED,
    running work goes on but NVLink partitions cannot change and GPU resets fail.
    """
    if not data["nvswitches_on_pci_bus"] or data.get("fabric_manager_running") is not False:
        return []
    if any(f.code == "FABRIC_NOT_READY" for f in findings):
        return []
    states = {g.fabric_state for g in gpus if not g.lost}
    if states <= {"COMPLETED"} and states:
        return [
            Finding(
                "FABRIC_NOT_READY",
                Severity.WARNING,
                f"{data['nvswitches_on_pci_bus']} NVSwitches on the PCI bus and no "
                "nvidia-fabricmanager runs: the GPUs registered, but NVLink partitions cannot "
                "change and GPU resets fail. Start the fabric manager (systemctl start "
                "nvidia-fabricmanager) at the driver's exact version",
                Action.FIX_CONFIG,
            )
        ]
    return [
        Finding(
            "FABRIC_NOT_READY",
            Severity.CRITICAL,
            f"{data['nvswitches_on_pci_bus']} NVSwitches on the PCI bus and no "
            "nvidia-fabricmanager runs: CUDA cannot start on the GPUs (error 802, system not "
            "yet initialized). Start the fabric manager (systemctl start nvidia-fabricmanager) "
            "at the driver's exact version",
            Action.FIX_CONFIG,
        )
    ]


def _fabric_used(facts: NvidiaGpuFacts) -> bool:
    return facts.fabric_state not in (None, "NOT_SUPPORTED")


# A GPU whose idleness NVML cannot tell has no `idle_seconds` at all.
_NOT_IDLE = object()


def _track_idle(
    host: Host, since: dict[str, float], gpus: list[NvidiaGpuFacts], frozen: bool
) -> list[float | object | None]:
    """Each GPU's `idle_seconds` from the time it was first seen idle (kept by the runner):
    None when busy, `_NOT_IDLE` when NVML cannot tell. While gpuprobe's own NCCL test runs,
    the GPUs count as they were before it: the test's load neither ends an idle stretch nor
    starts one."""
    now = host.clock.wall()
    found: list[float | object | None] = []
    for facts in gpus:
        key = facts.uuid or f"index:{facts.index}"
        idle = facts.idle
        if frozen and idle is not None:
            idle = key in since
        if idle:
            found.append(round(now - since.setdefault(key, now), 3))
            continue
        since.pop(key, None)
        found.append(None if idle is False else _NOT_IDLE)
    return found


def _device_findings(
    reading: GpuReading, config: Config, data: dict[str, Any], idle_seconds: float | None
) -> list[Finding]:
    # Without a UUID (a handle NVML lost) the resource's UUID is empty; the message names
    # the GPU's PCI address.
    facts = reading.facts
    resource = gpu_resource(reading.index, facts.uuid)
    where = f"GPU {reading.index}" + (f" ({facts.address})" if facts.address else "")
    if reading.lost:
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
    if reading.reset_required:
        return [
            Finding(
                "GPU_RESET_REQUIRED",
                Severity.CRITICAL,
                f"{where}: NVML reports that the GPU needs a reset before it can be used",
                Action.RESET_GPU,
                resource,
            )
        ]
    findings = health_findings(
        facts,
        resource,
        where,
        nvswitch_system=bool(data["nvswitches_on_pci_bus"]),
        fabric_manager_running=data.get("fabric_manager_running"),
    )
    window = config.section(GPUS, GpusConfig).idle_window_seconds
    if idle_seconds is not None and idle_seconds > window:
        findings.append(idle_finding(idle_seconds, window, resource, where))
    return findings


def _count_findings(
    bus: list[PciDevice], count: int | None, expected: int | None, gpus: list[NvidiaGpuFacts]
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
        seen = {gpu.address for gpu in gpus}
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


def _summary(readings: list[GpuReading], on_bus: int, findings: list[Finding]) -> str:
    gpus = [r.facts for r in readings]
    total = len(readings)
    if total < on_bus:
        return f"NVML sees {total} of the {on_bus} GPUs on the PCI bus"
    if total == 0:
        return "NVML sees no GPU"
    lost = sum(r.lost for r in readings)
    if lost:
        return f"{lost} of {total} GPUs lost"
    names = sorted({gpu.name for gpu in gpus if gpu.name is not None})
    model = f": {', '.join(names)}" if names else ""
    summary = f"{total} GPU{'s' if total != 1 else ''}{model}"
    troubled = _by_gpu(findings)
    if troubled:
        shown = [f"GPU {i} {', '.join(codes)}" for i, codes in sorted(troubled.items())[:3]]
        more = f" and {len(troubled) - 3} more" if len(troubled) > 3 else ""
        summary += f"; {len(troubled)} with findings: {'; '.join(shown)}{more}"
    idle = sum(1 for gpu in gpus if gpu.idle)
    if idle:
        summary += f"; {idle} idle"
    return summary


def _by_gpu(findings: list[Finding]) -> dict[int, list[str]]:
    """The finding codes of each GPU, worst severity first."""
    found: dict[int, list[Finding]] = {}
    for f in findings:
        if f.resource.startswith("gpu:"):
            found.setdefault(int(f.resource.split(":")[1]), []).append(f)
    return {
        i: list(dict.fromkeys(f.code for f in sorted(fs, key=lambda f: -f.severity.status.rank)))
        for i, fs in found.items()
    }
