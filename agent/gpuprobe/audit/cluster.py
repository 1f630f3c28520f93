"""The cluster report: every target's node with its status and findings, the skew of the
facts that should agree across nodes, and the totals, as `audit --json` writes them.

The cluster's status is the worst node status; a target that gave no report is a node with
`"reachable": false` and status UNKNOWN. Skew is reported beside it, never folded into it:
node pools differ by design (models, counts, MIG layouts), so whether a difference is a
fault is the operator's call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpuprobe.audit.facts import SKEW_FIELDS, Counts, counts, driver_vendor, skew_values
from gpuprobe.audit.skew import Skew, find_all_skew
from gpuprobe.audit.usage import Usage, cluster_usage, usage
from gpuprobe.client import Fetched
from gpuprobe.report import Finding, Status, exit_status, format_time, worst
from gpuprobe.targets import DnsFailure
from gpuprobe.unreachable import Failure, Unreachable

if TYPE_CHECKING:  # the view imports this module: only its type is needed here
    from gpuprobe.audit.view.model import ClusterView


@dataclass(frozen=True)
class AuditedNode:
    """One target of the audit: its node's report, or why there is none."""

    target: str
    node: str | None
    status: Status
    findings: list[tuple[str, Finding]] = field(default_factory=list)
    facts: dict[str, str | None] | None = None
    counts: Counts | None = None
    agent_version: str | None = None
    time: datetime | None = None
    unreachable: Unreachable | None = None
    usage: Usage | None = None  # from the workloads check, when it ran
    checks: tuple[str, ...] = ()  # the checks the agent ran (the cluster view reads them)
    driver_vendor: str | None = None  # whose driver `facts.driver_version` is

    @property
    def reachable(self) -> bool:
        """Whether the target answered with a report."""
        return self.unreachable is None

    def to_dict(self) -> dict[str, Any]:
        """The node as `audit --json` writes it (every key present, null when unknown)."""
        return {
            "target": self.target,
            "node": self.node,
            "reachable": self.reachable,
            "status": self.status.value,
            "failure": self.unreachable.failure.value if self.unreachable else None,
            "reason": self.unreachable.reason if self.unreachable else None,
            "findings": [{"check": check, **f.to_dict()} for check, f in self.findings],
            "facts": self.facts,
            "counts": self.counts.to_dict() if self.counts else None,
            "agent_version": self.agent_version,
            "time": format_time(self.time) if self.time else None,
        }


@dataclass(frozen=True)
class Totals:
    """The cluster's sums: nodes (all targets), reachable, healthy (reachable and OK), and
    the reachable nodes' GPU counts."""

    nodes: int
    reachable_nodes: int
    healthy_nodes: int
    counts: Counts

    def to_dict(self) -> dict[str, int]:
        """The totals as `audit --json` writes them."""
        return {
            "nodes": self.nodes,
            "reachable_nodes": self.reachable_nodes,
            "unreachable_nodes": self.nodes - self.reachable_nodes,
            "healthy_nodes": self.healthy_nodes,
            **self.counts.to_dict(),
        }


@dataclass(frozen=True)
class ClusterReport:
    """Every audited node, the skew across them and the totals."""

    nodes: list[AuditedNode]
    skew: list[Skew]
    totals: Totals
    usage: Usage | None = None  # the reachable nodes' GPU usage (None: no workloads check)
    price_per_gpu_hour: float | None = None
    view: ClusterView | None = None  # what the API server says (audit --kubeconfig)

    @property
    def status(self) -> Status:
        """The worst node status (UNKNOWN for unreachable targets) and, with the cluster
        view, its status; OK for no node."""
        statuses = [n.status for n in self.nodes]
        if self.view is not None:
            statuses.append(self.view.status)
        return worst(statuses)

    def exit_status(self, fail_on: Status | None = None) -> int:
        """The exit status: the contract's (2 CRITICAL, 1 WARNING, 3 UNKNOWN, 0 OK), or with
        `fail_on`, 0 for every status below it (UNKNOWN is below WARNING) unless a target is
        unreachable: a gate must not pass on agents it never heard from (3 then)."""
        code = exit_code(self.status, fail_on)
        if code == 0 and self.totals.reachable_nodes < self.totals.nodes:
            return exit_status(Status.UNKNOWN)
        return code

    def to_dict(self) -> dict[str, Any]:
        """The report as `audit --json` writes it."""
        report: dict[str, Any] = {
            "status": self.status.value,
            "nodes": [n.to_dict() for n in self.nodes],
            "skew": [s.to_dict() for s in self.skew],
            "totals": self.totals.to_dict(),
        }
        if (usage := self._usage_dict()) is not None:
            report["usage"] = usage
        if self.view is not None:
            report["cluster"] = self.view.to_dict()
        return report

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    def json_chunks(self) -> Iterator[str]:
        """The report as `audit --json` writes it, a piece at a time: the same object as
        `to_dict`, with each node on a line of its own. Nothing holds the text of ten
        thousand nodes at once, and the nodes go through the C encoder (an indented dump
        is Python's own, several times slower)."""
        yield f'{{"status": {json.dumps(self.status.value)},\n "nodes": ['
        for i, node in enumerate(self.nodes):
            yield ("\n  " if i == 0 else ",\n  ") + json.dumps(node.to_dict())
        yield "\n ],\n"
        yield f' "skew": {json.dumps([s.to_dict() for s in self.skew])},\n'
        tail: list[tuple[str, dict[str, Any]]] = [("totals", self.totals.to_dict())]
        if (usage := self._usage_dict()) is not None:
            tail.append(("usage", usage))
        if self.view is not None:
            tail.append(("cluster", self.view.to_dict()))
        for i, (key, value) in enumerate(tail):
            end = "}\n" if i == len(tail) - 1 else ",\n"
            yield f" {json.dumps(key)}: {json.dumps(value)}{end}"

    def _usage_dict(self) -> dict[str, Any] | None:
        """The usage totals, for the cluster and each node (None without any)."""
        if self.usage is None:
            return None
        price = self.price_per_gpu_hour
        return {
            **self.usage.to_dict(price),
            "nodes": [
                {"node": n.node, **n.usage.to_dict(price)}
                for n in self.nodes
                if n.usage is not None
            ],
        }


