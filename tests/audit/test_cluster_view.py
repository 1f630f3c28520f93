"""`gpuprobe audit --kubeconfig`: the cluster view against the API stand-in (the auditor's
RBAC rendered from daemonset/auditor), fed objects of real shape: GFD labels as
gpu-feature-discovery writes them, kube-scheduler's FailedScheduling wording, JobSets,
StorageClasses and spot labels as EKS and GKE set them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import gpuprobe
from deployment import objects
from gpuprobe.audit.view import kinds
from gpuprobe.audit.view.scheduling import decode
from kube_standin import AUDITOR, KubeStandIn, auditor_rules, running
from serving import in_process_agent

TOKEN = "auditor-token"
OLD = "2026-12-01T00:00:00Z"  # every pod here was created long before the window
# kube-scheduler's FitError (1.31) for 8 GPU nodes: 3 full, 5 tainted by gpuprobe.
FIT_ERROR = (
    "0/8 nodes are available: 3 Insufficient nvidia.com/gpu, 5 node(s) had untolerated taint "
    "{gpuprobe.io/unhealthy: XID}. preemption: 0/8 nodes are available: 3 No preemption "
    "victims found for incoming pod, 5 Preemption is not helpful for scheduling."
)
MIG_ERROR = (
    "0/3 nodes are available: 1 node(s) had untolerated taint "
    "{node-role.kubernetes.io/control-plane: }, 2 Insufficient nvidia.com/mig-3g.40gb. "
    "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
    "2 No preemption victims found for incoming pod."
)
SELECTOR_ERROR = (
    "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
)
GFD = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/gpu.memory": "81559",
}


def gpu_status(gpus: str, version: str = "v1.31.2-eks-7f9249a") -> dict[str, Any]:
    resources = {"cpu": "192", "memory": "2113412928Ki", "pods": "110", "nvidia.com/gpu": gpus}
    return {
        "capacity": resources,
        "allocatable": resources,
        "nodeInfo": {
            "kubeletVersion": version,
            "architecture": "amd64",
            "bootID": "b",
            "containerRuntimeVersion": "containerd://1.7.22",
            "kernelVersion": "6.1.112",
            "kubeProxyVersion": version,
            "machineID": "m",
            "operatingSystem": "linux",
            "osImage": "Amazon Linux 2023",
            "systemUUID": "s",
        },
    }


def pod(
    name: str,
    gpus: dict[str, str],
    phase: str = "Pending",
    message: str | None = None,
    labels: dict[str, str] | None = None,
    namespace: str = "ml",
    node: str | None = None,
    ip: str | None = None,
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.10-py3"}
    if gpus:
        container["resources"] = {"limits": gpus}
    if ports:
        container["ports"] = ports
    spec: dict[str, Any] = {"containers": [container], "schedulerName": "default-scheduler"}
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase}
    if message is not None:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": OLD,
            }
        ]
    if ip:
        status["podIP"] = ip
    meta = {"name": name, "namespace": namespace, "creationTimestamp": OLD, "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        stand_in.add_user(TOKEN, AUDITOR, auditor_rules())
        yield stand_in


def audit_json(standin: KubeStandIn, *extra: str, token: str = TOKEN) -> dict[str, Any]:
    done = gpuprobe(
        "audit",
        "--kubeconfig",
        str(standin.kubeconfig(token)),
        "--deadline",
        "5",
        "--json",
        *extra,
        timeout=120,
    )
    assert done.returncode in (0, 1, 2, 3), done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def by_code(cluster: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for f in cluster["findings"]:
        found.setdefault(f["code"], []).append(f)
    return found


def item(cluster: dict[str, Any], name: str) -> dict[str, Any]:
    return next(i for i in cluster["checklist"] if i["item"] == name)


def test_the_scheduler_messages_decode_into_causes() -> None:
    fit = decode(FIT_ERROR)
    assert fit.nodes == 8
    assert [(r.nodes, r.cause, r.subject) for r in fit.reasons] == [
        (3, "insufficient", "nvidia.com/gpu"),
        (5, "taint", "gpuprobe.io/unhealthy=XID"),
    ]
    assert fit.preemption.startswith("0/8 nodes are available: 3 No preemption victims")
    mig = decode(MIG_ERROR)
    assert [(r.nodes, r.cause, r.subject) for r in mig.reasons] == [
        (1, "taint", "node-role.kubernetes.io/control-plane"),
        (2, "insufficient", "nvidia.com/mig-3g.40gb"),
    ]
    assert [(r.cause) for r in decode(SELECTOR_ERROR).reasons] == ["selector"]
    # Before 1.25 the taint reason read otherwise, and 1.24's node selector too.
    old = decode(
        "0/3 nodes are available: 1 node(s) had taint {node-role.kubernetes.io/master: }, "
        "that the pod didn't tolerate, 2 node(s) didn't match node selector."
    )
    assert [(r.nodes, r.cause, r.subject) for r in old.reasons] == [
        (1, "taint", "node-role.kubernetes.io/master"),
        (2, "selector", ""),
    ]
    volcano = decode("pod group is not ready, 2 Pending, 4 minAvailable; Pending: 2 Unschedulable")
    assert not volcano.decoded and [r.cause for r in volcano.reasons] == ["other"]


def test_the_auditor_role_grants_exactly_what_the_view_reads() -> None:
    (role,) = [o for o in objects("auditor") if o["kind"] == "ClusterRole"]
    assert role["metadata"]["name"] == "gpuprobe-auditor"
    granted = set()
    for rule in role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list"}, rule  # read-only, no watch needed
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((group, resource, verb, tuple(rule.get("resourceNames", []))))
    wanted = {(k.group, k.plural, "list", ()) for k in kinds.LISTED}
    wanted |= {(k.group, k.plural, "list", ()) for k in [kinds.COSCHEDULING_POD_GROUPS]}
    wanted.add(("", "configmaps", "get", (kinds.AUTOSCALER_STATUS[1],)))
    assert granted == wanted


def test_a_cluster_with_waiting_gpu_pods_gangs_and_no_shared_storage(
    standin: KubeStandIn,
) -> None:
    eks = {"eks.amazonaws.com/nodegroup": "h100", "node.kubernetes.io/instance-type": "p5.48xlarge"}
    standin.add_node(
        "gpu-node-17",
        {**GFD, **eks},
        status=gpu_status("8"),
        providerID="aws:///us-east-1a/i-0a1b2c3d4e5f60017",
    )
    spot = {**GFD, **eks, "eks.amazonaws.com/capacityType": "SPOT"}
    standin.add_node(
        "gpu-node-18",
        spot,
        status=gpu_status("8"),
        providerID="aws:///us-east-1a/i-0a1b2c3d4e5f60018",
    )
    # GFD labels it (the operator's NFD found the GPUs) but the device plugin never registered.
    standin.add_node(
        "gpu-node-19",
        {**GFD, **eks},
        status=gpu_status("0"),
        providerID="aws:///us-east-1a/i-0a1b2c3d4e5f60019",
    )
    standin.add_pod(pod("train-0", {"nvidia.com/gpu": "8"}, message=FIT_ERROR))
    standin.add_pod(pod("mig-job", {"nvidia.com/mig-3g.40gb": "1"}, message=MIG_ERROR))
    standin.add_pod(pod("cpu-only", {}, message=SELECTOR_ERROR))  # no GPU: not the view's
    jobset = {"jobset.sigs.k8s.io/jobset-name": "llama-ft"}
    standin.add_pod(
        pod(
            "llama-ft-workers-0-0",
            {"nvidia.com/gpu": "8"},
            "Running",
            labels=jobset,
            node="gpu-node-17",
        )
    )
    standin.add_pod(
        pod("llama-ft-workers-0-1", {"nvidia.com/gpu": "8"}, message=FIT_ERROR, labels=jobset)
    )
    standin.add_object(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": "gp3",
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "parameters": {"type": "gp3"},
        }
    )
    standin.install("jobset.x-k8s.io", ["v1alpha2"])
    standin.add_object(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "llama-ft", "namespace": "ml"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "parallelism": 2,
                                "completions": 2,
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "main",
                                                "image": "x",
                                                "resources": {"limits": {"nvidia.com/gpu": "8"}},
                                            }
                                        ]
                                    }
                                },
                            }
                        },
                    }
                ]
            },
        }
    )
    with in_process_agent("synthetic-h100-8gpu-healthy", node_name="gpu-node-17") as agent:
        port = agent.grpc_port
        standin.add_pod(
            pod(
                "gpuprobe-x7k2p",
                {},
                "Running",
                namespace="gpuprobe",
                node="gpu-node-17",
                ip="127.0.0.1",
                labels={
                    "app.kubernetes.io/name": "gpuprobe",
                    "app.kubernetes.io/component": "node-agent",
                },
                ports=[{"name": "grpc", "containerPort": port, "protocol": "TCP"}],
            )
        )
        before = len(standin.requests)
        report = audit_json(standin)
    assert [n["node"] for n in report["nodes"]] == ["gpu-node-17"]  # found through the API
    # The nodes are listed once: the gpuprobe signals (`kubernetes`) come from the same pass.
    asked = [path for _, _, path, _ in standin.requests[before:]]
    assert asked.count("/api/v1/nodes") == 1
    signals = report["kubernetes"]
    assert signals["error"] is None
    assert [n["node"] for n in signals["nodes"]] == ["gpu-node-17", "gpu-node-18", "gpu-node-19"]
    cluster = report["cluster"]
    codes = by_code(cluster)
    assert sorted(codes) == [
        "AGENT_MISSING",
        "GANG_PARTIALLY_SCHEDULED",
        "GPU_NODE_IDLE",  # gpu-node-18: no agent, no GPU pod since it joined (issue 40)
        "GPU_NODE_NOT_ADVERTISING",
        "GPU_POD_PENDING",
        "NO_GANG_SCHEDULING",
        "NO_SHARED_STORAGE",
        "SPOT_DRAIN_UNHANDLED",
    ]
    assert [f["resource"] for f in codes["GPU_NODE_IDLE"]] == ["node:gpu-node-18"]
    assert [f["resource"] for f in codes["GPU_NODE_NOT_ADVERTISING"]] == ["node:gpu-node-19"]
    assert codes["GPU_NODE_NOT_ADVERTISING"][0]["severity"] == "CRITICAL"
    assert report["status"] == "CRITICAL" and cluster["status"] == "CRITICAL"
    assert [f["resource"] for f in codes["AGENT_MISSING"]] == [
        "node:gpu-node-18",
        "node:gpu-node-19",
    ]
    assert "no gpuprobe agent pod runs there" in codes["AGENT_MISSING"][0]["message"]
    pending = {f["resource"]: f for f in codes["GPU_POD_PENDING"]}
    assert sorted(pending) == ["pod:ml/llama-ft-workers-0-1", "pod:ml/mig-job", "pod:ml/train-0"]
    assert (
        "gpuprobe tainted the node(s) (gpuprobe.io/unhealthy=XID)"
        in pending["pod:ml/train-0"]["message"]
    )
    assert pending["pod:ml/train-0"]["action"] == "HARDWARE_INSPECTION"
    assert "no node offers nvidia.com/mig-3g.40gb" in pending["pod:ml/mig-job"]["message"]
    waiting = {p["pod"]: p for p in cluster["pending_gpu_pods"]}
    causes = waiting["train-0"]["causes"]
    assert [(c["cause"], c["nodes"]) for c in causes] == [
        ("gpuprobe_taint", 5),
        ("insufficient", 3),
    ]
    assert causes[1]["meaning"] == (
        # the snapshot's agent has no kubelet to ask: it does not know its allocations
        "not enough free GPUs: 16 nvidia.com/gpu allocatable on 2 node(s); no agent tells how "
        "many are allocated"
    )
    assert waiting["llama-ft-workers-0-1"]["gang"] == "gang:JobSet:ml/llama-ft"
    (gang,) = codes["GANG_PARTIALLY_SCHEDULED"]
    assert gang["resource"] == "gang:JobSet:ml/llama-ft"
    assert "1 pod(s) run, 1 GPU pod(s) wait" in gang["message"]
    assert "JobSet ml/llama-ft (2 pods)" in codes["NO_GANG_SCHEDULING"][0]["message"]
    assert item(cluster, "control_plane")["facts"]["provider"] == "EKS"
    assert item(cluster, "gpu_resources")["facts"]["allocatable"] == {"nvidia.com/gpu": 16}
    assert item(cluster, "spot")["facts"]["unhandled"] == ["gpu-node-18"]
    assert item(cluster, "gang_scheduling")["facts"] == {
        "gang_schedulers": [],
        "training_operators": ["JobSet"],
    }
    sources = {s["source"]: s["state"] for s in cluster["sources"]}
    assert sources["clusterpolicies"] == "not installed"  # a CRD absent: a fact, no error
    assert sources["podgroups.scheduling.volcano.sh"] == "not installed"
    assert "forbidden" not in sources.values() and "failed" not in sources.values()
    # The agents' report keeps its contract beside the view.
    assert {"status", "nodes", "skew", "totals"} <= set(report)


def test_the_agents_role_alone_says_which_permissions_are_missing(standin: KubeStandIn) -> None:
    standin.add_node("gpu-node-18", GFD, status=gpu_status("8"))
    report = audit_json(standin, token="agent-token")
    cluster = report["cluster"]
    sources = {s["source"]: s for s in cluster["sources"]}
    assert sources["daemonsets"]["state"] == "forbidden"
    assert sources["daemonsets"]["missing"] == "list daemonsets.apps"
    assert sources["storageclasses"]["missing"] == "list storageclasses.storage.k8s.io"
    shared = item(cluster, "shared_storage")
    assert shared["status"] == "UNKNOWN"
    assert shared["summary"] == "not read: storageclasses: needs list storageclasses.storage.k8s.io"
    assert "NO_SHARED_STORAGE" not in by_code(cluster)  # never judged on what was not read


def test_audit_without_targets_or_kubernetes_access_is_a_usage_error() -> None:
    done = gpuprobe("audit")
    assert done.returncode == 64
    assert done.stderr == (
        "gpuprobe: audit: give --targets, or --kubeconfig (or run in a pod with a service "
        "account) to find the agents through the API server (see gpuprobe audit --help)\n"
    )


def test_pages_events_and_the_service_account(standin: KubeStandIn) -> None:
    """In a pod (the service account's token and CA, the API server's address): 1,001 nodes
    come in three pages of 500; a pod whose condition has no message yet is explained by its
    FailedScheduling event (core/v1, as kube-scheduler records it)."""
    from gpuprobe.audit.run import AuditOptions, audit
    from gpuprobe.kube.api import Access

    for i in range(1001):
        standin.nodes[f"cpu-{i:04d}"] = {**copy_node(standin, i)}
    standin.add_pod(pod("fresh", {"amd.com/gpu": "1"}))
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "fresh.1813e4a5b2c7d901", "namespace": "ml"},
        "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "fresh", "apiVersion": "v1"},
        "reason": "FailedScheduling",
        "message": "0/1002 nodes are available: 1002 Insufficient amd.com/gpu. preemption: "
        "0/1002 nodes are available: 1002 No preemption victims found for incoming pod.",
        "type": "Warning",
        "source": {"component": "default-scheduler"},
        "reportingComponent": "default-scheduler",
        "reportingInstance": "",
        "firstTimestamp": OLD,
        "lastTimestamp": OLD,
        "count": 3,
    }
    standin.add_object(event)
    standin.add_user("sa-token", AUDITOR, auditor_rules())
    account = standin.service_account_dir("sa-token")
    server = f"https://127.0.0.1:{standin.port}"
    before = len(standin.requests)
    report = audit(
        AuditOptions(targets=[], deadline=10, kube=Access(account=account, server=server))
    )
    asked = [path for _, method, path, _ in standin.requests[before:]]
    assert asked.count("/api/v1/nodes") == 3
    assert report.view is not None
    (entry,) = report.view.waiting
    assert entry["message"].startswith("0/1002 nodes are available: 1002 Insufficient amd.com/gpu")
    assert [c["cause"] for c in entry["causes"]] == ["not_offered"]


def copy_node(standin: KubeStandIn, i: int) -> dict[str, Any]:
    """A CPU node as a kubelet registers it (the stand-in's own, renamed)."""
    from kube_standin import node

    found = node(f"cpu-{i:04d}")
    found["metadata"]["resourceVersion"] = "1"
    return found


def test_a_wrong_typed_object_is_one_counted_problem_naming_it(standin: KubeStandIn) -> None:
    """Issue 41: a ClusterPolicy whose `status` is the string "ready" (not an object) gave
    AttributeError, exit 1 and truncated JSON. It is one object the view could not read,
    counted and named; the rest of the view stands."""
    standin.add_node("gpu-node-18", GFD, status=gpu_status("8"))
    standin.install("nvidia.com", ["v1"])
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"driver": {"enabled": True}},
        "status": "ready",
    }
    standin.add_object(policy)
    standin.add_object(
        {**policy, "metadata": {"name": "second-policy"}, "status": {"state": "ready"}}
    )
    report = audit_json(standin)
    cluster = report["cluster"]
    sources = {s["source"]: s for s in cluster["sources"]}
    assert sources["clusterpolicies"]["state"] == "read"
    assert sources["clusterpolicies"]["unreadable"] == 1
    assert sources["clusterpolicies"]["unreadable_objects"] == [
        "cluster-policy: a field of the wrong type or value (AttributeError: 'str' object has "
        "no attribute 'get')"
    ]
    (finding,) = by_code(cluster)["API_OBJECT_UNREADABLE"]
    assert finding["severity"] == "UNKNOWN"
    assert finding["message"].startswith(
        "1 object(s) of clusterpolicies could not be read and were skipped: cluster-policy: "
    )
    stack = item(cluster, "device_stack")
    assert stack["facts"]["cluster_policies"] == [{"name": "second-policy", "state": "ready"}]
    # The nodes were read whole: the items that read only them keep their verdicts.
    assert item(cluster, "gpu_resources")["status"] == "OK"
    assert stack["status"] != "OK"


