"""`gpuprobe serve` with device taints and eviction on, against the API stand-in serving
resource.k8s.io and the Eviction API: the configuration file turns them on, the daemon's
loop writes the rule for the failed GPU's device and evicts the pod holding it, and
`/metrics` counts both."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from conftest import require_tool, snapshot
from kube_dra import DraStandIn, gpu_pod, nvidia_slice
from kube_standin import manifest_rules
from serving import serve_process, wait_for

NODE = "gpu-node-17"
# The ECC snapshot's GPUs (NVML index i, UUID GPU-5f1c000i-...); the driver's minors reversed.
GPUS = [
    (7 - i, f"GPU-5f1c000{i}-8e2b-4c1d-9a7e-00000000000{i}", f"0000:{i:02x}:00.0") for i in range(8)
]


def test_the_daemon_taints_the_failed_gpus_device_and_evicts_its_pod(tmp_path: Path) -> None:
    standin = DraStandIn(tmp_path, manifest_rules())
    standin.add_node(NODE, {"nvidia.com/gpu.present": "true"})
    standin.add_slice(nvidia_slice(NODE, GPUS))
    standin.add_pod(gpu_pod("ml-team", "llama-pretrain-0", "StatefulSet", app="llama"))
    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kubernetes": {"start_jitter_seconds": 0, "device_taints": {"enabled": True}},
                "remediation": {"evict_pods": True, "state_dir": str(state)},
            }
        )
    )
    standin.start()
    try:
        with serve_process(
            "--snapshot",
            snapshot("synthetic-k8s-ecc-on-training-gpu"),
            "--node-name",
            NODE,
            "--kubeconfig",
            str(standin.kubeconfig()),
            "--config",
            str(config),
        ) as served:
            wait_for(lambda: standin.deleted_pods)
            assert standin.deleted_pods == [("ml-team", "llama-pretrain-0")]
            assert [
                r["spec"]["deviceSelector"]["device"] for r in standin.rules_on(NODE).values()
            ] == [
                "gpu-5"  # NVML's GPU 2 is the driver's minor 5
            ]
            page = wait_for(lambda: (m := served.metrics()) and 'outcome="evicted"} 1.0' in m and m)
            assert 'gpuprobe_device_taints{effect="NoSchedule"} 1.0' in page
            assert 'gpuprobe_evictions_total{outcome="evicted"} 1.0' in page
            linted = subprocess.run(
                [require_tool("promtool"), "check", "metrics"],
                input=page,
                capture_output=True,
                text=True,
                check=False,
            )
            assert linted.returncode == 0, linted.stdout + linted.stderr
    finally:
        standin.stop()