def exit_code(status: Status, fail_on: Status | None) -> int:
    """The exit status for `status`: the contract's, or 0 below `fail_on` (WARNING or
    CRITICAL) in the order OK < UNKNOWN < WARNING < CRITICAL."""
    if fail_on is not None and status.rank < fail_on.rank:
        return 0
    return exit_status(status)


def audited(fetched: Fetched) -> AuditedNode:
    """One fetched target as an audited node."""
    report = fetched.report
    if report is None:
        unreachable = fetched.unreachable or Unreachable(Failure.ERROR, "no report")
        return AuditedNode(fetched.target, None, Status.UNKNOWN, unreachable=unreachable)
    return AuditedNode(
        target=fetched.target,
        node=report.node,
        status=report.status,
        findings=report.findings(),
        facts=skew_values(report),
        counts=counts(report),
        agent_version=fetched.agent_version or None,
        time=report.time,
        usage=usage(report),
        checks=tuple(c.name for c in report.checks),
        driver_vendor=driver_vendor(report),
    )


def unresolved(failure: DnsFailure) -> AuditedNode:
    """A `dns:` target that gave no address, as an unreachable node."""
    return AuditedNode(
        str(failure.spec),
        None,
        Status.UNKNOWN,
        unreachable=Unreachable(Failure.DNS, failure.reason),
    )


# Fields whose values mean something only within one vendor's drivers: a cluster that mixes
# vendors compares them per vendor, as `field:vendor` (an NVIDIA driver's version against an
# AMD node's kernel release says nothing).
PER_VENDOR = ("driver_version",)


def _compared(node: AuditedNode) -> tuple[str, dict[str, str | None]]:
    """A node's skew values as compared: the per-vendor fields under `field:vendor`."""
    values = dict(node.facts or {})
    for name in PER_VENDOR:
        if node.driver_vendor is not None and values.get(name) is not None:
            values[f"{name}:{node.driver_vendor}"] = values[name]
    return node.node or node.target, values


def _skew_fields(nodes: Sequence[AuditedNode]) -> list[str]:
    """The fields compared: per vendor where the nodes mix vendors."""
    vendors = sorted({n.driver_vendor for n in nodes if n.driver_vendor is not None})
    fields = []
    for name in SKEW_FIELDS:
        if name in PER_VENDOR and len(vendors) > 1:
            fields += [f"{name}:{vendor}" for vendor in vendors]
        else:
            fields.append(name)
    return fields


def build(
    fetched: Sequence[Fetched],
    dns_failures: Sequence[DnsFailure] = (),
    price_per_gpu_hour: float | None = None,
) -> ClusterReport:
    """The cluster report over the fetched targets (in their order), then the `dns:` names
    that gave no address; with a price, the idle and unallocated GPU-hours' cost."""
    return build_from([audited(f) for f in fetched], dns_failures, price_per_gpu_hour)


def build_from(
    audited_nodes: Sequence[AuditedNode],
    dns_failures: Sequence[DnsFailure] = (),
    price_per_gpu_hour: float | None = None,
) -> ClusterReport:
    """The cluster report over targets already audited (in their order), then the `dns:`
    names that gave no address."""
    nodes = [*audited_nodes, *(unresolved(d) for d in dns_failures)]
    reachable = [n for n in nodes if n.reachable]
    skew = find_all_skew(_skew_fields(reachable), [_compared(n) for n in reachable])
    total = Counts()
    for n in reachable:
        total += n.counts or Counts()
    totals = Totals(
        nodes=len(nodes),
        reachable_nodes=len(reachable),
        healthy_nodes=sum(1 for n in reachable if n.status == Status.OK),
        counts=total,
    )
    summed = cluster_usage(n.usage for n in reachable)
    return ClusterReport(nodes, skew, totals, summed, price_per_gpu_hour)
