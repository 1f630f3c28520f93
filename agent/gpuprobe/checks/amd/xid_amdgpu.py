"""The xid check's judgement of AMD GPUs: amdgpu's faults in the kernel log (AMDGPU_FAULT),
AMD's rules for the kernel journal's amdgpu events.

amdgpu has no XID numbers: its faults are classes of messages (`gpuprobe.gpu.amd.faults`),
each with a severity and an action. One finding per (GPU, cause) with how often it was
logged this boot, the last line's detail and the processes named. Like NVIDIA's XIDs: a
critical cause (a failed reset, an uncorrectable RAS error) stays for the boot; in the daemon
a warning cause (a ring timeout, a recovered reset, VM faults) stays for
`xid.warning_window_seconds` after it last grew. The kernel log is the one the run read for
NVIDIA's XIDs (`gpuprobe.gpu.kernel_sources`: each record's `AmdgpuEvent` parsed once, folded
here) and is judged for amdgpu's faults only where the PCI bus shows AMD GPUs. What it keeps
between runs (each fault's count and when it last grew) is the xid check's memory, handed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict

from gpuprobe.checks.rules.xid_settings import xid_settings
from gpuprobe.config import Config
from gpuprobe.gpu import kernel_log
from gpuprobe.gpu.amd import faults
from gpuprobe.gpu.amd.sysfs import AmdGpu
from gpuprobe.gpu.kernel_sources import KernelLogRead
from gpuprobe.gpu.view import GpuView
from gpuprobe.host import Host
from gpuprobe.report import Action, Finding, Severity, format_time

CODE = "AMDGPU_FAULT"
# A GPU with this many VM faults logged in the boot is in a fault storm.
VM_FAULT_STORM = 10
MAX_PROCESSES = 5


class AmdgpuFaultEntry(TypedDict):
    """One (GPU, cause) in the xid check's `data.amdgpu_faults`."""

    gpu: int | None
    pci_bus_id: str | None
    cause: str
    severity: str
    action: str
    count: int
    detail: str
    processes: list[str]
    last_seen: str | None
    active: bool


@dataclass
class _Fault:
    gpu: AmdGpu | None
    pci: str | None
    cause: str
    count: int = 0
    detail: str = ""
    processes: list[str] = field(default_factory=list)
    last: datetime | None = None

    @property
    def key(self) -> str:
        return f"{self.pci or 'node'}/{self.cause}"


def read(
    host: Host, config: Config, log: KernelLogRead, memory: dict[str, tuple[int, float]]
) -> tuple[list[Finding], list[AmdgpuFaultEntry]] | None:
    """This boot's amdgpu faults in the run's read of the kernel log, as findings and data
    (`memory`: each fault's count and when it last grew, kept by the check between runs);
    None on a node without AMD GPUs."""
    gpus = GpuView(host).amd.sysfs_gpus()
    if not gpus:
        return None
    found = log.amdgpu_faults()
    grouped = _group(_unique(found), {g.pci_address: g for g in gpus})
    wall = host.clock.wall()
    findings: list[Finding] = []
    data: list[AmdgpuFaultEntry] = []
    for fault in grouped:
        cause = faults.CAUSES[fault.cause]
        count, grew = memory.get(fault.key, (0, wall))
        if fault.count != count:
            grew = wall
        memory[fault.key] = (fault.count, grew)
        active = (
            cause.severity == "CRITICAL"
            or wall - grew <= xid_settings(config).warning_window_seconds
        )
        if active:
            findings.append(_finding(fault, cause))
        data.append(
            {
                "gpu": fault.gpu.index if fault.gpu else None,
                "pci_bus_id": fault.pci,
                "cause": fault.cause,
                "severity": cause.severity,
                "action": cause.action,
                "count": fault.count,
                "detail": fault.detail,
                "processes": fault.processes,
                "last_seen": format_time(fault.last) if fault.last else None,
                "active": active,
            }
        )
    return findings, data


