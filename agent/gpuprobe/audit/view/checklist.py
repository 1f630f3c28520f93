"""The checklist a team renting GPUs under Kubernetes must check, each item one function of
the facts (and the agents' reports) returning its line and its findings."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gpuprobe.audit.cluster import AuditedNode
from gpuprobe.audit.view import quarantine
from gpuprobe.audit.view.kinds import GANG_SCHEDULERS, TRAINING_OPERATORS
from gpuprobe.audit.view.model import Item
from gpuprobe.audit.view.nodes import GFD_LABELS, MIG_PREFIX, RDMA_PREFIX, NodeFacts
from gpuprobe.audit.view.objects import RWX_PROVISIONERS
from gpuprobe.audit.view.read import ClusterFacts
from gpuprobe.audit.view.waiting import parse_time
from gpuprobe.report import Action, Finding, Severity, Status

Judged = tuple[Item, list[Finding]]
NAMED = 5
# Managed control planes, by the signs they leave: the server's version suffix, the node
# labels and provider IDs of their node pools.
MANAGED = (
    ("EKS", ("-eks-",), ("eks.amazonaws.com/",), ()),
    ("GKE", ("-gke.",), ("cloud.google.com/gke-",), ("gce://",)),
    ("AKS", (), ("kubernetes.azure.com/",), ("azure://",)),
)


def names(items: Sequence[str]) -> str:
    """A few names, and how many more."""
    shown = ", ".join(items[:NAMED])
    return shown + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def unread(name: str, facts: ClusterFacts, *sources: str) -> Item | None:
    """The item as UNKNOWN when a source it needs could not be read, or was never asked
    (an earlier failure, the deadline)."""
    for source in sources:
        found = facts.sources.get(source)
        if found is None:
            return Item(name, Status.UNKNOWN, f"not read: {source}: never asked", {})
        if found.state in ("forbidden", "failed"):
            why = f"needs {found.missing}" if found.missing else found.detail
            return Item(
                name, Status.UNKNOWN, f"not read: {source}: {why}", {"source": found.to_dict()}
            )
    return None


def _why(facts: ClusterFacts, source: str) -> str:
    """Why a source was not read, in a few words."""
    found = facts.sources.get(source)
    if found is None:
        return "never asked"
    return f"needs {found.missing}" if found.missing else found.detail or found.state


def control_plane(facts: ClusterFacts) -> Judged:
    """Managed (EKS, GKE, AKS: their version suffixes, node labels, provider IDs) or self-run
    (control-plane nodes among the nodes)."""
    if (item := unread("control_plane", facts, "nodes")) is not None:
        return item, []
    signs = []
    for name, versions, labels, providers in MANAGED:
        if any(v in facts.version for v in versions):
            signs.append((name, f"server version {facts.version}"))
        for node in facts.nodes:
            if any(k.startswith(labels) for k in node.labels) if labels else False:
                signs.append((name, f"node labels {labels[0]}*"))
                break
        if providers and any(n.provider_id.startswith(providers) for n in facts.nodes):
            signs.append((name, f"provider IDs {providers[0]}"))
    own = [n.name for n in facts.nodes if n.control_plane]
    facts_out: dict[str, Any] = {"server_version": facts.version, "control_plane_nodes": own}
    if signs:
        provider = Counter(s[0] for s in signs).most_common(1)[0][0]
        facts_out |= {
            "managed": True,
            "provider": provider,
            "signs": [s[1] for s in signs if s[0] == provider],
        }
        return Item(
            "control_plane",
            Status.OK,
            f"managed ({provider}): " + ", ".join(facts_out["signs"]),
            facts_out,
        ), []
    if own:
        facts_out |= {"managed": False, "provider": None}
        return Item(
            "control_plane", Status.OK, f"self-run: control-plane nodes {names(own)}", facts_out
        ), []
    facts_out |= {"managed": None, "provider": None}
    return Item(
        "control_plane",
        Status.OK,
        "no sign of a managed provider and no control-plane node visible "
        "(a hosted control plane of another kind)",
        facts_out,
    ), []


def gpu_node_entries(
    nodes: Sequence[NodeFacts], agents: Mapping[str, AuditedNode]
) -> list[dict[str, Any]]:
    """Each GPU node's resources and labels, as `cluster.gpu_nodes[]`."""
    found = []
    for node in nodes:
        if not node.is_gpu_node:
            continue
        agent = agents.get(node.name)
        found.append(
            {
                "node": node.name,
                "capacity": node.capacity,
                "allocatable": node.allocatable,
                "allocated": round(agent.usage.allocated, 3) if agent and agent.usage else None,
                "labels": {k: node.labels[v] for k, v in GFD_LABELS.items() if v in node.labels},
                "taints": node.taints,
                "spot": node.spot,
                "agent": "answering" if agent and agent.reachable else "missing",
            }
        )
    return found


