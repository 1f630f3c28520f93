"""Prometheus metrics rendered from the latest report (docs/metrics.md lists every one).

A custom collector in the client_python style: the families are built once per report
update, from data the checks already gathered, and a scrape only hands them out. A scrape
never calls NVML or reads the disk. Each renderer below turns one part of the report into
families; a value the report lacks gives no sample, never an error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuprobe import __version__
from gpuprobe.checks.registry import CHECKS
from gpuprobe.daemon.store import AgentState
from gpuprobe.families import Family
from gpuprobe.report import NodeReport

log = logging.getLogger("gpuprobe.serve")

Renderer = Callable[[AgentState, NodeReport], Iterable[Metric]]


class ReportCollector(Collector):
    """Hands out the metric families of the latest report; a sink of the `ReportStore`."""

    def __init__(self, node: str) -> None:
        self._families: list[Metric] = list(agent_families(node))
        self._node = node

    def update(self, snapshot: AgentState) -> None:
        """Render the families of a new snapshot (called by the store on each update)."""
        self._families = render(snapshot, self._node)

    def collect(self) -> Iterator[Metric]:
        """The families as last rendered."""
        return iter(self._families)


def render(snapshot: AgentState, node: str) -> list[Metric]:
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


def report_families(snapshot: AgentState, report: NodeReport) -> Iterator[Metric]:
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


def peer_families(snapshot: AgentState, report: NodeReport) -> Iterator[Metric]:
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


# The page has always shown the mig and workloads checks' families after every other
# check's, in that order (the golden pages hold it); the others, and a new check's, come in
# registry order.
_CHECKS_LAST = ("mig", "workloads")


def check_families(snapshot: AgentState, report: NodeReport) -> Iterator[Metric]:
    """Each check's own families, from its record's renderer and its latest result."""
    records = sorted(
        CHECKS.values(),
        key=lambda c: _CHECKS_LAST.index(c.name) + 1 if c.name in _CHECKS_LAST else 0,
    )
    for check in records:
        result = report.check(check.name)
        if result is None:
            continue
        try:
            rendered = [_prometheus(family) for family in check.families(result)]
        except Exception:  # one check's renderer costs its own families, not the others'
            log.exception("metrics dropped", extra={"renderer": check.name})
            continue
        yield from rendered


def _prometheus(family: Family) -> Metric:
    """A check's family as the Prometheus client's family."""
    kind = CounterMetricFamily if family.counter else GaugeMetricFamily
    metric = kind(family.name, family.help, labels=list(family.labels))
    for labels, value in family.samples:
        metric.add_metric(list(labels), value)
    return metric


# Each part of the agent's state that becomes metrics, in page order.
RENDERERS: tuple[Renderer, ...] = (report_families, check_families, peer_families)
