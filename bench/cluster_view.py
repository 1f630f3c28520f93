"""The cluster view at scale: `gpuprobe audit --kubeconfig` on 5,000 GPU nodes and 150,000 pods.

    .venv/bin/python bench/cluster_view.py --nodes 5000 --pods 150000 --runs 3

The API server is the tests' stand-in (tests/kube_standin.py: TLS, bearer tokens, the
auditor's RBAC rendered from daemonset/auditor, pages, label and field selectors) holding
5,000 GPU nodes (GFD labels, 8 `nvidia.com/gpu` each), the gpuprobe DaemonSet's 5,000 agent
pods, `--pending` Pending GPU pods with kube-scheduler's FailedScheduling wording, and
Running pods up to `--pods` in all. The agents are bench/recorded_fleet.py's: 5,000 distinct
loopback addresses (127.1.0.1, ...) answering GetReport with a recorded real report, their
nodes named as the stand-in's (`fleet-node-000042`), so the audit finds them through the
API and asks each one. Node and pod objects are copies of one template each, which is
validated against Kubernetes' schema once (validating 155,000 copies would take the stand-in
minutes, and tell nothing more).

Each run is the whole command, `gpuprobe audit --json --kubeconfig K --deadline 60`, under
/usr/bin/time (bench/audit_scale.py's `timed`): wall time and peak RSS. The deadline is
generous, as bench/audit_scale.py's, so that the figure is the work, not a cut-off; a first
run checks that every agent answered and every waiting pod was seen. The reference, in the
same run: the same agents audited by `--targets @FILE` without the view. Prints a JSON
object. Target: the whole audit within 10 s.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench")]

from audit_scale import summarize, timed  # noqa: E402
from kube_standin import AUDITOR, KubeStandIn, auditor_rules, node, validate  # noqa: E402
from recorded_fleet import address  # noqa: E402

FLEET = ROOT / "bench" / "recorded_fleet.py"
TOKEN = "auditor-token"
OLD = "2026-12-01T00:00:00Z"
FIT_ERROR = (
    "0/5000 nodes are available: 4990 Insufficient nvidia.com/gpu, 10 node(s) had untolerated "
    "taint {gpuprobe.io/unhealthy: XID}. preemption: 0/5000 nodes are available: 4990 No "
    "preemption victims found for incoming pod, 10 Preemption is not helpful for scheduling."
)
GFD = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/mig.strategy": "single",
}


def gpu_node(name: str) -> dict[str, Any]:
    """A GPU node as a kubelet and GFD leave it."""
    found = node(name, GFD)
    resources = {"cpu": "192", "memory": "2113412928Ki", "pods": "110", "nvidia.com/gpu": "8"}
    found["status"].update({"capacity": resources, "allocatable": resources})
    found["metadata"].update({"resourceVersion": "1", "creationTimestamp": OLD, "uid": name})
    return found


def pod(namespace: str, name: str, phase: str, **extra: Any) -> dict[str, Any]:
    """A pod of one container asking for 8 GPUs."""
    container = {
        "name": "main",
        "image": "nvcr.io/nvidia/pytorch:24.10-py3",
        "resources": {"limits": {"nvidia.com/gpu": "8"}},
    }
    found: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": OLD},
        "spec": {"containers": [container]},
        "status": {"phase": phase},
    }
    for key, value in extra.items():
        found[key].update(value)
    return found


def fill(standin: KubeStandIn, nodes: int, pods: int, pending: int) -> None:
    """The cluster: GPU nodes, agent pods at the fleet's addresses, waiting and running
    pods; each kind's template validated once."""
    validate(gpu_node("fleet-node-000000"))
    for i in range(nodes):
        standin.nodes[f"fleet-node-{i:06d}"] = gpu_node(f"fleet-node-{i:06d}")
    agent_labels = {
        "app.kubernetes.io/name": "gpuprobe",
        "app.kubernetes.io/component": "node-agent",
    }
    ports = [{"name": "grpc", "containerPort": 50051, "protocol": "TCP"}]
    template = pod("gpuprobe", "gpuprobe-x", "Running")
    template["spec"]["containers"][0] = {
        "name": "gpuprobe",
        "image": "gpuprobe:0.1.0",
        "ports": ports,
    }
    template["metadata"]["labels"] = agent_labels
    validate(template)
    for i in range(nodes):
        agent = copy.deepcopy(template)
        agent["metadata"]["name"] = f"gpuprobe-{i:06d}"
        agent["spec"]["nodeName"] = f"fleet-node-{i:06d}"
        agent["status"]["podIP"] = address(i)
        standin.pods[("gpuprobe", agent["metadata"]["name"])] = agent
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": FIT_ERROR,
        "lastTransitionTime": OLD,
    }
    waiting = pod("ml", "w", "Pending", status={"conditions": [condition]})
    validate(waiting)
    for i in range(pending):
        one = copy.deepcopy(waiting)
        one["metadata"]["name"] = f"train-{i:05d}"
        standin.pods[("ml", one["metadata"]["name"])] = one
    running = pod("ml", "r", "Running")
    validate(running)
    spec, status = running["spec"], running["status"]  # shared: the stand-in copies on the way out
    for i in range(max(0, pods - nodes - pending)):
        name = f"job-{i:06d}"
        meta = {"name": name, "namespace": "batch", "creationTimestamp": OLD}
        standin.pods[("batch", name)] = {"metadata": meta, "spec": spec, "status": status}


