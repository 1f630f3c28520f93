"""What one round of workload attribution costs, beside the bare PodResources call.

    python bench/workload_attribution.py --rounds 300

On the 8 GPU × 7 MIG, 56-pod snapshot `synthetic-k8s-mig-single`, a kubelet stand-in serves
the snapshot's recorded answers over the real PodResources v1 API on a unix socket. Each
round is what the `workloads` check reads: `List` and `GetAllocatableResources` over the
socket (a fresh channel, as the check opens one per round), the GPU and MIG inventory and
processes from NVML (replayed), each GPU process's /proc/<pid>/cgroup and the kubelet's log
directories, and the resolution of every grant. The reference is the bare `List` call on a
kept channel, the least any PodResources client pays (dcgm-exporter's per-scrape cost). Prints
p50 / p99 of both in milliseconds and their ratio, as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "agent"), str(ROOT / "tests")]

import grpc  # noqa: E402

from gpuprobe.checks.context import CheckContext  # noqa: E402
from gpuprobe.checks.rules.vendors import node_uses  # noqa: E402
from gpuprobe.host import snapshot_host  # noqa: E402
from gpuprobe.host.fs import HostFS  # noqa: E402
from gpuprobe.host.podresources import DEFAULT_SOCKET, LivePodResources  # noqa: E402
from gpuprobe.kubelet.podresources.v1 import api_pb2, api_pb2_grpc  # noqa: E402
from gpuprobe.workloads.attribution import attribute  # noqa: E402
from kubelet_standin import SOCKET, kubelet, state_from_json  # noqa: E402

SNAPSHOT = ROOT / "tests" / "snapshots" / "synthetic-k8s-mig-single"


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"p50_ms": round(statistics.median(ordered) * 1e3, 3), "p99_ms": round(p99 * 1e3, 3)}


def main() -> None:
    """Time the rounds and print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gp-bench-", dir="/tmp"))
    try:
        host = snapshot_host(str(SNAPSHOT))
        host.podresources = LivePodResources(HostFS(root))
        state = state_from_json(json.loads((SNAPSHOT / "podresources.json").read_text()))
        state.allow = lambda: True  # type: ignore[method-assign]  # no 100/s limit in a bench
        with kubelet(root, state):
            attribution, bare = [], []
            devices = 0
            for _ in range(args.rounds):
                started = time.perf_counter()
                answer = host.podresources.ask(DEFAULT_SOCKET, 2.0)
                devices = len(attribute(host, answer, node_uses(CheckContext(host))).devices)
                attribution.append(time.perf_counter() - started)
            with grpc.insecure_channel(f"unix://{root / SOCKET}") as channel:
                stub = api_pb2_grpc.PodResourcesListerStub(channel)
                stub.List(api_pb2.ListPodResourcesRequest(), timeout=2.0)  # connect once
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    stub.List(api_pb2.ListPodResourcesRequest(), timeout=2.0)
                    bare.append(time.perf_counter() - started)
        ours, reference = percentiles(attribution), percentiles(bare)
        print(
            json.dumps(
                {
                    "snapshot": SNAPSHOT.name,
                    "pods": len(state.listed.pod_resources),
                    "devices": devices,
                    "rounds": args.rounds,
                    "attribution_round": ours,
                    "bare_list_call": reference,
                    "ratio_p50": round(ours["p50_ms"] / reference["p50_ms"], 1),
                },
                indent=1,
            )
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
