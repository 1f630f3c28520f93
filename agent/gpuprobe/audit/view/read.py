"""Read the cluster within the audit's deadline, each source digested as its pages come.

A source that cannot be read is a fact with its reason, never the end of the view: a 404
for a custom resource (its group not served) says "not installed", a 403 names the
permission the auditor lacks, a timeout says the deadline passed. At 5,000 nodes and
150,000 pods the view reads every node (digested), the Pending pods only (a field selector),
FailedScheduling events only, and for a gang that waits, its running pods' count; the
agents already know each node's allocations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.audit.view import kinds
from gpuprobe.audit.view.nodes import NodeFacts, digest
from gpuprobe.audit.view.objects import (
    DaemonSetFacts,
    GpuJob,
    PodGroupFacts,
    daemon_set,
    job_set,
    pod_group,
    policy_state,
    resource_slice,
    rwx_claim_class,
    storage_class,
    training_job,
)
from gpuprobe.audit.view.pods import (
    AGENT_LABELS,
    AgentPod,
    Gang,
    WaitingPod,
    agent_pod,
    waiting_gpu_pod,
)
from gpuprobe.audit.view.quarantine import Rule, SliceDevice, slice_devices
from gpuprobe.audit.view.quarantine import rule as taint_rule
from gpuprobe.config import KubernetesConfig
from gpuprobe.effects.conditions import groups
from gpuprobe.effects.readback import NodeSignals, signals
from gpuprobe.kube.api import KubeError, selects
from gpuprobe.kube.reader import ClusterReader, Kind

# What the view keeps of long lists: the first this many waiting GPU pods (the rest only
# counted), and the gangs whose running pods it counts.
MOST_WAITING = 2000
MOST_GANGS = 100


@dataclass(frozen=True)
class Source:
    """How reading one source went: `read`, `not installed` (404 / group not served),
    `forbidden` (403: `missing` names the permission), or `failed` (another status, a
    timeout, the server unreachable)."""

    name: str
    state: str
    detail: str = ""
    missing: str = ""

    def to_dict(self) -> dict[str, str]:
        """As `cluster.sources[]` in `audit --json`."""
        return {
            "source": self.name,
            "state": self.state,
            "detail": self.detail,
            "missing": self.missing,
        }


@dataclass
class ClusterFacts:
    """Everything the view read, digested."""

    version: str = ""
    groups: dict[str, list[str]] = field(default_factory=dict)
    nodes: list[NodeFacts] = field(default_factory=list)
    agents: list[AgentPod] = field(default_factory=list)
    waiting: list[WaitingPod] = field(default_factory=list)
    waiting_unkept: int = 0
    events: dict[tuple[str, str], str] = field(default_factory=dict)  # (ns, pod): message
    gang_running: dict[Gang, int] = field(default_factory=dict)
    daemon_sets: list[DaemonSetFacts] = field(default_factory=list)
    cluster_policies: list[tuple[str, str]] = field(default_factory=list)
    nic_policies: list[tuple[str, str]] = field(default_factory=list)
    slices: list[tuple[str, str, int]] = field(default_factory=list)
    slice_devices: list[SliceDevice] = field(default_factory=list)
    taint_rules: list[Rule] = field(default_factory=list)  # DeviceTaintRules, anyone's
    pod_groups: list[PodGroupFacts] = field(default_factory=list)
    jobs: list[GpuJob] = field(default_factory=list)
    storage_classes: list[tuple[str, str, bool]] = field(default_factory=list)
    csi_drivers: list[str] = field(default_factory=list)
    rwx_claims: dict[str, int] = field(default_factory=dict)  # by StorageClass
    node_pools: list[str] = field(default_factory=list)
    autoscaler_status: str | None = None  # the status ConfigMap's first line, when found
    sources: dict[str, Source] = field(default_factory=dict)
    # The GPU nodes' gpuprobe conditions and taints (audit's `kubernetes` key), kept from the
    # same pass over the nodes when `signal_config` asks for them.
    signal_config: KubernetesConfig | None = None
    signals: list[NodeSignals] = field(default_factory=list)

    def state(self, name: str) -> str:
        """How reading a source went (`unread` when it was not tried)."""
        source = self.sources.get(name)
        return source.state if source else "unread"

    def served(self, group: str) -> bool:
        """Whether the API server serves an API group (discovery)."""
        return group in self.groups


def missing_permission(verb: str, kind: Kind) -> str:
    """The RBAC rule a 403 says is missing, as `verb resource.group`."""
    return f"{verb} {kind.plural}" + (f".{kind.group}" if kind.group else "")


def _guarded(
    facts: ClusterFacts, name: str, kind: Kind | None, verb: str, read: Callable[[], None]
) -> None:
    """Run one source's read and record how it went."""
    try:
        read()
    except KubeError as exc:
        if exc.code == "404":
            facts.sources[name] = Source(name, "not installed", exc.message)
        elif exc.code == "403":
            missing = missing_permission(verb, kind) if kind else ""
            facts.sources[name] = Source(name, "forbidden", exc.message, missing)
        else:
            facts.sources[name] = Source(name, "failed", f"{exc.code}: {exc.message}")
    else:
        facts.sources.setdefault(name, Source(name, "read"))


