"""`gpuprobe audit --kubeconfig`: the GPUs quarantined across the cluster (DeviceTaintRules,
gpuprobe's and others', and a DRA driver's own device taints) and the GPUs lost per node pool,
against the stand-in serving resource.k8s.io (tests/kube_dra.py) with the auditor's RBAC."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import gpuprobe
from kube_dra import DraStandIn, nvidia_slice
from kube_standin import AUDITOR, auditor_rules, manifest_rules

TOKEN = "auditor-token"
POOLS = {"gpu-node-17": "h100", "gpu-node-18": "h100", "gpu-node-30": "a100"}


def gpus(node: str) -> list[tuple[int, str, str]]:
    n = int(node.rsplit("-", 1)[1])
    return [
        (m, f"GPU-{n:04x}{m:04x}-8e2b-4c1d-9a7e-000000000000", f"0000:{m:02x}:00.0")
        for m in range(8)
    ]


def rule(
    name: str, node: str, device: str, effect: str, ours: bool, version: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    key = "example.com/maintenance"
    if ours:
        key = "gpuprobe.io/unhealthy"
        meta["labels"] = {"app.kubernetes.io/managed-by": "gpuprobe", "gpuprobe.io/node": node}
        meta["annotations"] = {"gpuprobe.io/node": node}
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceTaintRule",
        "metadata": meta,
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": node, "device": device},
            "taint": {
                "key": key,
                "value": "ROW_REMAP_FAILURE" if ours else "bios",
                "effect": effect,
            },
        },
    }


@pytest.mark.parametrize(("release", "version"), [("1.37", "v1"), ("1.36", "v1beta2")])
def test_the_cluster_view_lists_quarantined_gpus_and_counts_them_per_pool(
    tmp_path: Path, release: str, version: str
) -> None:
    standin = DraStandIn(tmp_path, manifest_rules(), release)
    standin.add_user(TOKEN, AUDITOR, auditor_rules())
    for node, pool in POOLS.items():
        standin.add_node(
            node, {"nvidia.com/gpu.present": "true", "eks.amazonaws.com/nodegroup": pool}
        )
        piece = nvidia_slice(node, gpus(node))
        if node == "gpu-node-30":  # the driver's own taint on gpu-3 (its health check)
            piece["spec"]["devices"][3]["taints"] = [
                {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
            ]
        piece["metadata"]["name"] = f"{node}-gpu.nvidia.com-a1b2c"
        standin.add_slice(piece)
    standin.add_rule(
        rule(
            "gpuprobe-gpu-node-17-gpu-7-row-remap-failure",
            "gpu-node-17",
            "gpu-7",
            "NoSchedule",
            True,
            version,
        )
    )
    standin.add_rule(
        rule(
            "gpuprobe-gpu-node-17-gpu-1-row-remap-failure",
            "gpu-node-17",
            "gpu-1",
            "None",
            True,
            version,
        )
    )
    standin.add_rule(
        rule("ops-gpu-node-18-gpu-0", "gpu-node-18", "gpu-0", "NoExecute", False, version)
    )
    standin.start()
    try:
        done = gpuprobe(
            "audit",
            "--kubeconfig",
            str(standin.kubeconfig(TOKEN)),
            "--deadline",
            "5",
            "--json",
            timeout=120,
        )
        cluster = json.loads(done.stdout)["cluster"]
    finally:
        standin.stop()
    item = next(i for i in cluster["checklist"] if i["item"] == "gpu_quarantine")
    assert item["status"] == "WARNING"
    facts = item["facts"]
    assert facts["device_taint_rules"] == "read"
    assert sorted((q["by"], q["node"], q["device"], q["taint"]) for q in facts["quarantined"]) == [
        ("driver", "gpu-node-30", "gpu-3", "gpu.nvidia.com/xid=79:NoSchedule"),
        ("gpuprobe", "gpu-node-17", "gpu-1", "gpuprobe.io/unhealthy=ROW_REMAP_FAILURE:None"),
        ("gpuprobe", "gpu-node-17", "gpu-7", "gpuprobe.io/unhealthy=ROW_REMAP_FAILURE:NoSchedule"),
        ("other", "gpu-node-18", "gpu-0", "example.com/maintenance=bios:NoExecute"),
    ]
    gpu7 = next(q for q in facts["quarantined"] if q["device"] == "gpu-7")
    assert gpu7["gpu"] == "GPU-00110007-8e2b-4c1d-9a7e-000000000000"
    # The dry run (None) loses no GPU: 2 in h100 (gpu-node-17's gpu-7, gpu-node-18's gpu-0).
    assert facts["gpus_lost_per_pool"] == {"h100": 2, "a100": 1}
    assert item["summary"] == (
        "4 device(s) quarantined (2 by gpuprobe, 2 by others); GPUs lost per node pool: "
        "a100: 1, h100: 2"
    )
