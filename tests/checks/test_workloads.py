"""Check `workloads`: each GPU and MIG device's holders, GPU_USED_WITHOUT_ALLOCATION,
GPU_ALLOCATED_IDLE over the daemon's window, ALLOCATION_UNKNOWN; and every other GPU
finding naming its pods. The kubelet is a stand-in speaking the real PodResources v1 API on
a unix socket (answering what the snapshot recorded) or the snapshot's podresources.json."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import snapshot
from gpuprobe.checks import workloads
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.host import Host, snapshot_host
from gpuprobe.host.fs import HostFS
from gpuprobe.host.podresources import LivePodResources
from gpuprobe.pipeline import run_checks
from gpuprobe.report import PodRef, Status
from helpers import FakeClock, codes, config
from kubelet_standin import KubeletState, dead_kubelet, kubelet, state_from_json

UUID = "GPU-5f1c{:04x}-8e2b-4c1d-9a7e-{:012x}"
TRAINER = PodRef("ml-team", "llama-pretrain-0", "trainer")


def gpu(i: int) -> str:
    return f"gpu:{i}:" + UUID.format(i, i)


def holders(result: Any) -> dict[str, list[tuple[str, str, str, str]]]:
    """Each device's holders as (namespace/pod, container, resource, device id)."""
    return {
        d["resource"]: [
            (f"{h['namespace']}/{h['pod']}", h["container"], h["resource"], h["device_id"])
            for h in d["holders"]
        ]
        for d in result.data["devices"]
        if d["holders"]
    }


def live(name: str, root: Path) -> tuple[Host, KubeletState]:
    """The snapshot's node, its kubelet asked live over a socket under `root`."""
    host = snapshot_host(snapshot(name))
    host.podresources = LivePodResources(HostFS(root))
    content = json.loads((Path(snapshot(name)) / "podresources.json").read_text())
    return host, state_from_json(content)


@pytest.mark.parametrize("strategy", ["uuid", "index"])
def test_whole_gpus_by_uuid_or_index_over_the_socket(strategy: str, short_tmp: Path) -> None:
    host, state = live(f"synthetic-k8s-gpus-by-{strategy}", short_tmp)
    with kubelet(short_tmp, state):
        result = workloads.run(CheckContext(host), Config())
    ids = [UUID.format(i, i) if strategy == "uuid" else str(i) for i in range(8)]
    trainer = ("ml-team/llama-pretrain-0", "trainer", "nvidia.com/gpu")
    assert holders(result) == {
        **{gpu(i): [(*trainer, ids[i])] for i in range(4)},
        gpu(4): [("inference/vllm-7d9f8-kq2xp", "vllm", "nvidia.com/gpu", ids[4])],
        gpu(5): [("inference/vllm-7d9f8-mw5tz", "vllm", "nvidia.com/gpu", ids[5])],
        gpu(6): [("research/notebook-alice", "jupyter", "nvidia.com/gpu", ids[6])],
    }
    assert result.status is Status.OK and result.findings == []
    assert result.summary == "7 of 8 GPUs allocated, to 4 pods; 1 unallocated"
    device = result.data["devices"][4]
    assert device["processes"] == [
        {
            "pid": 41004,
            "namespace": "inference",
            "pod": "vllm-7d9f8-kq2xp",
            "container": "vllm",
            "pod_uid": "7c1e0002-2d4b-4a8e-9f3c-000000000002",
            "container_id": device["processes"][0]["container_id"],
        }
    ]
    assert len(device["processes"][0]["container_id"]) == 64
    assert result.data["kubelet"] == {
        "socket": "/var/lib/kubelet/pod-resources/kubelet.sock",
        "state": "answered",
        "expected": True,
        "pods": 6,
        "allocatable": {"nvidia.com/gpu": 8},
    }