def gpu_resources(facts: ClusterFacts, agents: Mapping[str, AuditedNode]) -> Judged:
    """Capacity, allocatable and (from the agents) allocated, per resource; the GFD products."""
    if (item := unread("gpu_resources", facts, "nodes")) is not None:
        return item, []
    gpu_nodes = [n for n in facts.nodes if n.is_gpu_node]
    capacity: Counter[str] = Counter()
    allocatable: Counter[str] = Counter()
    for node in gpu_nodes:
        capacity.update({k: v for k, v in node.capacity.items() if not k.startswith(RDMA_PREFIX)})
        allocatable.update(
            {k: v for k, v in node.allocatable.items() if not k.startswith(RDMA_PREFIX)}
        )
    usages = [agents[n.name].usage for n in gpu_nodes if n.name in agents]
    allocated = [u.allocated for u in usages if u is not None]
    products = Counter(
        n.labels.get(GFD_LABELS["product"], "")
        for n in gpu_nodes
        if GFD_LABELS["product"] in n.labels
    )
    out = {
        "gpu_nodes": len(gpu_nodes),
        "capacity": dict(capacity),
        "allocatable": dict(allocatable),
        "allocated": round(sum(allocated), 3) if allocated else None,
        "allocated_known_on_nodes": len(allocated),
        "products": dict(products),
    }
    if not gpu_nodes:
        return Item(
            "gpu_resources",
            Status.WARNING,
            "no GPU node: no node is labelled with GPUs or offers a GPU resource",
            out,
        ), []
    offered = ", ".join(f"{allocatable[k]} {k}" for k in sorted(allocatable)) or "nothing"
    answered = [n for n in gpu_nodes if n.name in agents and agents[n.name].reachable]
    if allocated:
        used = f", {out['allocated']:g} allocated on the {len(allocated)} nodes with agents"
    elif answered:
        used = (
            f", allocation unknown ({len(answered)} agent(s) answered, none with the "
            "workloads check's allocations from the kubelet)"
        )
    else:
        used = ", allocation unknown (no agent answered)"
    products_text = (
        "; ".join(f"{p} on {n}" for p, n in products.most_common()) or "no GFD product labels"
    )
    return Item(
        "gpu_resources",
        Status.OK,
        f"{len(gpu_nodes)} GPU node(s) offer {offered}{used}; {products_text}",
        out,
    ), []


