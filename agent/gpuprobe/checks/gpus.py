"""Check `gpus`: are all the GPUs there, what are they, and are they healthy?

Counts the NVIDIA GPUs on the PCI bus (the ground truth), holds NVML's count and the
expected count against it, and lists each GPU's identity: index, UUID, name, serial, PCI bus
id, memory, persistence and compute mode (read by `gpuprobe.gpu.nvidia.gpus`). A GPU NVML
reports lost is named while the others are still reported. Each GPU's health (ECC, remapped
rows, PCIe, NVLink, fabric, clock event reasons, temperature, power, load, processes) is read
by `gpuprobe.gpu.nvidia.health` and judged by `gpuprobe.checks.nvidia.gpu_health`.

Idle GPUs: the check remembers (its state, `KEEPS`, kept by the runner) since when each GPU
has been idle, so the daemon raises GPU_IDLE once one stays idle past
`gpus.idle_window_seconds`; a one-shot check has no history and only reports idleness in
`data`.

AMD GPUs on the bus are listed after NVIDIA's (`vendor: amd`, indexed in PCI order on their
own) with the amdgpu driver's facts, and judged by `gpuprobe.checks.amd.rules`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict, cast

from gpuprobe.checks.amd import rules as amd
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.nvidia import imex as imex_check
from gpuprobe.checks.nvidia.gpu_health import health_findings, idle_finding
from gpuprobe.checks.record import Check
from gpuprobe.checks.rules.sections import GpusConfig
from gpuprobe.checks.state import Keeps
from gpuprobe.config import Config
from gpuprobe.families import GPU_LABELS, Family, gpu_labels, mappings, number
from gpuprobe.families import text as label
from gpuprobe.gpu.amd.node import AmdNode, read_amd
from gpuprobe.gpu.nvidia import fabric as imex
from gpuprobe.gpu.nvidia.gpus import (
    GpuReading,
    fabric_manager_running,
    nvml_gpu_count,
    read_bus,
    read_gpus,
)
from gpuprobe.gpu.own_load import own_gpu_test_running
from gpuprobe.gpu.pci import PciDevice
from gpuprobe.host import Host
from gpuprobe.report import Action, CheckResult, Finding, Severity, Status, gpu_resource

NAME = "gpus"


class GpuFacts(TypedDict, total=False):
    """One GPU's entry in `data.gpus` (docs/checks.md, check `gpus`): its identity from this
    check, its health from `gpu.nvidia.health.read_health`; what NVML cannot tell is left out."""

    index: int
    vendor: str  # "nvidia" | "amd"
    uuid: str  # an AMD GPU's unique_id (its PCI address without one)
    unique_id: str | None
    driver: str | None
    card: str
    name: str
    serial: str
    pci_bus_id: str
    memory_total_bytes: int
    memory_used_bytes: int
    persistence_mode: bool
    compute_mode: str
    lost: bool
    nvml_errors: dict[str, str]
    temperature_celsius: int
    temperature_slowdown_celsius: int
    temperature_shutdown_celsius: int
    power_watts: float
    power_limit_watts: float
    utilization_gpu_percent: int
    utilization_memory_percent: int
    ecc_mode_enabled: bool
    ecc_uncorrected_volatile: int
    ecc_uncorrected_aggregate: int
    ecc_corrected_volatile: int
    ecc_corrected_aggregate: int
    remapped_rows_correctable: int
    remapped_rows_uncorrectable: int
    remapped_rows_pending: bool
    remapped_rows_failure: bool
    retired_pages_pending: bool
    pcie_link_generation: int
    pcie_link_generation_max: int
    pcie_link_width: int
    pcie_link_width_max: int
    nvlinks: list[dict[str, Any]]
    fabric_state: str
    fabric_status: Any
    clock_event_reasons: list[str]
    processes: list[dict[str, Any]]
    recovery_action: str
    mig_mode_current: int
    idle: bool
    idle_seconds: float | None
    # AMD GPUs:
    pcie_link_speed_gts: float
    pcie_link_speed_max_gts: float
    temperatures_celsius: dict[str, float]
    ras_errors: dict[str, dict[str, int]]
    ras_inaccessible: list[str]
    bad_pages: dict[str, int]
    xgmi: dict[str, Any]
    sysfs_errors: dict[str, str]


class GpusData(TypedDict):
    """The check's data (docs/checks.md, check `gpus`)."""

    gpus_on_pci_bus: int
    gpus_seen_by_nvml: int | None
    expected_gpus: int | None
    nvswitches_on_pci_bus: int
    gpus: list[GpuFacts]
    fabric_manager_running: NotRequired[bool]
    imex: NotRequired[dict[str, Any]]  # the node's IMEX domain, when it is in one
    # With AMD GPUs on the PCI bus:
    amd_gpus_on_pci_bus: NotRequired[int]
    gpus_seen_by_amdgpu: NotRequired[int]