def main() -> int:
    """Start the fleet and the stand-in, time the audits, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000, help="GPU nodes (and agents)")
    parser.add_argument("--pods", type=int, default=150000, help="pods in all")
    parser.add_argument("--pending", type=int, default=200, help="Pending GPU pods")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each audit")
    parser.add_argument("--processes", type=int, default=2, help="the fleet's processes")
    args = parser.parse_args()
    python = sys.executable
    result: dict[str, Any] = {"load_average_before": os.getloadavg()[0], **vars(args)}
    fleet = subprocess.Popen(
        [python, str(FLEET), "--count", str(args.nodes), "--processes", str(args.processes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        standin = KubeStandIn(Path(tmp), [])
        try:
            assert fleet.stdout is not None
            started = json.loads(fleet.stdout.readline())
            pids, targets = started["pids"], started["targets_file"]
            standin.add_user(TOKEN, AUDITOR, auditor_rules())
            fill(standin, args.nodes, args.pods, args.pending)
            standin.start()
            kubeconfig = str(standin.kubeconfig(TOKEN))
            view = [python, "-m", "gpuprobe", "audit", "--json", "--kubeconfig", kubeconfig]
            view += ["--deadline", "60"]
            checked = json.loads(
                subprocess.run(view, capture_output=True, text=True, check=False).stdout
            )
            reachable = checked["totals"]["reachable_nodes"]
            waiting = len(checked["cluster"]["pending_gpu_pods"])
            if reachable != args.nodes or waiting != args.pending:
                raise SystemExit(f"{reachable} agents answered, {waiting} pods seen waiting")
            before = len(standin.requests)
            runs = [timed(view, pids) for _ in range(args.runs)]
            result["api_requests_per_audit"] = (len(standin.requests) - before) // args.runs
            agents_only = [python, "-m", "gpuprobe", "audit", "--json", "--deadline", "60"]
            reference = [
                timed([*agents_only, "--targets", f"@{targets}"], pids) for _ in range(args.runs)
            ]
            result["audit_with_cluster_view"] = summarize(runs)
            result["agents_only_reference"] = summarize(reference)
            result["view_over_reference"] = round(
                result["audit_with_cluster_view"]["median_seconds"]
                / result["agents_only_reference"]["median_seconds"],
                3,
            )
        finally:
            standin.stop()
            if fleet.stdin is not None:
                fleet.stdin.close()
            fleet.wait(30)
    result["load_average_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