def test_time_slicing_replicas_of_a_renamed_resource_share_one_gpu() -> None:
    host = snapshot_host(snapshot("synthetic-k8s-time-slicing"))
    result = workloads.run(CheckContext(host), Config())
    shared = "nvidia.com/gpu.shared"
    assert holders(result) == {
        gpu(0): [
            ("dev/notebook-ana", "jupyter", shared, UUID.format(0, 0) + "::0"),
            ("dev/notebook-ben", "jupyter", shared, UUID.format(0, 0) + "::3"),
            ("dev/notebook-cho", "jupyter", shared, UUID.format(0, 0) + "::7"),
        ]
    }
    assert [h.get("replica") for h in result.data["devices"][0]["holders"]] == ["0", "3", "7"]
    assert result.findings == []
    assert result.summary == "1 of 8 GPUs allocated, to 3 pods; 7 unallocated"


def test_mig_mixed_devices_are_held_by_mig_uuid(short_tmp: Path) -> None:
    host, state = live("synthetic-k8s-mig-mixed", short_tmp)
    with kubelet(short_tmp, state):
        result = workloads.run(CheckContext(host), Config())
    mig = "MIG-7b3d00{:02x}-1c9e-5a0f-8d42-000000{:06x}"
    assert holders(result) == {
        "mig:0:2:0": [
            ("ml-team/finetune-3g", "trainer", "nvidia.com/mig-3g.40gb", mig.format(0, 0))
        ],
        "mig:0:3:0": [("ml-team/eval-2g", "eval", "nvidia.com/mig-2g.20gb", mig.format(1, 1))],
        "mig:0:9:0": [("inference/embed-1g", "server", "nvidia.com/mig-1g.10gb", mig.format(2, 2))],
    }
    by_resource = {d["resource"]: d for d in result.data["devices"]}
    assert [p["pod"] for p in by_resource["mig:0:2:0"]["processes"]] == ["finetune-3g"]
    assert by_resource["mig:0:3:0"]["processes"] == []
    assert by_resource["mig:0:10:0"]["holders"] == []
    assert result.findings == []
    assert result.summary == "3 of 11 MIG devices and GPUs allocated, to 3 pods; 8 unallocated"


def test_mig_single_gives_56_mig_devices_to_56_pods() -> None:
    result = workloads.run(
        CheckContext(snapshot_host(snapshot("synthetic-k8s-mig-single"))), Config()
    )
    held = holders(result)
    assert len(held) == 56
    assert held["mig:7:13:0"] == [
        (
            "inference/embed-7-6",
            "server",
            "nvidia.com/gpu",
            "MIG-7b3d0706-1c9e-5a0f-8d42-000007000006",
        )
    ]
    assert result.summary == "56 of 56 MIG devices and GPUs allocated, to 56 pods; 0 unallocated"
    assert result.findings == []


def test_dra_claims_resolve_through_the_claim_cdi_spec(short_tmp: Path) -> None:
    host, state = live("synthetic-k8s-dra-claims", short_tmp)
    with kubelet(short_tmp, state):
        result = workloads.run(CheckContext(host), Config())
    name = "k8s.gpu.nvidia.com/claim=dab5ab50-d59a-42a6-af16-cfd4628c0f7{}-gpu-{}"
    assert holders(result) == {
        gpu(0): [("gpu-test/pod1", "ctr", name.format(0, 0), "gpu-0")],
        gpu(1): [("gpu-test/pod2", "ctr", name.format(1, 1), "gpu-1")],
    }
    assert [h["claim"] for h in result.data["devices"][1]["holders"]] == ["gpu-test/single-gpu-2"]
    assert result.findings == []


def test_a_dra_mig_claim_resolves_to_its_mig_device_not_the_whole_gpu() -> None:
    # The claim spec names the parent's /dev/nvidia0 and the MIG device's capabilities; the
    # compute-instance capability's minor (mig-minors) picks GPU instance 2, not GPU 0.
    result = workloads.run(CheckContext(snapshot_host(snapshot("synthetic-k8s-dra-mig"))), Config())
    name = "k8s.gpu.nvidia.com/claim=c8593c85-440d-4156-b199-aea592ff83df-gpu-0-mig-3g40gb-9-4"
    assert holders(result) == {
        "mig:0:2:0": [("gpu-test/mig-pod", "ctr", name, "gpu-0-mig-3g40gb-9-4")]
    }
    assert result.findings == []  # its process runs in that MIG device


