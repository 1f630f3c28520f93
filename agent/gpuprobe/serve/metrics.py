"""Prometheus metrics rendered from the latest report (docs/metrics.md lists every one).

A custom collector in the client_python style: the families are built once per report
update, from data the checks already gathered, and a scrape only hands them out. A scrape
never calls NVML or reads the disk. Each renderer below turns one part of the report into
families; a value the report lacks gives no sample, never an error.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuprobe import __version__
from gpuprobe.report import NodeReport
from gpuprobe.serve.state import Snapshot

log = logging.getLogger("gpuprobe.serve")

Renderer = Callable[[Snapshot, NodeReport], Iterable[Metric]]
GPU_LABELS = ["gpu", "uuid"]


class ReportCollector(Collector):
    """Hands out the metric families of the latest report; a `ReportStore` view."""

    def __init__(self, node: str) -> None:
        self._families: list[Metric] = list(agent_families(node))
        self._node = node

    def update(self, snapshot: Snapshot) -> None:
        """Render the families of a new snapshot (called by the store on each update)."""
        self._families = render(snapshot, self._node)

    def collect(self) -> Iterator[Metric]:
        """The families as last rendered."""
        return iter(self._families)


def render(snapshot: Snapshot, node: str) -> list[Metric]:
    """Every family for one snapshot."""
    families = list(agent_families(node))
    if snapshot.report is None:
        return families
    for renderer in RENDERERS:
        try:
            families.extend(renderer(snapshot, snapshot.report))
        except Exception:  # one part's fault costs its families, never the whole report
            log.exception("metrics dropped", extra={"renderer": renderer.__name__})
    return families


def agent_families(node: str) -> Iterator[Metric]:
    """The agent's own identity."""
    info = GaugeMetricFamily(
        "gpuprobe_agent_info", "The gpuprobe agent's version and node", labels=["version", "node"]
    )
    info.add_metric([__version__, node], 1)
    yield info


def report_families(snapshot: Snapshot, report: NodeReport) -> Iterator[Metric]:
    """The node's and each check's status, duration and run counts, and the findings."""
    node = GaugeMetricFamily(
        "gpuprobe_node_status",
        "The node's status: the worst check status (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)",
    )
    node.add_metric([], report.status.metric_value)
    yield node
    stamp = GaugeMetricFamily(
        "gpuprobe_report_timestamp_seconds", "When the report was last updated (Unix time)"
    )
    stamp.add_metric([], report.time.timestamp())
    yield stamp
    changes = CounterMetricFamily(
        "gpuprobe_report_changes", "Report updates that changed a status or a finding"
    )
    changes.add_metric([], snapshot.change)
    yield changes

    status = GaugeMetricFamily(
        "gpuprobe_check_status",
        "A check's status (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)",
        labels=["check"],
    )
    duration = GaugeMetricFamily(
        "gpuprobe_check_duration_seconds", "How long the check's latest run took", labels=["check"]
    )
    ran_at = GaugeMetricFamily(
        "gpuprobe_check_timestamp_seconds",
        "When the check's latest result was produced (Unix time)",
        labels=["check"],
    )
    for check in report.checks:
        status.add_metric([check.name], check.status.metric_value)
        duration.add_metric([check.name], check.duration_seconds)
        if check.name in snapshot.check_times:
            ran_at.add_metric([check.name], snapshot.check_times[check.name].timestamp())
    yield from (status, duration, ran_at)

    runs = CounterMetricFamily(
        "gpuprobe_check_runs", "Runs of the check since the agent started", labels=["check"]
    )
    timeouts = CounterMetricFamily(
        "gpuprobe_check_timeouts",
        "Runs of the check that overran their deadline (CHECK_TIMEOUT)",
        labels=["check"],
    )
    for name in sorted(snapshot.runs):
        runs.add_metric([name], snapshot.runs[name])
        timeouts.add_metric([name], snapshot.timeouts.get(name, 0))
    yield from (runs, timeouts)

    finding = GaugeMetricFamily(
        "gpuprobe_finding",
        "1 for each active finding",
        labels=["check", "code", "severity", "resource", "action"],
    )
    seen = set()
    for check_name, f in report.findings():
        # The action rides along so that dashboards can say what to do, not only what is wrong.
        labels = (check_name, f.code, f.severity.value, f.resource, f.action.value)
        if labels not in seen:  # two messages about one thing are one series
            seen.add(labels)
            finding.add_metric(list(labels), 1)
    yield finding