def test_an_api_that_answers_404_to_everything_is_unknown_never_absent(
    standin: KubeStandIn,
) -> None:
    """Issue 40: a wrong server URL or proxy path answers 404 to every request (a Status, as a
    kube-apiserver behind a path prefix does for a path it does not serve). Nodes and pods
    are built-in kinds: a 404 for them is no proof of absence. The view was "agents OK 0 of
    0", spot OK, pending OK; it is UNKNOWN with the reason, and no item is OK."""
    from kube_standin import RawAnswer

    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    }
    json_type = {"Content-Type": "application/json"}
    standin.faults.raw = [RawAnswer(404, json_type, json.dumps(status).encode())] * 200
    done = gpuprobe(
        "audit", "--kubeconfig", str(standin.kubeconfig(TOKEN)), "--deadline", "5", "--json"
    )
    assert done.returncode == 3, done.stderr
    cluster = json.loads(done.stdout)["cluster"]
    assert cluster["status"] == "UNKNOWN"
    assert [i["item"] for i in cluster["checklist"] if i["status"] == "OK"] == []
    sources = {s["source"]: s for s in cluster["sources"]}
    for built_in in ("discovery", "agent pods", "nodes", "pending pods", "daemonsets"):
        assert sources[built_in]["state"] == "failed", sources[built_in]
    assert sources["nodes"]["detail"].startswith(
        "404: the API server answered that /api/v1/nodes does not exist, and it is a built-in "
        "kind every API server serves (a wrong server URL or proxy path?)"
    )
    assert item(cluster, "agents")["summary"].startswith("not read: nodes: 404: ")
    # Nothing read says what is installed: the custom resources are not "not installed" either.
    assert "not installed" not in {s["state"] for s in cluster["sources"]}