def test_a_pod_using_a_gpu_it_was_not_given_is_named() -> None:
    result = workloads.run(
        CheckContext(snapshot_host(snapshot("synthetic-k8s-gpu-used-without-allocation"))), Config()
    )
    assert codes(result) == [("GPU_USED_WITHOUT_ALLOCATION", "WARNING", "FIX_CONFIG", gpu(5))]
    finding = result.findings[0]
    assert finding.pods == (PodRef("research", "debug-shell-bob", "shell"),)
    assert finding.message.startswith(
        f"GPU 5 ({UUID.format(5, 5)}) runs process 52001 of pod research/debug-shell-bob "
        "(container shell), which the kubelet did not give this device (it is allocated to "
        "inference/vllm-7d9f8-mw5tz (container vllm))"
    )


def test_a_process_in_another_pods_mig_device_is_named_on_that_mig_device() -> None:
    snap = snapshot("synthetic-k8s-mig-used-without-allocation")
    result = workloads.run(CheckContext(snapshot_host(snap)), Config())
    assert codes(result) == [
        ("GPU_USED_WITHOUT_ALLOCATION", "WARNING", "FIX_CONFIG", "mig:0:10:0"),
        ("GPU_USED_WITHOUT_ALLOCATION", "WARNING", "FIX_CONFIG", "mig:0:3:0"),
    ]
    by_resource = {f.resource: f for f in result.findings}
    assert by_resource["mig:0:3:0"].pods == (PodRef("inference", "embed-1g", "server"),)
    assert (
        "(it is allocated to ml-team/eval-2g (container eval))" in by_resource["mig:0:3:0"].message
    )
    assert "(no pod was given it)" in by_resource["mig:0:10:0"].message


def test_an_allocated_idle_gpu_is_named_once_the_window_passes() -> None:
    host = snapshot_host(snapshot("synthetic-k8s-gpus-by-uuid"))
    ctx = CheckContext(host)  # one runner's context: its states
    host.clock = clock = FakeClock()
    cfg = config(workloads={"idle_window_seconds": 1800})
    first = workloads.run(ctx, cfg)
    assert first.findings == []
    assert first.data["devices"][6]["idle_seconds"] == 0
    assert "idle_seconds" not in first.data["devices"][7]  # free, not allocated-idle
    clock.advance(1799)
    assert workloads.run(ctx, cfg).findings == []
    clock.advance(2521)
    result = workloads.run(ctx, cfg)
    assert codes(result) == [("GPU_ALLOCATED_IDLE", "WARNING", "NONE", gpu(6))]
    assert result.findings[0].pods == (PodRef("research", "notebook-alice", "jupyter"),)
    assert result.findings[0].message == (
        f"GPU 6 ({UUID.format(6, 6)}) is allocated to research/notebook-alice (container "
        "jupyter) and has had no process and utilization at or below 1 % for 1.2 h (window "
        "30 min): it is paid for and unused; release it or run work on it"
    )
    assert result.data["devices"][6]["idle_seconds"] == 4320


def test_an_idle_mig_device_is_judged_by_its_processes() -> None:
    host = snapshot_host(snapshot("synthetic-k8s-mig-mixed"))
    ctx = CheckContext(host)  # one runner's context: its states
    host.clock = clock = FakeClock()
    cfg = config(workloads={"idle_window_seconds": 60})
    workloads.run(ctx, cfg)
    clock.advance(61)
    result = workloads.run(ctx, cfg)
    assert codes(result) == [("GPU_ALLOCATED_IDLE", "WARNING", "NONE", "mig:0:3:0")]
    assert result.findings[0].pods == (PodRef("ml-team", "eval-2g", "eval"),)