def read_agents(reader: ClusterReader, facts: ClusterFacts) -> None:
    """Discovery and the gpuprobe DaemonSet's pods (where the agents answer): what the
    audit needs before it can ask the agents."""

    def discover() -> None:
        facts.groups = reader.groups()
        facts.version = str(reader.get_path("/version").get("gitVersion", ""))

    _guarded(facts, "discovery", None, "get", discover)

    def agents() -> None:
        facts.agents = [agent_pod(p) for p in reader.each(kinds.PODS, labels=AGENT_LABELS)]

    _guarded(facts, "agent pods", kinds.PODS, "list", agents)


def read_rest(reader: ClusterReader, facts: ClusterFacts) -> None:
    """Every other source, in the order the checklist needs them most."""
    _guarded(facts, "nodes", kinds.NODES, "list", lambda: _nodes(reader, facts))
    _guarded(facts, "pending pods", kinds.PODS, "list", lambda: _waiting(reader, facts))
    if facts.waiting:
        _guarded(facts, "scheduling events", kinds.EVENTS, "list", lambda: _events(reader, facts))
        _guarded(facts, "gang pods", kinds.PODS, "list", lambda: _gangs(reader, facts))
    _guarded(facts, "daemonsets", kinds.DAEMON_SETS, "list", lambda: _daemon_sets(reader, facts))
    _crd(
        reader,
        facts,
        "clusterpolicies",
        kinds.CLUSTER_POLICIES,
        lambda o: facts.cluster_policies.append(policy_state(o)),
    )
    _crd(
        reader,
        facts,
        "nicclusterpolicies",
        kinds.NIC_CLUSTER_POLICIES,
        lambda o: facts.nic_policies.append(policy_state(o)),
    )
    _slices(reader, facts)
    _taint_rules(reader, facts)
    for kind in (kinds.VOLCANO_POD_GROUPS, kinds.COSCHEDULING_POD_GROUPS):
        _crd(reader, facts, f"podgroups.{kind.group}", kind, _pod_groups(facts, kind.group))
    _crd(reader, facts, "jobsets", kinds.JOB_SETS, lambda o: facts.jobs.append(job_set(o)))
    _crd(
        reader,
        facts,
        "pytorchjobs",
        kinds.PYTORCH_JOBS,
        lambda o: facts.jobs.append(training_job("PyTorchJob", "pytorchReplicaSpecs", o)),
    )
    _crd(
        reader,
        facts,
        "mpijobs",
        kinds.MPI_JOBS,
        lambda o: facts.jobs.append(training_job("MPIJob", "mpiReplicaSpecs", o)),
    )
    _guarded(
        facts,
        "storageclasses",
        kinds.STORAGE_CLASSES,
        "list",
        lambda: _each(
            reader, kinds.STORAGE_CLASSES, lambda o: facts.storage_classes.append(storage_class(o))
        ),
    )
    _guarded(
        facts,
        "csidrivers",
        kinds.CSI_DRIVERS,
        "list",
        lambda: _each(
            reader,
            kinds.CSI_DRIVERS,
            lambda o: facts.csi_drivers.append(str((o.get("metadata") or {}).get("name", ""))),
        ),
    )
    _guarded(facts, "persistentvolumeclaims", kinds.CLAIMS, "list", lambda: _claims(reader, facts))
    _crd(
        reader,
        facts,
        "nodepools",
        kinds.NODE_POOLS,
        lambda o: facts.node_pools.append(str((o.get("metadata") or {}).get("name", ""))),
    )
    _guarded(
        facts,
        "cluster-autoscaler status",
        kinds.CONFIG_MAPS,
        "get",
        lambda: _autoscaler(reader, facts),
    )