def test_volcanos_wording_decodes_into_causes() -> None:
    """Issue 40: Volcano's scheduler says "unavailable" where kube-scheduler says "available"
    (volcano-sh/volcano pkg/scheduler/api/unschedule_info.go, FitErrors.Error: `0/%v nodes
    are unavailable: %v.`, reasons sorted, joined by ", "); its message was left as cause
    "other"."""
    fit = decode(
        "0/5 nodes are unavailable: 2 node(s) had untolerated taint "
        "{nvidia.com/gpu: present}, 3 Insufficient nvidia.com/gpu."
    )
    assert fit.decoded and fit.nodes == 5
    assert [(r.nodes, r.cause, r.subject) for r in fit.reasons] == [
        (2, "taint", "nvidia.com/gpu=present"),
        (3, "insufficient", "nvidia.com/gpu"),
    ]
    fit = decode("all nodes are unavailable: 3 Insufficient nvidia.com/gpu.")
    assert fit.nodes == 3
    assert [(r.cause, r.subject) for r in fit.reasons] == [("insufficient", "nvidia.com/gpu")]


def test_the_views_words_agents_under_another_name_allocation_and_ruled_out_causes(
    tmp_path: Path,
) -> None:
    """Issue 40: an agent that answered under another node name (its NODE_NAME the host's
    name, the Node the cloud's) was AGENT_MISSING "did not answer"; with agents answering
    the view said "allocation unknown (no agent answered)"; and AGENT_MISSING listed "no
    DaemonSet" as a cause with the gpuprobe DaemonSet in sight."""
    from cluster_objects import (
        GFD,
        GPU_NODE,
        daemon_set,
        gpu_node_status,
        healthy_gpu_cluster,
        now,
        started,
    )

    with in_process_agent("synthetic-h100-8gpu-healthy", node_name="ip-10-0-1-5") as agent:
        standin = started(tmp_path)
        try:
            healthy_gpu_cluster(standin, agent.grpc_port, now())
            standin.add_object(daemon_set("gpuprobe", "gpuprobe", 1, 2))
            taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
            standin.add_node("gpu-node-2", GFD, status=gpu_node_status("8"), taints=[taint])
            report = audit_json(standin)
        finally:
            standin.stop()
    cluster = report["cluster"]
    agents = item(cluster, "agents")
    assert agents["facts"]["answering_as"] == {GPU_NODE: "ip-10-0-1-5"}
    assert agents["facts"]["missing"] == ["gpu-node-2"]
    assert agents["summary"] == (
        "gpuprobe answers on 1 of 2 GPU node(s); missing: gpu-node-2; answering under another "
        f"node name: {GPU_NODE} as ip-10-0-1-5"
    )
    (missing,) = by_code(cluster)["AGENT_MISSING"]
    assert missing["message"] == (
        "GPU node gpu-node-2 has no gpuprobe agent answering: no gpuprobe agent pod runs there: "
        "the DaemonSet gpuprobe/gpuprobe (1/2 ready) may not tolerate its taints "
        "nvidia.com/gpu=present:NoSchedule; its GPUs are not checked"
    )
    # The snapshot's agent has no kubelet to ask: it answered, without allocations.
    assert item(cluster, "gpu_resources")["summary"] == (
        "2 GPU node(s) offer 16 nvidia.com/gpu, allocation unknown (1 agent(s) answered, none "
        "with the workloads check's allocations from the kubelet); NVIDIA-H100-80GB-HBM3 on 2"
    )


