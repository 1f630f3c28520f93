"""An audit from start to end: discover the agents, fetch their reports, build the report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuprobe.audit.cluster import ClusterReport, audited, build_from
from gpuprobe.audit.facts import DATA_KEYS
from gpuprobe.audit.fanout import DEFAULT_CONCURRENCY, DEFAULT_DEADLINE_SECONDS, fetch_each
from gpuprobe.client import Credentials
from gpuprobe.targets import Resolver, TargetSpec, discover
from gpuprobe.v1 import diagnostics_pb2 as pb


@dataclass(frozen=True)
class AuditOptions:
    """What to audit and how: the targets, the credentials, the deadline of the agents'
    answers (also the bound of each DNS lookup) and how many agents to ask at once."""

    targets: Sequence[TargetSpec]
    credentials: Credentials = field(default_factory=Credentials)
    deadline: float = DEFAULT_DEADLINE_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY
    price_per_gpu_hour: float | None = None


def audit(options: AuditOptions, resolver: Resolver | None = None) -> ClusterReport:
    """Resolve the targets, ask every agent for its report, and build the cluster report.
    Takes at most one deadline for DNS plus one for the agents, however many."""
    found = discover(options.targets, options.deadline, resolver)
    # Each agent's summary view, digested as it comes: the audit holds no whole report.
    nodes = fetch_each(
        found.addresses,
        options.credentials,
        audited,
        options.deadline,
        options.concurrency,
        DATA_KEYS,
        pb.REPORT_VIEW_SUMMARY,
    )
    return build_from(nodes, found.failures, options.price_per_gpu_hour)