def _each(reader: ClusterReader, kind: Kind, take: Callable[[dict[str, Any]], None]) -> None:
    for obj in reader.each(kind):
        take(obj)


def _pod_groups(facts: ClusterFacts, group: str) -> Callable[[dict[str, Any]], None]:
    def take(obj: dict[str, Any]) -> None:
        facts.pod_groups.append(pod_group(group, obj))

    return take


def _crd(
    reader: ClusterReader,
    facts: ClusterFacts,
    name: str,
    kind: Kind,
    take: Callable[[dict[str, Any]], None],
) -> None:
    """A custom resource: read when discovery shows its group and version served; "not
    installed" when it does not (discovery unread: tried anyway, a 404 says the same)."""
    if facts.groups and kind.version not in facts.groups.get(kind.group, []):
        facts.sources[name] = Source(name, "not installed", f"{kind.api_version} is not served")
        return
    _guarded(facts, name, kind, "list", lambda: _each(reader, kind, take))


def _nodes(reader: ClusterReader, facts: ClusterFacts) -> None:
    config = facts.signal_config
    for node in reader.each(kinds.NODES):
        facts.nodes.append(digest(node))
        labels = (node.get("metadata") or {}).get("labels") or {}
        if config is not None and selects(config.taint.node_selector, labels):
            facts.signals.append(signals(node, groups(config)))


def _waiting(reader: ClusterReader, facts: ClusterFacts) -> None:
    for pod in reader.each(kinds.PODS, fields="status.phase=Pending"):
        waiting = waiting_gpu_pod(pod)
        if waiting is None:
            continue
        if len(facts.waiting) < MOST_WAITING:
            facts.waiting.append(waiting)
        else:
            facts.waiting_unkept += 1


def _events(reader: ClusterReader, facts: ClusterFacts) -> None:
    """The latest FailedScheduling message of each waiting pod kept."""
    wanted = {(p.namespace, p.name) for p in facts.waiting}
    latest: dict[tuple[str, str], str] = {}
    fields = "involvedObject.kind=Pod,reason=FailedScheduling"
    for event in reader.each(kinds.EVENTS, fields=fields):
        about = event.get("involvedObject") or {}
        key = (str(about.get("namespace", "")), str(about.get("name", "")))
        if key not in wanted:
            continue
        when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        if key not in latest or when >= latest[key]:
            latest[key] = when
            facts.events[key] = str(event.get("message", ""))


def _gangs(reader: ClusterReader, facts: ClusterFacts) -> None:
    """The running pods of each gang that has waiting pods (by its label)."""
    gangs = list(dict.fromkeys(p.gang for p in facts.waiting if p.gang is not None))
    for gang in gangs[:MOST_GANGS]:
        if not gang.by_label:
            continue  # Volcano's annotation selects nothing: its PodGroup counts them
        selector = f"{gang.key}={gang.name}"
        running = reader.each(
            kinds.PODS,
            labels=selector,
            fields=f"status.phase=Running,metadata.namespace={gang.namespace}",
        )
        facts.gang_running[gang] = sum(1 for _ in running)