def test_agent_missing_with_no_daemonset_says_so_alone(standin: KubeStandIn) -> None:
    standin.add_node("gpu-node-18", GFD, status=gpu_status("8"))
    cluster = audit_json(standin)["cluster"]
    messages = {f["resource"]: f["message"] for f in by_code(cluster)["AGENT_MISSING"]}
    assert messages["node:gpu-node-18"] == (
        "GPU node gpu-node-18 has no gpuprobe agent answering: no gpuprobe DaemonSet is "
        "installed (none among the cluster's DaemonSets, and no agent pod anywhere); its GPUs "
        "are not checked"
    )


def test_idle_gpu_nodes_without_agents_from_the_pods_the_api_lists(
    standin: KubeStandIn,
) -> None:
    """Issue 40: a GPU node with no GPU pod for 7 hours and
    `cluster-autoscaler.kubernetes.io/scale-down-disabled=true` was not reported when no agent
    runs. The view reads the pods of each GPU node without an agent (field selector
    `spec.nodeName`) and says since when it held no GPU pod, as far as the API shows."""
    from datetime import UTC, datetime, timedelta

    def ago(hours: float) -> str:
        return (datetime.now(UTC) - timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")

    blocked = {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}
    for name in ("gpu-idle", "gpu-busy", "gpu-new"):
        standin.add_node(
            name,
            GFD,
            status=gpu_status("8"),
            annotations=blocked if name == "gpu-idle" else None,
        )
    standin.nodes["gpu-new"]["metadata"]["creationTimestamp"] = ago(0.5)
    # A finished job's pod, as the API lists it until it is deleted (kubelet 1.31's shape).
    done = pod("finetune-0", {"nvidia.com/gpu": "8"}, "Succeeded", node="gpu-idle")
    done["status"]["startTime"] = ago(9)
    done["status"]["containerStatuses"] = [
        {
            "name": "main",
            "image": "nvcr.io/nvidia/pytorch:24.10-py3",
            "imageID": "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64,
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": ago(9),
                    "finishedAt": ago(7),
                }
            },
        }
    ]
    standin.add_pod(done)
    standin.add_pod(pod("cpu-agent", {}, "Running", node="gpu-idle", namespace="kube-system"))
    standin.add_pod(pod("serve-0", {"nvidia.com/gpu": "8"}, "Running", node="gpu-busy"))
    from cluster_objects import recording

    with recording(standin) as answered:
        cluster = audit_json(standin)["cluster"]
    idle = by_code(cluster)["GPU_NODE_IDLE"]
    # gpu-node-17 (the stand-in's own) offers no GPU: not advertising, never idle.
    assert [f["resource"] for f in idle] == ["node:gpu-idle"]
    assert idle[0]["message"].startswith(
        "GPU node gpu-idle has held no GPU pod for 7.0 h as far as the API server shows (its "
        "last GPU pod the API still lists ended "
    )
    assert "kept by cluster-autoscaler.kubernetes.io/scale-down-disabled=true" in idle[0]["message"]
    (entry,) = item(cluster, "autoscaling")["facts"]["idle_gpu_nodes"]
    assert entry["node"] == "gpu-idle" and entry["by"] == "api"
    assert 7 * 3600 - 120 <= entry["idle_seconds"] <= 7 * 3600 + 120
    # One list a GPU node without an agent, by field selector (never every pod).
    pods = sorted(k for k in answered if k.startswith("/api/v1/pods?fieldSelector=spec."))
    assert pods == [
        f"/api/v1/pods?fieldSelector=spec.nodeName={n}"
        for n in ("gpu-busy", "gpu-idle", "gpu-new", "gpu-node-17")
    ]
    assert "/api/v1/pods" not in answered