def test_a_refusing_kubelet_is_allocation_unknown(short_tmp: Path) -> None:
    host = snapshot_host(snapshot("synthetic-k8s-podresources-refused"))
    ctx = CheckContext(host)  # one runner's context: its states
    result = workloads.run(ctx, Config())
    assert codes(result) == [("ALLOCATION_UNKNOWN", "UNKNOWN", "NONE", "node")]
    assert result.status is Status.UNKNOWN
    host.podresources = LivePodResources(HostFS(short_tmp))
    with dead_kubelet(short_tmp):
        live_result = workloads.run(ctx, Config())
    assert live_result.findings == result.findings
    assert result.findings[0].message == (
        "the kubelet's PodResources API at /var/lib/kubelet/pod-resources/kubelet.sock "
        "refused: UNAVAILABLE; which pods hold the GPUs is unknown"
    )


def test_a_hung_kubelet_is_allocation_unknown_within_the_deadline(short_tmp: Path) -> None:
    host, state = live("synthetic-k8s-gpus-by-uuid", short_tmp)
    state.hang = threading.Event()
    with kubelet(short_tmp, state):
        result = workloads.run(CheckContext(host), config(workloads={"timeout_seconds": 0.2}))
    assert codes(result) == [("ALLOCATION_UNKNOWN", "UNKNOWN", "NONE", "node")]
    assert "did not answer within 0.2 s (a hung kubelet)" in result.findings[0].message


def test_an_expected_socket_that_is_absent_is_allocation_unknown(short_tmp: Path) -> None:
    (short_tmp / "var/lib/kubelet/pod-resources").mkdir(parents=True)  # the kubelet's, no socket
    host = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))
    ctx = CheckContext(host)  # one runner's context: its states
    host.podresources = LivePodResources(HostFS(short_tmp))
    host.fs = HostFS(short_tmp)
    result = workloads.run(ctx, Config())
    assert codes(result) == [("ALLOCATION_UNKNOWN", "UNKNOWN", "FIX_CONFIG", "node")]
    forced = workloads.run(ctx, config(workloads={"expect_kubelet": False}))
    assert forced.status is Status.OK and forced.findings == []


@pytest.mark.parametrize(
    ("name", "summary"),
    [
        (
            "synthetic-h100-8gpu-healthy",
            "not a Kubernetes node (no kubelet): GPU holders are not attributed",
        ),
        (
            "synthetic-h100-k8s-containerd-healthy",
            "no kubelet PodResources socket at /var/lib/kubelet/pod-resources/kubelet.sock: "
            "GPU holders are not attributed on this node",
        ),
    ],
)
def test_a_node_without_the_kubelets_socket_is_ok_and_says_so(name: str, summary: str) -> None:
    result = workloads.run(CheckContext(snapshot_host(snapshot(name))), Config())
    assert result.status is Status.OK and result.findings == []
    assert result.summary == summary


def test_every_other_gpu_finding_names_the_pods_on_its_gpu() -> None:
    host = snapshot_host(snapshot("synthetic-k8s-ecc-on-training-gpu"))
    report = run_checks(host, Config(), ["gpus", "workloads"])
    (ecc,) = [f for _, f in report.findings() if f.code == "ECC_UNCORRECTABLE"]
    assert ecc.resource == gpu(2)
    assert ecc.pods == (TRAINER,)
    assert ecc.message.endswith("; affects pod ml-team/llama-pretrain-0 (container trainer)")
    # Without the workloads check, nothing is attributed.
    alone = run_checks(
        snapshot_host(snapshot("synthetic-k8s-ecc-on-training-gpu")), Config(), ["gpus"]
    )
    (plain,) = [f for _, f in alone.findings() if f.code == "ECC_UNCORRECTABLE"]
    assert plain.pods == () and "affects" not in plain.message