def _daemon_sets(reader: ClusterReader, facts: ClusterFacts) -> None:
    for obj in reader.each(kinds.DAEMON_SETS):
        found = daemon_set(obj)
        if found is not None:
            facts.daemon_sets.append(found)


def _slices(reader: ClusterReader, facts: ClusterFacts) -> None:
    """DRA ResourceSlices at the newest version the server serves."""
    served = (
        facts.groups.get("resource.k8s.io", [])
        if facts.groups
        else list(kinds.RESOURCE_SLICE_VERSIONS)
    )
    version = next((v for v in kinds.RESOURCE_SLICE_VERSIONS if v in served), None)
    if version is None:
        facts.sources["resourceslices"] = Source(
            "resourceslices", "not installed", "resource.k8s.io is not served"
        )
        return
    kind = Kind("resource.k8s.io", version, "resourceslices", "ResourceSlice", namespaced=False)
    _guarded(
        facts,
        "resourceslices",
        kind,
        "list",
        lambda: _each(reader, kind, lambda o: _slice(facts, o)),
    )


def _slice(facts: ClusterFacts, obj: dict[str, Any]) -> None:
    facts.slices.append(resource_slice(obj))
    facts.slice_devices.extend(slice_devices(obj))


def _taint_rules(reader: ClusterReader, facts: ClusterFacts) -> None:
    """DeviceTaintRules at the newest version that serves them (v1 from 1.37, v1beta2 in
    1.36 behind its feature gate: a 404 at v1 tries v1beta2)."""
    served = (
        facts.groups.get("resource.k8s.io", [])
        if facts.groups
        else list(kinds.DEVICE_TAINT_RULE_VERSIONS)
    )
    versions = [v for v in kinds.DEVICE_TAINT_RULE_VERSIONS if v in served]
    if not versions:
        facts.sources["devicetaintrules"] = Source(
            "devicetaintrules", "not installed", "resource.k8s.io is not served"
        )
        return
    for version in versions:
        facts.taint_rules.clear()
        _rules_at(reader, facts, version)
        if facts.state("devicetaintrules") != "not installed":
            return
        del facts.sources["devicetaintrules"]  # try the next version
    facts.sources["devicetaintrules"] = Source(
        "devicetaintrules", "not installed", "no served version lists DeviceTaintRules"
    )


def _rules_at(reader: ClusterReader, facts: ClusterFacts, version: str) -> None:
    kind = Kind("resource.k8s.io", version, "devicetaintrules", "DeviceTaintRule", False)
    _guarded(
        facts,
        "devicetaintrules",
        kind,
        "list",
        lambda: _each(reader, kind, lambda o: facts.taint_rules.append(taint_rule(o))),
    )


def _claims(reader: ClusterReader, facts: ClusterFacts) -> None:
    for claim in reader.each(kinds.CLAIMS):
        name = rwx_claim_class(claim)
        if name is not None:
            facts.rwx_claims[name] = facts.rwx_claims.get(name, 0) + 1


def _autoscaler(reader: ClusterReader, facts: ClusterFacts) -> None:
    namespace, name = kinds.AUTOSCALER_STATUS
    try:
        found = reader.get(kinds.CONFIG_MAPS, name, namespace)
    except KubeError as exc:
        if exc.code != "404":
            raise
        facts.sources["cluster-autoscaler status"] = Source(
            "cluster-autoscaler status", "read", "no status ConfigMap"
        )
        return
    status = str((found.get("data") or {}).get("status", ""))
    facts.autoscaler_status = status.strip().splitlines()[0] if status.strip() else "present"


def pending_keys(pods: Iterable[WaitingPod]) -> set[tuple[str, str]]:
    """The (namespace, name) of each pod."""
    return {(p.namespace, p.name) for p in pods}
