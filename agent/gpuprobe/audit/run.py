"""An audit from start to end: discover the agents, fetch their reports, build the report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuprobe.audit.cluster import ClusterReport, build
from gpuprobe.audit.facts import DATA_KEYS
from gpuprobe.audit.fanout import DEFAULT_CONCURRENCY, DEFAULT_DEADLINE_SECONDS, fetch_all
from gpuprobe.audit.usage import DATA_KEYS as USAGE_KEYS
from gpuprobe.client import Credentials
from gpuprobe.targets import Resolver, TargetSpec, discover


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
    fetched = fetch_all(
        found.addresses,
        options.credentials,
        options.deadline,
        options.concurrency,
        {**DATA_KEYS, **USAGE_KEYS},
    )
    return build(fetched, found.failures, options.price_per_gpu_hour)
