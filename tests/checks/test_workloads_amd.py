"""Check `workloads` on an AMD node: the AMD GPU device plugin's `amd.com/gpu` holders (device
IDs are PCI addresses) and the processes holding each GPU's render node, judged with the
NVIDIA codes (snapshot `synthetic-amd-k8s-workloads`)."""

from __future__ import annotations

from typing import Any

from conftest import snapshot
from gpuprobe.checks import workloads
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.rules.sections import WorkloadsConfig
from gpuprobe.checks.rules.vendors import node_uses
from gpuprobe.config import Config
from gpuprobe.gpu.backend import VendorUses
from gpuprobe.gpu.nvidia.backend import NvidiaBackend
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import run_checks
from gpuprobe.report import PodRef
from gpuprobe.workloads.attribution import attribute
from helpers import FakeClock, codes, config

NAME = "synthetic-amd-k8s-workloads"
PCI = ["0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0"]
TRAINER = PodRef("ml-team", "llama-rocm-train-0", "trainer")
NOTEBOOK = PodRef("research", "notebook-dana", "jupyter")
DEBUG = PodRef("research", "debug-shell-eve", "shell")


def unique_id(i: int) -> str:
    return f"{0x7C3A51D2E0B4F600 + i * 0x1111:016x}"


def gpu(i: int) -> str:
    return f"gpu:{i}:{unique_id(i)}"


def run() -> Any:
    return workloads.run(CheckContext(snapshot_host(snapshot(NAME))), Config())


def test_amd_gpus_are_held_by_pci_address_and_used_through_their_render_nodes() -> None:
    result = run()
    devices = result.data["devices"]
    assert [d["resource"] for d in devices] == [gpu(i) for i in range(8)]
    assert [d["uuid"] for d in devices] == [unique_id(i) for i in range(8)]
    held = {
        d["resource"]: [(h["pod"], h["resource"], h["device_id"], h["via"]) for h in d["holders"]]
        for d in devices
        if d["holders"]
    }
    assert held == {
        gpu(0): [("llama-rocm-train-0", "amd.com/gpu", PCI[0], "device-plugin")],
        gpu(1): [("llama-rocm-train-0", "amd.com/gpu", PCI[1], "device-plugin")],
        gpu(2): [("notebook-dana", "amd.com/gpu", PCI[2], "device-plugin")],
    }
    pids = {d["resource"]: [p["pid"] for p in d["processes"]] for d in devices}
    assert pids == {gpu(0): [61001], gpu(1): [61001], gpu(3): [63001]} | {
        gpu(i): [] for i in (2, 4, 5, 6, 7)
    }
    assert devices[0]["processes"][0] | {"pod_uid": None, "container_id": None} == {
        "pid": 61001,
        "namespace": "ml-team",
        "pod": "llama-rocm-train-0",
        "container": "trainer",
        "pod_uid": None,
        "container_id": None,
    }
    assert [d["utilization_gpu_percent"] for d in devices] == [100, 100, 0, 37, 0, 0, 0, 0]
    assert result.data["unresolved"] == []
    assert result.summary == "3 of 8 GPUs allocated, to 2 pods; 5 unallocated"


def test_a_process_holding_only_the_kfd_is_counted_on_no_gpu() -> None:
    result = run()
    assert result.data["kfd_only_processes"] == [{"pid": 7001}]
    assert all(7001 not in [p["pid"] for p in d["processes"]] for d in result.data["devices"])


def test_a_pod_on_an_amd_gpu_it_was_not_given_is_named() -> None:
    result = run()
    assert codes(result) == [("GPU_USED_WITHOUT_ALLOCATION", "WARNING", "FIX_CONFIG", gpu(3))]
    finding = result.findings[0]
    assert finding.pods == (DEBUG,)
    assert finding.message == (
        f"GPU 3 ({unique_id(3)}) runs process 63001 of pod research/debug-shell-eve (container "
        "shell), which the kubelet did not give this device (no pod was given it): a container "
        "sees GPUs it was not given (a privileged pod, the host's /dev/dri mounted into it) and "
        "takes them from the scheduler"
    )