def _unique(streams: list[list[faults.AmdgpuFault]]) -> list[faults.AmdgpuFault]:
    """Each logged fault once: kern.log, syslog and /dev/kmsg hold the same kernel lines,
    each stamped its own way. Within a log a line counts once; across logs a fault (its
    GPU, cause, detail and the kernel's text) counts as often as the log holding it most."""
    best: dict[tuple[object, ...], list[faults.AmdgpuFault]] = {}
    for stream in streams:
        lines: dict[str, faults.AmdgpuFault] = {}
        for fault in stream:
            lines.setdefault(fault.line, fault)
        held: dict[tuple[object, ...], list[faults.AmdgpuFault]] = {}
        for fault in lines.values():
            held.setdefault(_key(fault), []).append(fault)
        for key, found in held.items():
            if len(found) > len(best.get(key, [])):
                best[key] = found
    return [fault for found in best.values() for fault in found]


def _key(fault: faults.AmdgpuFault) -> tuple[object, ...]:
    return (fault.pci, fault.cause, fault.detail, kernel_log.kernel_text(fault.line))


def _group(found: list[faults.AmdgpuFault], by_pci: dict[str, AmdGpu]) -> list[_Fault]:
    groups: dict[tuple[str | None, str], _Fault] = {}
    for fault in found:
        gpu = by_pci.get(fault.pci) if fault.pci else None
        group = groups.setdefault((fault.pci, fault.cause), _Fault(gpu, fault.pci, fault.cause))
        group.count += 1
        group.detail = fault.detail or group.detail
        if fault.process and fault.process not in group.processes:
            group.processes = [*group.processes, fault.process][-MAX_PROCESSES:]
        if fault.time and (group.last is None or fault.time > group.last):
            group.last = fault.time
    order = {c: i for i, c in enumerate(faults.CAUSES)}
    return sorted(groups.values(), key=lambda f: (f.gpu.index if f.gpu else -1, order[f.cause]))


def _finding(fault: _Fault, cause: faults.Cause) -> Finding:
    where = (
        f"AMD GPU {fault.gpu.index} ({fault.pci})"
        if fault.gpu
        else (f"the AMD GPU at {fault.pci}" if fault.pci else "an AMD GPU")
    )
    what = cause.description
    if fault.cause == faults.VM_FAULT and fault.count >= VM_FAULT_STORM:
        what = f"a GPU page fault storm ({what})"
    detail = ""
    if fault.detail:
        detail = (
            f" (ring {fault.detail})"
            if fault.cause == faults.RING_TIMEOUT
            else (f" ({fault.detail})")
        )
    times = f"{fault.count} time{'s' if fault.count != 1 else ''} this boot"
    processes = (
        f"; process{'es' if len(fault.processes) > 1 else ''} " + ", ".join(fault.processes)
        if fault.processes
        else ""
    )
    return Finding(
        CODE,
        Severity(cause.severity),
        f"{where}: {what}{detail}, {times}{processes}. {_advice(fault.cause)}",
        Action(cause.action),
        fault.gpu.resource if fault.gpu else "node",
    )


def _advice(cause: str) -> str:
    return {
        faults.RING_TIMEOUT: "Restart the job; if it recurs on this GPU, drain it and reset it",
        faults.GPU_RESET: "Restart the jobs that ran on it; watch for repeats",
        faults.GPU_RESET_FAILED: "Drain the node and reboot it",
        faults.GPU_RESET_UNFINISHED: "Drain the node and reboot it",
        faults.RAS_UNCORRECTABLE: "Drain the GPU and reset it so the bad pages are retired",
        faults.RAS_FATAL: "Drain the GPU and reset it; reboot if the reset fails",
        faults.VM_FAULT: "Fix or restart the workload named (a bad pointer or freed buffer)",
    }[cause]


def summary(entries: list[AmdgpuFaultEntry]) -> str:
    """The summary's AMD part."""
    active = [e for e in entries if e["active"]]
    if not active:
        return "no amdgpu fault"
    gpus = {e["pci_bus_id"] for e in active}
    return (
        f"{len(active)} amdgpu fault{'s' if len(active) != 1 else ''} on {len(gpus)} "
        f"GPU{'s' if len(gpus) != 1 else ''}"
    )
