"""An audit from start to end: discover the agents, fetch their reports, build the report;
with Kubernetes access, read the cluster view beside them."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpuprobe.audit.cluster import AuditedNode, ClusterReport, audited, build_from
from gpuprobe.audit.fanout import DEFAULT_CONCURRENCY, DEFAULT_DEADLINE_SECONDS, Asking
from gpuprobe.audit.keys import data_keys
from gpuprobe.audit.shards import fetch_sharded, processes_for
from gpuprobe.audit.view.judge import Windows, judge
from gpuprobe.audit.view.read import ClusterFacts, Source, read_agents, read_rest
from gpuprobe.client import Credentials
from gpuprobe.config import KubernetesConfig
from gpuprobe.kube.api import Access
from gpuprobe.kube.reader import ClusterReader
from gpuprobe.report import now
from gpuprobe.targets import Discovery, Resolver, TargetSpec, discover
from gpuprobe.v1 import diagnostics_pb2 as pb

# How long after the deadline the cluster view's reading thread is waited for: its requests
# are bounded by what is left of the deadline, so this only covers the last answer's decoding.
VIEW_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class AuditOptions:
    """What to audit and how: the targets, the credentials, the deadline of the agents'
    answers (also the bound of each DNS lookup), how many agents to ask at once, and over how
    many processes; with `kube`, the API server to read the cluster view from (and, without
    targets, to find the agents through)."""

    targets: Sequence[TargetSpec]
    credentials: Credentials = field(default_factory=Credentials)
    deadline: float = DEFAULT_DEADLINE_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY
    price_per_gpu_hour: float | None = None
    processes: int | None = None  # None: as many as the fleet's size and the cores call for
    kube: Access | None = None
    windows: Windows = field(default_factory=Windows)
    # With the view: which nodes' gpuprobe signals to keep from its pass over the nodes.
    signals: KubernetesConfig | None = None


def audit(options: AuditOptions, resolver: Resolver | None = None) -> ClusterReport:
    """Resolve the targets, ask every agent for its report, and build the cluster report.
    Without Kubernetes: at most one deadline for DNS plus one for the agents, however many.
    With it, the deadline bounds the whole audit: the API server's agent pods (or DNS), the
    agents and the rest of the cluster view (read meanwhile) share it, so an API server that
    accepts and never answers, or drips its answers, costs the deadline and no more."""
    if options.kube is None:
        found = discover(options.targets, options.deadline, resolver)
        end = time.monotonic() + options.deadline
        return build_from(
            _ask(found.addresses, options, end), found.failures, options.price_per_gpu_hour
        )
    reader = ClusterReader(options.kube, time.monotonic() + options.deadline)
    try:
        facts = ClusterFacts(signal_config=options.signals)
        read_agents(reader, facts)
        if options.targets:
            left = max(0.1, reader.end - time.monotonic())
            found = discover(options.targets, left, resolver)
        else:
            addresses = list(dict.fromkeys(a.target for a in facts.agents if a.ip))
            found = Discovery(addresses, [])
        rest = threading.Thread(target=read_rest, args=(reader, facts), daemon=True)
        rest.start()
        nodes = _ask(found.addresses, options, reader.end)
        rest.join(max(0.0, reader.end - time.monotonic()) + VIEW_GRACE_SECONDS)
        if rest.is_alive():  # never expected: every request is bounded by the deadline
            facts.sources["view"] = Source("view", "failed", "not read within the deadline")
        view = judge(facts, nodes, now(), options.windows, found_by_api=not options.targets)
    finally:
        reader.close()
    report = build_from(nodes, found.failures, options.price_per_gpu_hour)
    return replace(report, view=view)


def _ask(addresses: Sequence[str], options: AuditOptions, end: float) -> list[AuditedNode]:
    """Every agent's summary view by `end`, digested as it comes (the audit holds no whole
    report); a fleet of thousands split over processes (gpuprobe.audit.shards)."""
    asking = Asking(
        options.credentials,
        options.deadline,
        end,
        options.concurrency,
        data_keys(),
        pb.REPORT_VIEW_SUMMARY,
    )
    processes = options.processes or processes_for(len(addresses))
    return fetch_sharded(addresses, asking, audited, processes)