def device_stack(facts: ClusterFacts) -> Judged:
    """Device plugin DaemonSets, GPU Operator ClusterPolicy state, DRA drivers; every GPU
    node must offer its GPUs (GPU_NODE_NOT_ADVERTISING)."""
    if (item := unread("device_stack", facts, "nodes")) is not None:
        return item, []
    plugins = [d for d in facts.daemon_sets if d.role == "device-plugin"]
    drivers = Counter(driver for driver, _, _ in facts.slices)
    dra_nodes = {node for _, node, count in facts.slices if node and count}
    findings = []
    silent = [
        n for n in facts.nodes if n.labelled_gpu and n.gpu_offered == 0 and n.name not in dra_nodes
    ]
    for node in silent:
        findings.append(
            Finding(
                "GPU_NODE_NOT_ADVERTISING",
                Severity.CRITICAL,
                f"node {node.name} is labelled as having GPUs but offers no GPU resource to the "
                f"scheduler (allocatable: {node.allocatable or 'none'}) and no DRA ResourceSlice: "
                "its device plugin is not running or not registered there; GPU pods cannot land "
                "on it",
                Action.FIX_CONFIG,
                f"node:{node.name}",
            )
        )
    out: dict[str, Any] = {
        "device_plugins": [
            {"namespace": d.namespace, "name": d.name, "desired": d.desired, "ready": d.ready}
            for d in plugins
        ],
        "cluster_policies": [{"name": n, "state": s} for n, s in facts.cluster_policies],
        "gpu_operator": facts.state("clusterpolicies"),
        "dra_drivers": dict(drivers),
        "dra": facts.state("resourceslices"),
        "not_advertising": [n.name for n in silent],
    }
    parts = [
        f"device plugin {d.namespace}/{d.name} {d.ready}/{d.desired} ready" for d in plugins
    ] or ["no device plugin DaemonSet found"]
    if facts.state("daemonsets") != "read":
        parts = [f"device plugins not read ({_why(facts, 'daemonsets')})"]
    if facts.cluster_policies:
        parts += [
            f"GPU Operator ClusterPolicy {n} {s or 'no state'}" for n, s in facts.cluster_policies
        ]
    else:
        parts.append(f"GPU Operator {facts.state('clusterpolicies')}")
    parts.append(
        f"DRA drivers {', '.join(f'{d} ({c} slices)' for d, c in drivers.items())}"
        if drivers
        else f"DRA {facts.state('resourceslices')}"
    )
    if silent:
        parts.append(f"{len(silent)} GPU node(s) offer no GPU: {names([n.name for n in silent])}")
    bad_policy = any(s and s != "ready" for _, s in facts.cluster_policies)
    bad_plugin = any(d.ready < d.desired for d in plugins)
    status = (
        Status.CRITICAL if silent else Status.WARNING if bad_policy or bad_plugin else Status.OK
    )
    return Item("device_stack", status, "; ".join(parts), out), findings


def sharing(facts: ClusterFacts) -> Judged:
    """Time-slicing replicas, MIG strategy and MIG resources, MPS, from GFD labels."""
    if (item := unread("sharing", facts, "nodes")) is not None:
        return item, []
    gpu_nodes = [n for n in facts.nodes if n.is_gpu_node]
    replicas = Counter(
        n.labels.get(GFD_LABELS["replicas"], "")
        for n in gpu_nodes
        if n.labels.get(GFD_LABELS["replicas"], "1") not in ("", "1")
    )
    strategies = Counter(
        n.labels.get(GFD_LABELS["sharing_strategy"])
        for n in gpu_nodes
        if n.labels.get(GFD_LABELS["sharing_strategy"]) not in (None, "none")
    )
    mig = Counter(
        n.labels.get(GFD_LABELS["mig_strategy"])
        for n in gpu_nodes
        if n.labels.get(GFD_LABELS["mig_strategy"]) not in (None, "none")
    )
    mig_resources: Counter[str] = Counter()
    for n in gpu_nodes:
        mig_resources.update({k: v for k, v in n.allocatable.items() if k.startswith(MIG_PREFIX)})
    out = {
        "time_slicing_replicas": dict(replicas),
        "sharing_strategies": dict(strategies),
        "mig_strategies": dict(mig),
        "mig_resources": dict(mig_resources),
    }
    parts = []
    if replicas:
        parts.append(
            "time-slicing: "
            + ", ".join(f"{r} replicas on {c} node(s)" for r, c in replicas.items())
        )
    if strategies:
        parts.append("sharing strategy: " + ", ".join(f"{s} on {c}" for s, c in strategies.items()))
    if mig:
        parts.append("MIG strategy: " + ", ".join(f"{s} on {c}" for s, c in mig.items()))
    if mig_resources:
        parts.append(
            "MIG devices: " + ", ".join(f"{v} {k}" for k, v in sorted(mig_resources.items()))
        )
    return Item("sharing", Status.OK, "; ".join(parts) or "no sharing: whole GPUs only", out), []