@dataclass
class GpusKept:
    """What the check keeps between runs: since when (wall clock) each GPU has been idle, by
    UUID (`index:<n>` without one)."""

    idle_since: dict[str, float] = field(default_factory=dict)


KEEPS: Keeps[GpusKept] = Keeps(GpusKept)


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Count, list and identify the GPUs."""
    host = ctx.host
    node = read_amd(host)
    result = _nvidia(host, ctx.kept(KEEPS), config, amd_gpus=len(node.gpus))
    if node.gpus:
        _add_amd(result, node, config.section(NAME, GpusConfig).expect)
    return result


def _add_amd(result: CheckResult, node: AmdNode, expected: int | None) -> None:
    """The AMD GPUs' facts and findings, after NVIDIA's; on a node without NVIDIA GPUs the
    summary is theirs alone."""
    data = cast(GpusData, result.data)
    data["amd_gpus_on_pci_bus"] = len(node.gpus)
    data["gpus_seen_by_amdgpu"] = sum(g.bound for g in node.gpus)
    data["gpus"].extend(cast(GpuFacts, amd.gpu_facts(g)) for g in node.gpus)
    nvidia = data["gpus_on_pci_bus"] or data["gpus_seen_by_nvml"]
    findings = amd.count_findings(node.gpus, node.module)
    if not nvidia and expected is not None and len(node.gpus) != expected:
        findings.insert(0, amd.expected_finding(len(node.gpus), expected))
    for gpu in node.gpus:
        findings += amd.health_findings(gpu, node.module)
    result.findings.extend(findings)
    summary = _amd_summary(node, findings)
    result.summary = f"{result.summary}; {summary}" if nvidia else summary
    if not node.module.loaded:
        result.floor = Status.UNKNOWN  # no driver: nothing tells how the GPUs are


def _amd_summary(node: AmdNode, findings: list[Finding]) -> str:
    seen = [g for g in node.gpus if g.bound]
    if not node.module.loaded:
        return (
            f"{len(node.gpus)} AMD GPUs on the PCI bus; amdgpu is not loaded, so their "
            "health is unknown (the driver check says why)"
        )
    names = sorted({g.name for g in seen})
    summary = f"{len(seen)} AMD GPU{'s' if len(seen) != 1 else ''}: {', '.join(names)}"
    if len(seen) < len(node.gpus):
        summary = f"amdgpu drives {len(seen)} of the {len(node.gpus)} AMD GPUs on the PCI bus"
    troubled = sorted({f.resource for f in findings if f.resource.startswith("gpu:")})
    if troubled:
        summary += f"; {len(troubled)} with findings"
    return summary


def _nvidia(host: Host, kept: GpusKept, config: Config, amd_gpus: int) -> CheckResult:
    """The NVIDIA GPUs (`amd_gpus`: how many AMD GPUs the bus shows besides)."""
    bus = read_bus(host)
    expected = config.section(NAME, GpusConfig).expect
    count = nvml_gpu_count(host)
    data: GpusData = {
        "gpus_on_pci_bus": len(bus.gpus),
        "gpus_seen_by_nvml": count,
        "expected_gpus": expected,
        "nvswitches_on_pci_bus": bus.nvswitches,
        "gpus": [],
    }
    if count is None:
        findings = _count_findings(bus.gpus, None, expected if not amd_gpus else None, [])
        if not bus.gpus:
            return CheckResult(NAME, "no NVIDIA GPU on this node", findings, data)
        return CheckResult(
            NAME,
            f"{len(bus.gpus)} GPUs on the PCI bus; NVML unavailable (the driver check says why)",
            findings,
            data,
            floor=Status.UNKNOWN,
        )
    loaded = own_gpu_test_running(host)  # before the readings: a test may end while they run
    table = host.processes()
    readings = read_gpus(host, count, bus.gpus, table)
    gpus = [r.facts for r in readings]
    # The entries are gpu.nvidia's facts (a plain dict) with this check's identity.
    data["gpus"] = cast(list[GpuFacts], gpus)
    _track_idle(host, kept, gpus, frozen=loaded or own_gpu_test_running(host))
    if data["nvswitches_on_pci_bus"] or any(_fabric_used(g) for g in gpus):
        data["fabric_manager_running"] = fabric_manager_running(table)
    findings = _count_findings(bus.gpus, count, expected, gpus)
    for reading in readings:
        findings += _device_findings(reading, config, data)
    findings += _fabric_manager_findings(data, gpus, findings)
    domain = imex.read(host)
    if domain.in_domain:  # a single-node NVLink system has nothing to say about IMEX
        data["imex"] = domain.to_data()
    findings += imex_check.findings(domain)
    return CheckResult(NAME, _summary(readings, len(bus.gpus), findings), findings, data)


def _fabric_manager_findings(
    data: GpusData, gpus: list[dict[str, Any]], findings: list[Finding]
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
    states = {g.get("fabric_state") for g in gpus if not g.get("lost")}
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


def _fabric_used(facts: dict[str, Any]) -> bool:
    return facts.get("fabric_state") not in (None, "NOT_SUPPORTED")


def _track_idle(host: Host, kept: GpusKept, gpus: list[dict[str, Any]], frozen: bool) -> None:
    """Set each GPU's `idle_seconds` from the time it was first seen idle (kept in memory).
    While gpuprobe's own NCCL test runs, the GPUs count as they were before it: the test's
    load neither ends an idle stretch nor starts one."""
    since = kept.idle_since
    now = host.clock.wall()
    for facts in gpus:
        key = facts.get("uuid") or f"index:{facts['index']}"
        idle = facts.get("idle")
        if frozen and idle is not None:
            idle = key in since
        if idle:
            facts["idle_seconds"] = round(now - since.setdefault(key, now), 3)
        else:
            since.pop(key, None)
            if idle is False:
                facts["idle_seconds"] = None


def _device_findings(reading: GpuReading, config: Config, data: GpusData) -> list[Finding]:
    # Without a UUID (a handle NVML lost) the resource's UUID is empty; the message names
    # the GPU's PCI address.
    facts = reading.facts
    resource = gpu_resource(reading.index, facts.get("uuid"))
    where = f"GPU {reading.index}" + (f" ({facts['pci_bus_id']})" if "pci_bus_id" in facts else "")
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
    idle_seconds = facts.get("idle_seconds")
    window = config.section(NAME, GpusConfig).idle_window_seconds
    if idle_seconds is not None and idle_seconds > window:
        findings.append(idle_finding(idle_seconds, window, resource, where))
    return findings


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


def _summary(readings: list[GpuReading], on_bus: int, findings: list[Finding]) -> str:
    inventories = [r.facts for r in readings]
    total = len(readings)
    if total < on_bus:
        return f"NVML sees {total} of the {on_bus} GPUs on the PCI bus"
    if total == 0:
        return "NVML sees no GPU"
    lost = sum(r.lost for r in readings)
    if lost:
        return f"{lost} of {total} GPUs lost"
    names = sorted({inv["name"] for inv in inventories if "name" in inv})
    model = f": {', '.join(names)}" if names else ""
    summary = f"{total} GPU{'s' if total != 1 else ''}{model}"
    troubled = _by_gpu(findings)
    if troubled:
        shown = [f"GPU {i} {', '.join(codes)}" for i, codes in sorted(troubled.items())[:3]]
        more = f" and {len(troubled) - 3} more" if len(troubled) > 3 else ""
        summary += f"; {len(troubled)} with findings: {'; '.join(shown)}{more}"
    idle = sum(1 for inv in inventories if inv.get("idle"))
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


GaugeKey = Literal[
    "temperature_celsius",
    "temperature_slowdown_celsius",
    "power_watts",
    "power_limit_watts",
    "utilization_gpu_percent",
    "utilization_memory_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "pcie_link_width",
    "pcie_link_width_max",
    "pcie_link_generation",
    "mig_mode_current",
    "idle",
]
EccKey = Literal[
    "ecc_uncorrected_volatile",
    "ecc_uncorrected_aggregate",
    "ecc_corrected_volatile",
    "ecc_corrected_aggregate",
]
RowsKey = Literal["remapped_rows_correctable", "remapped_rows_uncorrectable"]
# Per-GPU gauges: (key in the check's data.gpus[i], metric name, help, divisor).
GPU_GAUGES: list[tuple[GaugeKey, str, str, float]] = [
    ("temperature_celsius", "gpuprobe_gpu_temperature_celsius", "GPU core temperature", 1),
    (
        "temperature_slowdown_celsius",
        "gpuprobe_gpu_temperature_slowdown_celsius",
        "Temperature at which the GPU slows its clocks",
        1,
    ),
    ("power_watts", "gpuprobe_gpu_power_watts", "Power draw", 1),
    ("power_limit_watts", "gpuprobe_gpu_power_limit_watts", "Enforced power limit", 1),
    (
        "utilization_gpu_percent",
        "gpuprobe_gpu_utilization_ratio",
        "Fraction of the last sample period a kernel ran on the GPU (0-1)",
        100,
    ),
    (
        "utilization_memory_percent",
        "gpuprobe_gpu_memory_utilization_ratio",
        "Fraction of the last sample period device memory was read or written (0-1)",
        100,
    ),
    ("memory_used_bytes", "gpuprobe_gpu_memory_used_bytes", "Device memory in use", 1),
    ("memory_total_bytes", "gpuprobe_gpu_memory_total_bytes", "Device memory in all", 1),
    (
        "remapped_rows_pending",
        "gpuprobe_gpu_remapped_rows_pending",
        "1 when a row remap waits for a GPU reset",
        1,
    ),
    (
        "remapped_rows_failure",
        "gpuprobe_gpu_remapped_rows_failure",
        "1 when a row remap failed",
        1,
    ),
    ("pcie_link_width", "gpuprobe_gpu_pcie_link_width", "Current PCIe link width (lanes)", 1),
    (
        "pcie_link_width_max",
        "gpuprobe_gpu_pcie_link_width_max",
        "Maximum PCIe link width of the GPU (lanes)",
        1,
    ),
    (
        "pcie_link_generation",
        "gpuprobe_gpu_pcie_link_generation",
        "Current PCIe link generation",
        1,
    ),
    ("mig_mode_current", "gpuprobe_gpu_mig_mode", "1 when MIG mode is enabled now", 1),
    ("idle", "gpuprobe_gpu_idle", "1 when the GPU has sat idle past the configured window", 1),
]
# ECC counters: key → (error_type, counter) labels of gpuprobe_gpu_ecc_errors_total.
ECC_COUNTERS: dict[EccKey, tuple[str, str]] = {
    "ecc_uncorrected_volatile": ("uncorrected", "volatile"),
    "ecc_uncorrected_aggregate": ("uncorrected", "aggregate"),
    "ecc_corrected_volatile": ("corrected", "volatile"),
    "ecc_corrected_aggregate": ("corrected", "aggregate"),
}
REMAPPED_ROWS: dict[RowsKey, str] = {
    "remapped_rows_correctable": "correctable",
    "remapped_rows_uncorrectable": "uncorrectable",
}
_MISSING = object()


def metric_families(data: GpusData) -> Iterator[Family]:
    """GPU count, identity, and the per-GPU gauges from the check's data."""
    if len(data) == 0:  # a result without data (not this check's own): no family
        return
    # Each key is read as `data[key] if key in data`, not `.get`: mypy holds an index, never
    # a .get, to the TypedDict's keys.
    seen = data["gpus_seen_by_nvml"] if "gpus_seen_by_nvml" in data else _MISSING
    if seen is None or number(seen) is not None:
        count = Family("gpuprobe_gpus", "GPUs NVML sees (0 when NVML cannot start)")
        count.add([], number(seen) or 0)
        yield count
    amd_seen = number(data["gpus_seen_by_amdgpu"] if "gpus_seen_by_amdgpu" in data else None)
    if amd_seen is not None:
        amd_count = Family("gpuprobe_amd_gpus", "AMD GPUs the amdgpu driver drives")
        amd_count.add([], amd_seen)
        yield amd_count
    # The values are still held to numbers and text: a report may come from elsewhere.
    entries = mappings(data["gpus"] if "gpus" in data else None)
    gpus = [cast(GpuFacts, g) for g in entries if "index" in g]
    info = Family(
        "gpuprobe_gpu_info",
        "A GPU's identity: index, UUID, product name, PCI bus id",
        ("gpu", "uuid", "name", "pci_bus_id"),
    )
    for gpu in gpus:
        name = label(gpu["name"] if "name" in gpu else None)
        bus_id = label(gpu["pci_bus_id"] if "pci_bus_id" in gpu else None)
        info.add([*gpu_labels(gpu), name or "", bus_id or ""], 1)
    yield info
    for key, metric, help_text, divisor in GPU_GAUGES:
        gauge = Family(metric, help_text, GPU_LABELS)
        for gpu in gpus:
            value = number(gpu[key] if key in gpu else None)
            if value is not None:
                gauge.add(gpu_labels(gpu), value / divisor)
        if gauge.samples:
            yield gauge
    ecc = Family(
        "gpuprobe_gpu_ecc_errors",
        "ECC errors: corrected or uncorrected, since the driver loaded (volatile) or over the "
        "GPU's life (aggregate)",
        (*GPU_LABELS, "error_type", "counter"),
        counter=True,
    )
    rows = Family(
        "gpuprobe_gpu_remapped_rows",
        "Device memory rows remapped, by cause",
        (*GPU_LABELS, "cause"),
    )
    for gpu in gpus:
        for ecc_key, (error_type, counter) in ECC_COUNTERS.items():
            value = number(gpu[ecc_key] if ecc_key in gpu else None)
            if value is not None:
                ecc.add([*gpu_labels(gpu), error_type, counter], value)
        for rows_key, cause in REMAPPED_ROWS.items():
            value = number(gpu[rows_key] if rows_key in gpu else None)
            if value is not None:
                rows.add([*gpu_labels(gpu), cause], value)
    yield from (f for f in (ecc, rows) if f.samples)


CHECK: Check[GpusData] = Check(
    NAME,
    run,
    section=GpusConfig,
    metrics=metric_families,
    condition="GPUHardwareReady",
    summary_keys={
        "gpus_on_pci_bus": None,
        "gpus_seen_by_nvml": None,
        "gpus_seen_by_amdgpu": None,
        "gpus": {"index": None, "vendor": None, "name": None, "lost": None, "idle": None},
    },
    keeps=KEEPS,
)