def test_an_allocated_idle_amd_gpu_is_named_once_the_window_passes() -> None:
    host = snapshot_host(snapshot(NAME))
    ctx = CheckContext(host)  # one runner's context: its states
    host.clock = clock = FakeClock()
    cfg = config(workloads={"idle_window_seconds": 60})
    assert [f.code for f in workloads.run(ctx, cfg).findings] == ["GPU_USED_WITHOUT_ALLOCATION"]
    clock.advance(61)
    result = workloads.run(ctx, cfg)
    assert codes(result) == [
        ("GPU_ALLOCATED_IDLE", "WARNING", "NONE", gpu(2)),
        ("GPU_USED_WITHOUT_ALLOCATION", "WARNING", "FIX_CONFIG", gpu(3)),
    ]
    (idle,) = [f for f in result.findings if f.code == "GPU_ALLOCATED_IDLE"]
    assert idle.pods == (NOTEBOOK,)
    assert result.data["devices"][2]["idle_seconds"] == 61


def test_the_usage_digest_counts_amd_gpus() -> None:
    result = run()
    assert result.data["usage"]["gpus"] == {
        "allocated": 3.0,
        "busy": 2.0,
        "allocated_idle": 1.0,
        "unallocated": 5.0,
    }


def test_the_accounting_counts_amd_gpus_by_unique_id_and_busy_percent() -> None:
    host = snapshot_host(snapshot(NAME))
    ctx = CheckContext(host)  # one runner's context: its states
    host.clock = clock = FakeClock()
    assert [
        g["allocated_seconds"] for g in workloads.run(ctx, Config()).data["accounting"]["gpus"]
    ] == [0.0] * 8
    clock.advance(100)
    totals = {
        g["gpu"]: (
            g["uuid"],
            g["allocated_seconds"],
            g["busy_seconds"],
            g["idle_allocated_seconds"],
            g["unallocated_seconds"],
        )
        for g in workloads.run(ctx, Config()).data["accounting"]["gpus"]
    }
    # GPUs 0 and 1 held by the trainer at 100 % busy, GPU 2 by the notebook at 0 %, the rest
    # held by no pod (GPU 3 busy at 37 % with a pod it was not given: unallocated time).
    assert totals == {
        0: (unique_id(0), 100.0, 100.0, {"ml-team": 0.0}, 0.0),
        1: (unique_id(1), 100.0, 100.0, {"ml-team": 0.0}, 0.0),
        2: (unique_id(2), 100.0, 0.0, {"research": 100.0}, 0.0),
    } | {i: (unique_id(i), 0.0, 0.0, {}, 100.0) for i in range(3, 8)}


def test_an_amd_gpu_finding_names_the_pods_on_it() -> None:
    report = run_checks(snapshot_host(snapshot(NAME)), Config(), ["workloads"])
    (finding,) = [f for _, f in report.findings()]
    assert finding.pods == (DEBUG,)


def test_without_amd_gpus_the_data_has_no_kfd_processes() -> None:
    result = workloads.run(
        CheckContext(snapshot_host(snapshot("synthetic-k8s-gpus-by-uuid"))), Config()
    )
    assert "kfd_only_processes" not in result.data


def test_an_nvidia_only_attribution_leaves_amds_gpus_and_processes_unread() -> None:
    """The pods check holds images' CUDA against NVIDIA's GPUs only: it asks without AMD's,
    and AMD's sysfs and descriptor reads are spared (its grants name no device then)."""
    host = snapshot_host(snapshot(NAME))
    settings = WorkloadsConfig()
    answer = host.podresources.ask(settings.socket, settings.timeout_seconds)
    nvidia_only = attribute(host, answer, [VendorUses(NvidiaBackend(host).uses())])
    assert (nvidia_only.devices, nvidia_only.kfd_only) == ([], None)
    assert [g.device_id for g in nvidia_only.unresolved] == [PCI[0], PCI[1], PCI[2]]
    assert len(attribute(host, answer, node_uses(CheckContext(host))).devices) == 8