def interconnect(facts: ClusterFacts) -> Judged:
    """RDMA resources on the GPU nodes, and the NVIDIA Network Operator's NicClusterPolicy."""
    if (item := unread("interconnect", facts, "nodes")) is not None:
        return item, []
    gpu_nodes = [n for n in facts.nodes if n.is_gpu_node]
    rdma: Counter[str] = Counter()
    with_rdma = 0
    for n in gpu_nodes:
        found = {k: v for k, v in n.allocatable.items() if k.startswith(RDMA_PREFIX)}
        rdma.update(found)
        with_rdma += bool(found)
    out = {
        "rdma_resources": dict(rdma),
        "gpu_nodes_with_rdma": with_rdma,
        "network_operator": facts.state("nicclusterpolicies"),
        "nic_cluster_policies": [{"name": n, "state": s} for n, s in facts.nic_policies],
    }
    operator = (
        "; ".join(f"NicClusterPolicy {n} {s or 'no state'}" for n, s in facts.nic_policies)
        or f"network operator {facts.state('nicclusterpolicies')}"
    )
    if rdma:
        text = f"RDMA on {with_rdma} of {len(gpu_nodes)} GPU node(s): " + ", ".join(
            f"{v} {k}" for k, v in sorted(rdma.items())
        )
    else:
        text = "no RDMA resource on any GPU node (TCP only between nodes)"
    return Item("interconnect", Status.OK, f"{text}; {operator}", out), []


def gangs_and_operators(facts: ClusterFacts) -> Judged:
    """Gang schedulers and queues, and training operators, by their API groups."""
    if (item := unread("gang_scheduling", facts, "discovery")) is not None:
        return item, []
    schedulers = [name for group, name in GANG_SCHEDULERS.items() if facts.served(group)]
    operators = [name for group, name in TRAINING_OPERATORS.items() if facts.served(group)]
    out = {"gang_schedulers": schedulers, "training_operators": operators}
    text = (
        f"gang scheduling/queues: {', '.join(schedulers) or 'none'}; "
        f"training operators: {', '.join(operators) or 'none'}"
    )
    return Item("gang_scheduling", Status.OK if schedulers else Status.WARNING, text, out), []


def shared_storage(facts: ClusterFacts) -> Judged:
    """CSI drivers and StorageClasses; which offer ReadWriteMany; bound RWX claims
    (NO_SHARED_STORAGE when none does)."""
    if (item := unread("shared_storage", facts, "storageclasses")) is not None:
        return item, []
    rwx = [(name, prov) for name, prov, _ in facts.storage_classes if prov in RWX_PROVISIONERS]
    claimed = {name: n for name, n in facts.rwx_claims.items() if n}
    out = {
        "csi_drivers": facts.csi_drivers,
        "storage_classes": [
            {"name": n, "provisioner": p, "default": d, "rwx": p in RWX_PROVISIONERS}
            for n, p, d in facts.storage_classes
        ],
        "rwx_bound_claims": claimed,
        "claims": facts.state("persistentvolumeclaims"),
    }
    if rwx or claimed:
        parts = [f"{n} ({RWX_PROVISIONERS[p]})" for n, p in rwx]
        text = "ReadWriteMany: " + (", ".join(parts) or "no known RWX provisioner")
        if claimed:
            text += "; bound RWX claims: " + ", ".join(
                f"{n or '(no class)'} {c}" for n, c in sorted(claimed.items())
            )
        return Item("shared_storage", Status.OK, text, out), []
    classes = ", ".join(f"{n} ({p})" for n, p, _ in facts.storage_classes) or "none"
    finding = Finding(
        "NO_SHARED_STORAGE",
        Severity.WARNING,
        f"no StorageClass offers ReadWriteMany storage that pods on several nodes can mount "
        f"(classes: {classes})"
        + (" and no RWX claim is bound" if facts.state("persistentvolumeclaims") == "read" else "")
        + ": distributed jobs have no shared "
        "checkpoint or dataset volume; install a shared file system's CSI driver (EFS, "
        "Filestore, Azure Files, NFS, CephFS, Lustre) and a StorageClass for it",
        Action.CHECK_STORAGE,
        "cluster",
    )
    return Item(
        "shared_storage", Status.WARNING, f"no ReadWriteMany StorageClass: {classes}", out
    ), [finding]