def driver_families(snapshot: Snapshot, report: NodeReport) -> Iterator[Metric]:
    """`gpuprobe_driver_info` from the driver check's data."""
    data = _data(report, "driver")
    version = _text(data.get("driver_version"))
    if version is None:
        return
    info = GaugeMetricFamily(
        "gpuprobe_driver_info",
        "The NVIDIA driver version and the CUDA version it supports",
        labels=["driver_version", "cuda_driver_version"],
    )
    info.add_metric([version, _text(data.get("cuda_driver_version")) or ""], 1)
    yield info


# Per-GPU gauges: (key in the gpus check's data.gpus[i], metric name, help, divisor).
GPU_GAUGES: list[tuple[str, str, str, float]] = [
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
ECC_COUNTERS = {
    "ecc_uncorrected_volatile": ("uncorrected", "volatile"),
    "ecc_uncorrected_aggregate": ("uncorrected", "aggregate"),
    "ecc_corrected_volatile": ("corrected", "volatile"),
    "ecc_corrected_aggregate": ("corrected", "aggregate"),
}
REMAPPED_ROWS = {
    "remapped_rows_correctable": "correctable",
    "remapped_rows_uncorrectable": "uncorrectable",
}


def gpu_families(snapshot: Snapshot, report: NodeReport) -> Iterator[Metric]:
    """GPU count, identity, and the per-GPU gauges from the gpus check's data."""
    data = _data(report, "gpus")
    if not data:
        return
    seen = data.get("gpus_seen_by_nvml", _MISSING)
    if seen is None or _number(seen) is not None:
        count = GaugeMetricFamily("gpuprobe_gpus", "GPUs NVML sees (0 when NVML cannot start)")
        count.add_metric([], _number(seen) or 0)
        yield count
    gpus = [g for g in _mappings(data.get("gpus")) if "index" in g]
    info = GaugeMetricFamily(
        "gpuprobe_gpu_info",
        "A GPU's identity: index, UUID, product name, PCI bus id",
        labels=["gpu", "uuid", "name", "pci_bus_id"],
    )
    for gpu in gpus:
        info.add_metric(
            [*_gpu_labels(gpu), _text(gpu.get("name")) or "", _text(gpu.get("pci_bus_id")) or ""],
            1,
        )
    yield info
    for key, name, help_text, divisor in GPU_GAUGES:
        gauge = GaugeMetricFamily(name, help_text, labels=GPU_LABELS)
        for gpu in gpus:
            value = _number(gpu.get(key))
            if value is not None:
                gauge.add_metric(_gpu_labels(gpu), value / divisor)
        if gauge.samples:
            yield gauge
    ecc = CounterMetricFamily(
        "gpuprobe_gpu_ecc_errors",
        "ECC errors: corrected or uncorrected, since the driver loaded (volatile) or over the "
        "GPU's life (aggregate)",
        labels=[*GPU_LABELS, "error_type", "counter"],
    )
    rows = GaugeMetricFamily(
        "gpuprobe_gpu_remapped_rows",
        "Device memory rows remapped, by cause",
        labels=[*GPU_LABELS, "cause"],
    )
    for gpu in gpus:
        for key, (error_type, counter) in ECC_COUNTERS.items():
            value = _number(gpu.get(key))
            if value is not None:
                ecc.add_metric([*_gpu_labels(gpu), error_type, counter], value)
        for key, cause in REMAPPED_ROWS.items():
            value = _number(gpu.get(key))
            if value is not None:
                rows.add_metric([*_gpu_labels(gpu), cause], value)
    yield from (f for f in (ecc, rows) if f.samples)


def xid_families(snapshot: Snapshot, report: NodeReport) -> Iterator[Metric]:
    """`gpuprobe_gpu_xid_errors_total` from the xid check's data."""
    records = _data(report, "xid").get("xids")
    if not isinstance(records, list):
        return
    xids = CounterMetricFamily(
        "gpuprobe_gpu_xid_errors",
        "XID errors seen per GPU and XID since the agent started or they were cleared",
        labels=[*GPU_LABELS, "xid"],
    )
    for record in _mappings(records):
        xid, count = _number(record.get("xid")), _number(record.get("count"))
        if xid is None or count is None or _number(record.get("gpu")) is None:
            continue
        xids.add_metric([*_gpu_labels(record, "gpu"), str(int(xid))], count)
    yield xids


def mig_families(snapshot: Snapshot, report: NodeReport) -> Iterator[Metric]:
    """`gpuprobe_mig_device_info`: one sample per MIG device (compute instance) from the mig
    check's data, so that a dashboard can draw each GPU's MIG layout."""
    gpus = _data(report, "mig").get("gpus")
    if not isinstance(gpus, list):
        return
    family = GaugeMetricFamily(
        "gpuprobe_mig_device_info",
        "A MIG device: its GPU, GPU instance, compute instance, profile and UUID",
        labels=[*GPU_LABELS, "gpu_instance", "compute_instance", "profile", "mig_uuid"],
    )
    for gpu in _mappings(gpus):
        if _number(gpu.get("index")) is None:
            continue
        for gi in _mappings(gpu.get("gpu_instances")):
            gi_id = _number(gi.get("id"))
            for ci in _mappings(gi.get("compute_instances")):
                ci_id = _number(ci.get("id"))
                if gi_id is None or ci_id is None:
                    continue
                profile = _text(ci.get("profile")) or _text(gi.get("profile")) or ""
                family.add_metric(
                    [
                        *_gpu_labels(gpu),
                        str(int(gi_id)),
                        str(int(ci_id)),
                        profile,
                        _text(ci.get("uuid")) or "",
                    ],
                    1,
                )
    yield family


def storage_families(snapshot: Snapshot, report: NodeReport) -> Iterator[Metric]:
    """`gpuprobe_storage_throughput_bytes_per_second` from the storage check's data."""
    paths = _data(report, "storage").get("paths")
    if not isinstance(paths, list):
        return
    family = GaugeMetricFamily(
        "gpuprobe_storage_throughput_bytes_per_second",
        "Measured sequential throughput of a storage path",
        labels=["path", "op"],
    )
    for entry in _mappings(paths):
        if _text(entry.get("path")) is None:
            continue
        for op in ("write", "read"):
            value = _number(entry.get(f"{op}_bytes_per_second"))
            if value is not None:
                family.add_metric([str(entry["path"]), op], value)
    yield family


def peer_families(snapshot: Snapshot, report: NodeReport) -> Iterator[Metric]:
    """`gpuprobe_peer_bandwidth_bytes_per_second` from this agent's latest bandwidth tests."""
    if not snapshot.links:
        return
    bandwidth = GaugeMetricFamily(
        "gpuprobe_peer_bandwidth_bytes_per_second",
        "Bandwidth this agent last measured toward a peer agent (bytes received per second)",
        labels=["peer", "transport"],
    )
    measured = GaugeMetricFamily(
        "gpuprobe_peer_bandwidth_timestamp_seconds",
        "When this agent last measured its bandwidth toward the peer (Unix time)",
        labels=["peer", "transport"],
    )
    for link in snapshot.links:
        bandwidth.add_metric([link.peer, link.transport], link.bytes_per_second)
        measured.add_metric([link.peer, link.transport], link.time.timestamp())
    yield bandwidth
    yield measured


# Each part of the agent's state that becomes metrics.
RENDERERS: tuple[Renderer, ...] = (
    report_families,
    driver_families,
    gpu_families,
    xid_families,
    storage_families,
    mig_families,
    peer_families,
)

_MISSING = object()


def _data(report: NodeReport, check: str) -> Mapping[str, Any]:
    result = report.check(check)
    return result.data if result is not None and isinstance(result.data, Mapping) else {}


def _gpu_labels(gpu: Mapping[str, Any], key: str = "index") -> list[str]:
    index = _number(gpu.get(key))
    return [str(int(index)) if index is not None else "", _text(gpu.get("uuid")) or ""]


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a list from the report's data (anything else: none)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _number(value: Any) -> float | None:
    """A finite number (booleans as 0/1), else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond a double (10^400): no sample can say it
            log.warning(
                "metric value dropped", extra={"reason": "beyond a float", "value": str(value)[:40]}
            )
            return None
        return number if math.isfinite(number) else None
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