def test_a_node_with_wrong_typed_resources_is_unreadable_not_a_node_without_gpus(
    standin: KubeStandIn,
) -> None:
    """A Node whose `status.allocatable` is a list (rewritten on its way by a proxy) was read
    as offering nothing: GPU_NODE_NOT_ADVERTISING, CRITICAL, for a node nobody looked at. It
    is one object the view could not read."""
    standin.add_node("gpu-node-18", GFD, status=gpu_status("8"))
    broken = json.loads(json.dumps(standin.nodes["gpu-node-18"]))
    broken["status"]["allocatable"] = [{"nvidia.com/gpu": "8"}]
    healthy = json.loads(json.dumps(standin.nodes["gpu-node-17"]))
    page = {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": [healthy, broken]}
    standin.faults.served = {"/api/v1/nodes": json.dumps(page).encode()}
    cluster = audit_json(standin)["cluster"]
    silent = by_code(cluster).get("GPU_NODE_NOT_ADVERTISING", [])
    assert "node:gpu-node-18" not in [f["resource"] for f in silent]
    nodes = next(s for s in cluster["sources"] if s["source"] == "nodes")
    assert nodes["unreadable"] == 1
    assert nodes["unreadable_objects"] == [
        "gpu-node-18: a field of the wrong type or value (TypeError: resources that are a "
        "list, not an object)"
    ]