def spot(facts: ClusterFacts, agents: Mapping[str, AuditedNode]) -> Judged:
    """Spot GPU nodes and what handles their notices: gpuprobe's `lifecycle` check on the
    node, a termination-handler DaemonSet, GKE's own graceful shutdown of spot nodes."""
    if (item := unread("spot", facts, "nodes")) is not None:
        return item, []
    handlers = [
        f"{d.namespace}/{d.name}"
        for d in facts.daemon_sets
        if d.role == "termination-handler" and d.ready
    ]
    spot_nodes = [n for n in facts.nodes if n.is_gpu_node and n.spot]
    unhandled, by = [], Counter[str]()
    for node in spot_nodes:
        agent = agents.get(node.name)
        if agent is not None and agent.reachable and "lifecycle" in agent.checks:
            by["gpuprobe lifecycle"] += 1
        elif handlers:
            by[handlers[0]] += 1
        elif (node.spot or "").startswith("cloud.google.com/"):
            by["GKE graceful node shutdown"] += 1
        else:
            unhandled.append(node.name)
    out = {
        "spot_gpu_nodes": [n.name for n in spot_nodes],
        "handled_by": dict(by),
        "unhandled": unhandled,
        "termination_handlers": handlers,
    }
    if not spot_nodes:
        return Item("spot", Status.OK, "no spot or preemptible GPU node", out), []
    text = f"{len(spot_nodes)} spot GPU node(s); notices handled by " + (
        ", ".join(f"{h} ({c})" for h, c in by.items()) or "nothing"
    )
    if not unhandled:
        return Item("spot", Status.OK, text, out), []
    if facts.state("daemonsets") != "read":  # a termination handler may run unseen
        return Item(
            "spot", Status.UNKNOWN, f"{text}; handlers not read ({_why(facts, 'daemonsets')})", out
        ), []
    finding = Finding(
        "SPOT_DRAIN_UNHANDLED",
        Severity.WARNING,
        f"{len(unhandled)} spot GPU node(s) with nothing handling their interruption notices "
        f"({names(unhandled)}): no gpuprobe agent with the lifecycle check answers there and "
        "no termination handler runs, so their pods die without a drain; run gpuprobe on them "
        "(the lifecycle check taints a node on notice) or a termination handler",
        Action.FIX_CONFIG,
        "cluster",
    )
    return Item("spot", Status.WARNING, f"{text}; unhandled: {names(unhandled)}", out), [finding]


