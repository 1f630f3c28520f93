"""Check `gpus`: are all the GPUs there, what are they, and are they healthy?

Vendor-neutral: each GPU vendor's rules (`checks.rules.vendors`, in the GPU interface's
vendor order) count, list and judge their own GPUs, and the check puts their parts together;
a vendor without rules is shown from the GPU interface alone. NVIDIA's part
(`gpuprobe.checks.nvidia.gpus`) counts the NVIDIA GPUs on the PCI bus (the ground truth)
against NVML's count and the expected count, and lists and judges each GPU's identity and
health; AMD's (`gpuprobe.checks.amd.gpus`) lists AMD's after them (`vendor: amd`, indexed in
PCI order on their own) with the amdgpu driver's facts.

Idle GPUs: the check remembers (its state, `KEEPS`, kept by the runner) since when each GPU
has been idle, so the daemon raises GPU_IDLE once one stays idle past
`gpus.idle_window_seconds`; a one-shot check has no history and only reports idleness in
`data`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict, cast

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.checks.rules import vendors
from gpuprobe.checks.rules.interface_only import gpus_part
from gpuprobe.checks.rules.sections import GpusConfig
from gpuprobe.checks.rules.vendor_part import Part, lower_floor, merge_data
from gpuprobe.checks.state import Keeps
from gpuprobe.config import Config
from gpuprobe.families import GPU_LABELS, Family, gpu_labels, mappings, number
from gpuprobe.families import text as label
from gpuprobe.report import CheckResult

NAME = "gpus"


class GpuFacts(TypedDict, total=False):
    """One GPU's entry in `data.gpus` (docs/checks.md, check `gpus`): its identity from this
    check, its health from `gpu.nvidia.health.read_health` (NVIDIA's, rendered from
    `gpu.nvidia.gpus.NvidiaGpuFacts`); what NVML cannot tell is left out."""

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
    """Count, list and judge the GPUs: each vendor's rules in turn (`checks.rules.vendors`),
    then the GPUs of a vendor without rules as the GPU interface shows them."""
    idle_since = ctx.kept(KEEPS).idle_since
    ruled = [rules for rules in vendors.RULES if rules.gpus is not None]
    steps = [rules.gpus for rules in ruled if rules.gpus is not None]
    # The first vendor's count is never asked: no vendor comes before it.
    on_bus = [0] + [step.count(ctx) for step in steps[1:]]
    parts: list[Part] = []
    for i, step in enumerate(steps):
        # The other vendors' GPUs: as judged for those before, as the bus counts the rest.
        others = sum(p.gpus for p in parts) + sum(on_bus[i + 1 :])
        part = step.judge(ctx, config, idle_since, others)
        if part is not None:
            parts.append(part)
    parts += [gpus_part(b) for b in ctx.gpus.backends(skip={r.vendor for r in ruled})]
    data: dict[str, Any] = {}
    result = CheckResult(NAME, "", [], data)
    judged = 0
    for part in parts:
        merge_data(data, part)
        result.findings.extend(part.findings)
        # A later vendor's summary follows the GPUs judged before it, or stands alone.
        result.summary = f"{result.summary}; {part.summary}" if judged else part.summary
        result.floor = lower_floor(result.floor, part)
        judged += part.gpus
    return result


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
