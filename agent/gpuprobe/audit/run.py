"""An audit from start to end: discover the agents, fetch their reports, build the report."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuprobe.audit.cluster import ClusterReport, audited, build_from
from gpuprobe.audit.facts import DATA_KEYS
from gpuprobe.audit.fanout import DEFAULT_CONCURRENCY, DEFAULT_DEADLINE_SECONDS, Asking
from gpuprobe.audit.shards import fetch_sharded, processes_for
from gpuprobe.client import Credentials
from gpuprobe.targets import Resolver, TargetSpec, discover
from gpuprobe.v1 import diagnostics_pb2 as pb


@dataclass(frozen=True)
class AuditOptions:
    """What to audit and how: the targets, the credentials, the deadline of the agents'
    answers (also the bound of each DNS lookup), how many agents to ask at once, and over how
    many processes."""

    targets: Sequence[TargetSpec]
    credentials: Credentials = field(default_factory=Credentials)
    deadline: float = DEFAULT_DEADLINE_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY
    price_per_gpu_hour: float | None = None
    processes: int | None = None  # None: as many as the fleet's size and the cores call for


def audit(options: AuditOptions, resolver: Resolver | None = None) -> ClusterReport:
    """Resolve the targets, ask every agent for its report, and build the cluster report.
    Takes at most one deadline for DNS plus one for the agents, however many."""
    found = discover(options.targets, options.deadline, resolver)
    asking = Asking(
        options.credentials,
        options.deadline,
        time.monotonic() + options.deadline,
        options.concurrency,
        DATA_KEYS,
        pb.REPORT_VIEW_SUMMARY,
    )
    # Each agent's summary view, digested as it comes: the audit holds no whole report. A
    # fleet of thousands is split over processes (gpuprobe.audit.shards).
    processes = options.processes or processes_for(len(found.addresses))
    nodes = fetch_sharded(found.addresses, asking, audited, processes)
    return build_from(nodes, found.failures, options.price_per_gpu_hour)