def autoscaling(
    facts: ClusterFacts, agents: Mapping[str, AuditedNode], now: datetime, window: float
) -> Judged:
    """What can scale GPU nodes (cluster-autoscaler, Karpenter NodePools), and GPU nodes idle
    past the window with what keeps each from scaling down (GPU_NODE_IDLE)."""
    if (item := unread("autoscaling", facts, "nodes")) is not None:
        return item, []
    scalers = []
    if facts.autoscaler_status:
        scalers.append(f"cluster-autoscaler ({facts.autoscaler_status})")
    if facts.node_pools:
        scalers.append(f"Karpenter NodePools {names(facts.node_pools)}")
    findings, idle = [], []
    for node in facts.nodes:
        agent = agents.get(node.name)
        if node.is_gpu_node and (agent is None or agent.usage is None):
            found = _idle_by_api(facts, node, now, window, scalers)
            if found is not None:
                idle.append(found[0])
                findings.append(found[1])
            continue
        if (
            not node.is_gpu_node
            or agent is None
            or agent.usage is None
            or agent.usage.allocated > 0
        ):
            continue
        usage = agent.usage
        since = parse_time(usage.since or "")
        counted = (now - since).total_seconds() if since else 0.0
        if usage.allocated_hours > 0 or counted < window:
            continue  # allocated within the agent's counting, or counted too briefly to tell
        blockers = list(node.blockers)
        if not scalers:
            blockers.append("no autoscaler (cluster-autoscaler or Karpenter) found")
        idle.append({"node": node.name, "idle_seconds": round(counted), "blocked_by": blockers})
        keeps = (
            "; kept by " + ", ".join(blockers)
            if blockers
            else "; nothing found that keeps it (pods that block eviction are not read)"
        )
        findings.append(
            Finding(
                "GPU_NODE_IDLE",
                Severity.WARNING,
                f"GPU node {node.name} has had no GPU allocated for {counted / 3600:.1f} h "
                f"(its agent's counting, {node.gpu_offered} GPU resource(s) offered){keeps}: "
                "an idle GPU node is cost without work; scale it down",
                Action.FIX_CONFIG,
                f"node:{node.name}",
            )
        )
    out = {
        "autoscalers": scalers,
        "node_pools": facts.node_pools,
        "cluster_autoscaler": facts.autoscaler_status,
        "idle_gpu_nodes": idle,
        "gpu_nodes_not_examined": facts.unwatched_unread,
    }
    text = (
        f"autoscaling: {', '.join(scalers) or 'none found'}; "
        f"{len(idle)} GPU node(s) idle past the window"
    )
    if facts.unwatched_unread:
        text += (
            f" ({facts.unwatched_unread} GPU node(s) without an agent not examined: "
            "their pods were not read)"
        )
    return Item("autoscaling", Status.WARNING if idle else Status.OK, text, out), findings


# AGENT_MISSING's message (the audit's screen groups the nodes that share a `why`).
AGENT_MISSING_WORDS = (
    "GPU node {node} has no gpuprobe agent answering: {why}; its GPUs are not checked"
)


def _no_agent_pod(facts: ClusterFacts, node: NodeFacts) -> str:
    """Why no agent pod runs on a GPU node, naming only the causes the view has not ruled
    out: no gpuprobe DaemonSet at all; the node's taints; the DaemonSet's node selector."""
    if facts.state("daemonsets") == "read":
        ours = [d for d in facts.daemon_sets if d.role == "gpuprobe"]
        if not ours and not facts.agents:
            return (
                "no gpuprobe DaemonSet is installed (none among the cluster's DaemonSets, "
                "and no agent pod anywhere)"
            )
        taints = [
            f"{t['key']}" + (f"={t['value']}" if t["value"] else "") + f":{t['effect']}"
            for t in node.taints
            if t["effect"] in ("NoSchedule", "NoExecute")
        ]
        where = (
            f"the DaemonSet {ours[0].namespace}/{ours[0].name} "
            f"({ours[0].ready}/{ours[0].desired} ready)"
            if ours
            else "the agents' DaemonSet"
        )
        if taints:
            return (
                f"no gpuprobe agent pod runs there: {where} may not tolerate its taints "
                + ", ".join(taints)
            )
        return (
            f"no gpuprobe agent pod runs there: the node has no taint to keep it out, so "
            f"{where} leaves it out by its node selector or affinity"
        )
    return (
        "no gpuprobe agent pod runs there (a taint it does not tolerate, a node selector, or no "
        f"DaemonSet: the DaemonSets were not read, {_why(facts, 'daemonsets')})"
    )


