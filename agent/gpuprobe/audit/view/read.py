"""Read the cluster within the audit's deadline, each source digested as its pages come.

A source that cannot be read is a fact with its reason, never the end of the view: a 404
for a custom resource (its group not served) says "not installed", a 403 names the
permission the auditor lacks, a timeout says the deadline passed. At 5,000 nodes and
150,000 pods the view reads every node (digested), the Pending pods only (a field selector),
FailedScheduling events only, and for a gang that waits, its running pods' count; the
agents already know each node's allocations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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
    name_of,
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
    NodeGpuPods,
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
# GPU nodes with no agent pod whose pods are read (a field selector each) to tell idle ones.
MOST_UNWATCHED_NODES = 200
# The unreadable objects each source names (the rest only counted).
NAMED_UNREADABLE = 5
# What reading an object of the wrong shape raises (a string where an object belongs, a
# number past a float, nesting past the stack): the object is unreadable, not the view.
SHAPE_ERRORS = (
    AttributeError,
    TypeError,
    ValueError,
    LookupError,
    ArithmeticError,
    RecursionError,
)


@dataclass(frozen=True)
class Source:
    """How reading one source went: `read`, `not installed` (404 / group not served),
    `forbidden` (403: `missing` names the permission), or `failed` (another status, a
    timeout, the server unreachable). `unreadable` counts its objects of the wrong shape
    (each skipped; `unreadable_named` names the first few, with why)."""

    name: str
    state: str
    detail: str = ""
    missing: str = ""
    unreadable: int = 0
    unreadable_named: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As `cluster.sources[]` in `audit --json`."""
        return {
            "source": self.name,
            "state": self.state,
            "detail": self.detail,
            "missing": self.missing,
            "unreadable": self.unreadable,
            "unreadable_objects": list(self.unreadable_named),
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
    # The GPU pods the API shows on GPU nodes with no agent pod, by node (the first
    # MOST_UNWATCHED_NODES; `unwatched_unread` counts the rest).
    node_gpu_pods: dict[str, NodeGpuPods] = field(default_factory=dict)
    unwatched_unread: int = 0
    node_pools: list[str] = field(default_factory=list)
    autoscaler_status: str | None = None  # the status ConfigMap's first line, when found
    sources: dict[str, Source] = field(default_factory=dict)
    # Objects of the wrong shape, by source: how many, and the first few named with why.
    unreadable: dict[str, int] = field(default_factory=dict)
    unreadable_named: dict[str, list[str]] = field(default_factory=dict)
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


def object_name(obj: Any, index: int) -> str:
    """An object as a person finds it: `namespace/name`, its name, or its place in the list
    when it has no readable name."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        return f"item {index + 1} of the list (no name)"
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    named = f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name
    return named if len(named) <= 253 else named[:250] + "..."


def _shape_error(exc: BaseException) -> str:
    """What was wrong with an object, in a few words."""
    if isinstance(exc, RecursionError):
        return "nested too deep"
    said = " ".join(str(exc).split())[:120]
    return f"a field of the wrong type or value ({type(exc).__name__}: {said})"


def unreadable(facts: ClusterFacts, source: str, obj: Any, index: int, exc: Exception) -> None:
    """Count one object the view could not read (and name it, among the first few)."""
    facts.unreadable[source] = facts.unreadable.get(source, 0) + 1
    named = facts.unreadable_named.setdefault(source, [])
    if len(named) < NAMED_UNREADABLE:
        named.append(f"{object_name(obj, index)}: {_shape_error(exc)}")


def take_each(
    facts: ClusterFacts, source: str, objects: Iterable[Any], take: Callable[[Any], None]
) -> None:
    """`take` each object; one of the wrong shape is counted and named, never the end of the
    source (nor of the view)."""
    for index, obj in enumerate(objects):
        try:
            if not isinstance(obj, Mapping):
                raise TypeError(f"a {type(obj).__name__}, not an object")
            take(obj)
        except SHAPE_ERRORS as exc:
            unreadable(facts, source, obj, index, exc)


BUILT_IN_GROUPS = ("", "apps", "storage.k8s.io")


def _absent(facts: ClusterFacts, kind: Kind | None) -> bool:
    """Whether a 404 means the kind is not installed: only for a custom resource (or an
    opt-in API group), and only when discovery was read (a server that answers 404 to
    everything, a wrong URL or proxy path, says nothing of what is installed). A built-in
    kind (nodes, pods) or discovery itself answering 404 is a failure, never "absent"."""
    if kind is None or kind.group in BUILT_IN_GROUPS:
        return False
    return facts.state("discovery") == "read"


def _path(kind: Kind | None) -> str:
    return kind.path() if kind else "discovery (/api, /apis)"


def _guarded(
    facts: ClusterFacts, name: str, kind: Kind | None, verb: str, read: Callable[[], None]
) -> None:
    """Run one source's read and record how it went: an answer of the wrong shape as a whole
    (not a list, discovery unreadable) fails the source, never the view."""
    try:
        read()
    except KubeError as exc:
        if exc.code == "404" and _absent(facts, kind):
            facts.sources[name] = Source(name, "not installed", exc.message)
        elif exc.code == "404":
            facts.sources[name] = Source(
                name,
                "failed",
                f"404: the API server answered that {_path(kind)} does not exist, and it is a "
                "built-in kind every API server serves (a wrong server URL or proxy path?): "
                + exc.message,
            )
        elif exc.code == "403":
            missing = missing_permission(verb, kind) if kind else ""
            facts.sources[name] = Source(name, "forbidden", exc.message, missing)
        else:
            facts.sources[name] = Source(name, "failed", f"{exc.code}: {exc.message}")
    except SHAPE_ERRORS as exc:
        facts.sources[name] = Source(name, "failed", f"invalid: {_shape_error(exc)}")
    else:
        facts.sources.setdefault(name, Source(name, "read"))
    bad = facts.unreadable.get(name, 0)
    if bad:
        found = facts.sources[name]
        named = tuple(facts.unreadable_named.get(name, ()))
        facts.sources[name] = Source(
            found.name, found.state, found.detail, found.missing, bad, named
        )


def read_agents(reader: ClusterReader, facts: ClusterFacts) -> None:
    """Discovery and the gpuprobe DaemonSet's pods (where the agents answer): what the
    audit needs before it can ask the agents."""

    def discover() -> None:
        facts.groups = _groups(reader, facts)
        version = reader.get_path("/version").get("gitVersion", "")
        facts.version = version if isinstance(version, str) else ""

    _guarded(facts, "discovery", None, "get", discover)

    def agents() -> None:
        found: list[AgentPod] = []
        pods = reader.each(kinds.PODS, labels=AGENT_LABELS)
        take_each(facts, "agent pods", pods, lambda p: found.append(agent_pod(p)))
        facts.agents = found

    _guarded(facts, "agent pods", kinds.PODS, "list", agents)


def read_rest(reader: ClusterReader, facts: ClusterFacts) -> None:
    """Every other source, in the order the checklist needs them most."""
    _guarded(facts, "nodes", kinds.NODES, "list", lambda: _nodes(reader, facts))
    _guarded(facts, "pending pods", kinds.PODS, "list", lambda: _waiting(reader, facts))
    if facts.state("nodes") == "read" and facts.state("agent pods") == "read":
        _guarded(
            facts,
            "pods on GPU nodes without agents",
            kinds.PODS,
            "list",
            lambda: _unwatched(reader, facts),
        )
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
            reader,
            facts,
            "storageclasses",
            kinds.STORAGE_CLASSES,
            lambda o: facts.storage_classes.append(storage_class(o)),
        ),
    )
    _guarded(
        facts,
        "csidrivers",
        kinds.CSI_DRIVERS,
        "list",
        lambda: _each(
            reader,
            facts,
            "csidrivers",
            kinds.CSI_DRIVERS,
            lambda o: facts.csi_drivers.append(name_of(o)),
        ),
    )
    _guarded(facts, "persistentvolumeclaims", kinds.CLAIMS, "list", lambda: _claims(reader, facts))
    _crd(
        reader,
        facts,
        "nodepools",
        kinds.NODE_POOLS,
        lambda o: facts.node_pools.append(name_of(o)),
    )
    _guarded(
        facts,
        "cluster-autoscaler status",
        kinds.CONFIG_MAPS,
        "get",
        lambda: _autoscaler(reader, facts),
    )


def _groups(reader: ClusterReader, facts: ClusterFacts) -> dict[str, list[str]]:
    """Discovery: every API group the server serves, with its versions (preferred first);
    the core group as "". A group entry of the wrong shape is counted, never the end."""
    core = reader.get_path("/api").get("versions") or []
    found: dict[str, list[str]] = {"": [v for v in core if isinstance(v, str)]}

    def take(group: Mapping[str, Any]) -> None:
        name = group.get("name")
        if not isinstance(name, str):
            raise TypeError(f"the group's name is a {type(name).__name__}")
        preferred = (group.get("preferredVersion") or {}).get("version")
        versions = [v.get("version") for v in group.get("versions") or []]
        versions = [v for v in versions if isinstance(v, str)]
        ordered = [preferred] if preferred in versions else []
        found[name] = ordered + [v for v in versions if v != preferred]

    take_each(facts, "discovery", reader.get_path("/apis").get("groups") or [], take)
    return found


def _each(
    reader: ClusterReader,
    facts: ClusterFacts,
    source: str,
    kind: Kind,
    take: Callable[[dict[str, Any]], None],
) -> None:
    take_each(facts, source, reader.each(kind), take)


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
    _guarded(facts, name, kind, "list", lambda: _each(reader, facts, name, kind, take))


def _nodes(reader: ClusterReader, facts: ClusterFacts) -> None:
    config = facts.signal_config

    def take(node: Mapping[str, Any]) -> None:
        digested = digest(node)
        labels = (node.get("metadata") or {}).get("labels") or {}
        signal = None
        if config is not None and selects(config.taint.node_selector, labels):
            signal = signals(node, groups(config))
        facts.nodes.append(digested)
        if signal is not None:
            facts.signals.append(signal)

    take_each(facts, "nodes", reader.each(kinds.NODES), take)


def _waiting(reader: ClusterReader, facts: ClusterFacts) -> None:
    def take(pod: Mapping[str, Any]) -> None:
        waiting = waiting_gpu_pod(pod)
        if waiting is None:
            return
        if len(facts.waiting) < MOST_WAITING:
            facts.waiting.append(waiting)
        else:
            facts.waiting_unkept += 1

    take_each(facts, "pending pods", reader.each(kinds.PODS, fields="status.phase=Pending"), take)


def _unwatched(reader: ClusterReader, facts: ClusterFacts) -> None:
    """The pods of each GPU node that no agent pod runs on (a field selector per node, the
    first MOST_UNWATCHED_NODES): whether one holds GPUs, and when the last one ended."""
    watched = {a.node for a in facts.agents}
    unwatched = [n.name for n in facts.nodes if n.is_gpu_node and n.name not in watched]
    facts.unwatched_unread = max(0, len(unwatched) - MOST_UNWATCHED_NODES)
    for name in unwatched[:MOST_UNWATCHED_NODES]:
        found = [NodeGpuPods()]

        def take(pod: Mapping[str, Any], found: list[NodeGpuPods] = found) -> None:
            found[0] = found[0].with_pod(pod)

        pods = reader.each(kinds.PODS, fields=f"spec.nodeName={name}")
        take_each(facts, "pods on GPU nodes without agents", pods, take)
        facts.node_gpu_pods[name] = found[0]


def _events(reader: ClusterReader, facts: ClusterFacts) -> None:
    """The latest FailedScheduling message of each waiting pod kept."""
    wanted = {(p.namespace, p.name) for p in facts.waiting}
    latest: dict[tuple[str, str], str] = {}
    fields = "involvedObject.kind=Pod,reason=FailedScheduling"

    def take(event: Mapping[str, Any]) -> None:
        about = event.get("involvedObject") or {}
        key = (str(about.get("namespace", "")), str(about.get("name", "")))
        if key not in wanted:
            return
        when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        if key not in latest or when >= latest[key]:
            latest[key] = when
            facts.events[key] = str(event.get("message", ""))

    take_each(facts, "scheduling events", reader.each(kinds.EVENTS, fields=fields), take)


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
        counted = [0]

        def take(_: Mapping[str, Any], counted: list[int] = counted) -> None:
            counted[0] += 1

        take_each(facts, "gang pods", running, take)
        facts.gang_running[gang] = counted[0]


def _daemon_sets(reader: ClusterReader, facts: ClusterFacts) -> None:
    def take(obj: Mapping[str, Any]) -> None:
        found = daemon_set(obj)
        if found is not None:
            facts.daemon_sets.append(found)

    take_each(facts, "daemonsets", reader.each(kinds.DAEMON_SETS), take)


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
        lambda: _each(reader, facts, "resourceslices", kind, lambda o: _slice(facts, o)),
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
        lambda: _each(
            reader,
            facts,
            "devicetaintrules",
            kind,
            lambda o: facts.taint_rules.append(taint_rule(o)),
        ),
    )


def _claims(reader: ClusterReader, facts: ClusterFacts) -> None:
    def take(claim: Mapping[str, Any]) -> None:
        name = rwx_claim_class(claim)
        if name is not None:
            facts.rwx_claims[name] = facts.rwx_claims.get(name, 0) + 1

    take_each(facts, "persistentvolumeclaims", reader.each(kinds.CLAIMS), take)


def _autoscaler(reader: ClusterReader, facts: ClusterFacts) -> None:
    namespace, name = kinds.AUTOSCALER_STATUS
    try:
        found = reader.get(kinds.CONFIG_MAPS, name, namespace)
    except KubeError as exc:
        # The API server's own 404 for a missing object names it (`configmaps "x" not
        # found`); any other 404 (a proxy's, a wrong path) is a failure.
        if exc.code != "404" or f'"{name}" not found' not in exc.message:
            raise
        facts.sources["cluster-autoscaler status"] = Source(
            "cluster-autoscaler status", "read", "no status ConfigMap"
        )
        return
    data = found.get("data") or {}
    status = data.get("status", "") if isinstance(data, Mapping) else ""
    if not isinstance(status, str):
        raise TypeError(f"its data.status is a {type(status).__name__}, not text")
    facts.autoscaler_status = status.strip().splitlines()[0] if status.strip() else "present"


def pending_keys(pods: Iterable[WaitingPod]) -> set[tuple[str, str]]:
    """The (namespace, name) of each pod."""
    return {(p.namespace, p.name) for p in pods}