def _idle_by_api(
    facts: ClusterFacts, node: NodeFacts, now: datetime, window: float, scalers: list[str]
) -> tuple[dict[str, Any], Finding] | None:
    """A GPU node no agent counts, idle past the window as far as the API server shows: no
    pod that asks for GPUs on it now, none ended (of those the API still lists) or the node
    joined within the window."""
    pods = facts.node_gpu_pods.get(node.name)
    if pods is None or pods.holding or node.gpu_offered == 0:
        return None  # a node that offers no GPU is GPU_NODE_NOT_ADVERTISING, not idle
    joined = parse_time(node.created)
    ended = parse_time(pods.last_end)
    since = max((t for t in (joined, ended) if t is not None), default=None)
    if since is None:
        return None
    counted = (now - since).total_seconds()
    if counted < window:
        return None
    blockers = list(node.blockers)
    if not scalers:
        blockers.append("no autoscaler (cluster-autoscaler or Karpenter) found")
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    when = (
        f"its last GPU pod the API still lists ended {stamp}"
        if since == ended
        else f"no GPU pod listed on it since it joined {stamp}"
    )
    keeps = (
        "; kept by " + ", ".join(blockers)
        if blockers
        else "; nothing found that keeps it (pods that block eviction are not read)"
    )
    entry = {
        "node": node.name,
        "idle_seconds": round(counted),
        "blocked_by": blockers,
        "by": "api",
        "since": stamp,
    }
    finding = Finding(
        "GPU_NODE_IDLE",
        Severity.WARNING,
        f"GPU node {node.name} has held no GPU pod for {counted / 3600:.1f} h as far as the API "
        f"server shows ({when}; no agent counts its allocations, and the API forgets deleted "
        f"pods), {node.gpu_offered} GPU resource(s) offered{keeps}: an idle GPU node is cost "
        "without work; scale it down",
        Action.FIX_CONFIG,
        f"node:{node.name}",
    )
    return entry, finding


def agents_item(
    facts: ClusterFacts, agents: Mapping[str, AuditedNode], found_by_api: bool
) -> Judged:
    """GPU nodes with no gpuprobe agent answering (AGENT_MISSING)."""
    if (item := unread("agents", facts, "nodes")) is not None:
        return item, []
    gpu_nodes = [n.name for n in facts.nodes if n.is_gpu_node]
    missing = [n for n in gpu_nodes if not (n in agents and agents[n].reachable)]
    pods = {a.node: a for a in facts.agents}
    by_name = {n.name: n for n in facts.nodes}
    findings = []
    for name in missing:
        pod = pods.get(name)
        why = (
            f"its agent pod ({pod.target or 'no address'}, {pod.phase}) did not answer"
            if pod is not None
            else _no_agent_pod(facts, by_name[name])
            if found_by_api
            else "no target named in --targets answered for it"
        )
        findings.append(
            Finding(
                "AGENT_MISSING",
                Severity.WARNING,
                AGENT_MISSING_WORDS.format(node=name, why=why),
                Action.FIX_CONFIG,
                f"node:{name}",
            )
        )
    renamed = {
        n: agents[n].node or ""
        for n in gpu_nodes
        if n in agents and agents[n].reachable and agents[n].node != n
    }
    out = {
        "gpu_nodes": len(gpu_nodes),
        "answering": len(gpu_nodes) - len(missing),
        "missing": missing,
        "agent_pods": len(facts.agents),
        "found_by": "api" if found_by_api else "targets",
        "answering_as": renamed,
    }
    text = (
        f"gpuprobe answers on {len(gpu_nodes) - len(missing)} of {len(gpu_nodes)} GPU node(s)"
        + (f"; missing: {names(missing)}" if missing else "")
        + (
            "; answering under another node name: "
            + names([f"{n} as {a}" for n, a in sorted(renamed.items())])
            if renamed
            else ""
        )
    )
    return Item("agents", Status.WARNING if missing else Status.OK, text, out), findings


def gpu_quarantine(facts: ClusterFacts) -> Judged:
    """The GPUs quarantined across the cluster (DeviceTaintRules, gpuprobe's and others',
    and the DRA drivers' own device taints) and the GPUs each node pool loses to them."""
    if (item := unread("gpu_quarantine", facts, "nodes", "devicetaintrules")) is not None:
        return item, []
    entries = quarantine.quarantined(facts.taint_rules, facts.slice_devices)
    status, text, out = quarantine.judge(entries, facts.nodes, facts.state("devicetaintrules"))
    return Item("gpu_quarantine", status, text, out), []
