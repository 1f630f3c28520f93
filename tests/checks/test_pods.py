"""Check `pods` on snapshots: images' CUDA against the driver (containerd and CRI-O specs),
and the GPU failure signatures in the kubelet's pod logs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import snapshot
from gpuprobe.checks import pods
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.nvidia.cuda_images import NodeGpu, container_gpus
from gpuprobe.config import Config
from gpuprobe.containers.oci import ContainerSpec
from gpuprobe.host import snapshot_host
from gpuprobe.report import PodRef, Status
from gpuprobe.report import gpu_resource as _gpu
from helpers import codes, run_check


def gpu(i: int) -> str:
    """The synthetic snapshots' GPU `i` as a finding resource."""
    return _gpu(i, f"GPU-5f1c{i:04x}-8e2b-4c1d-9a7e-{i:012x}")


def verdicts(result: object) -> dict[str, tuple[str, str | None]]:
    data = result.data  # type: ignore[attr-defined]
    return {c["pod"]: (c["verdict"], c["cuda_required"]) for c in data["containers"]}


def causes(result: object) -> dict[str, str]:
    data = result.data  # type: ignore[attr-defined]
    return {f["pod"]: f["cause"] for f in data["failures"]}


def test_a_cuda_12_8_image_on_a_550_geforce_node_needs_a_newer_driver() -> None:
    result = run_check("pods", "synthetic-pods-cuda12.8-geforce-550")
    assert codes(result) == [
        ("IMAGE_CUDA_TOO_NEW", "CRITICAL", "FIX_CONFIG", gpu(0)),
        ("POD_GPU_FAILURE", "WARNING", "FIX_CONFIG", gpu(0)),
    ]
    too_new = result.findings[0]
    assert too_new.pods == (PodRef("ml-team", "llama-finetune-0", "trainer"),)
    assert too_new.message == (
        "pod ml-team/llama-finetune-0, container trainer, image "
        "nvcr.io/nvidia/pytorch:25.01-py3, needs CUDA 12.8; driver 550.54.15 supports CUDA "
        "12.4: its NVIDIA_REQUIRE_CUDA does not hold on this node's driver and GPUs (the NVIDIA "
        'runtime in legacy mode refuses it: "requirement error: unsatisfied condition: '
        "cuda>=12.8, please update your driver to a newer version, or use an earlier cuda "
        'container"). Fix: upgrade the driver to >= 570.26 (CUDA 12.8 GA), or run an image '
        "built for CUDA <= 12.4 (the driver's newest: 12.4 Update 1)."
    )
    (container,) = result.data["containers"]
    assert container["verdict"] == "too-new"
    assert container["requirements"] == ["cuda>=12.8 (+60 alternatives)"]
    assert container["runtime"] == "containerd" and container["gpus"] == [gpu(0)]
    # The crash is in the previous instance's log (0.log); the live one (1.log) is cut short.
    (failure,) = result.data["failures"]
    assert failure["cause"] == "cuda-driver-too-old" and failure["detail"] == "12040"
    assert failure["file"].endswith("/trainer/0.log")
    assert result.summary == (
        "1 GPU container(s); 1 need a newer driver; 1 pod(s) failed for GPU reasons"
    )


def test_a_cuda_12_4_image_admitted_on_a_geforce_535_node_cannot_run() -> None:
    # nvidia/cuda 12.4.1 lists brand=geforce,driver>=535,driver<536: libnvidia-container
    # admits the container on a GeForce GPU of that branch, but forward compatibility runs on
    # data-center GPUs only, so CUDA fails at start (error 804), as the pod's log shows.
    result = run_check("pods", "synthetic-pods-cuda12.4-geforce-535")
    assert codes(result) == [
        ("IMAGE_CUDA_TOO_NEW", "CRITICAL", "FIX_CONFIG", gpu(0)),
        ("POD_GPU_FAILURE", "WARNING", "FIX_CONFIG", gpu(0)),
    ]
    assert result.findings[0].message == (
        "pod art/sd-webui-0, container webui, image registry.example.com/art/sd-webui:1.9-cu124, "
        "needs CUDA 12.4; driver 535.183.01 supports CUDA 12.2: the NVIDIA runtime admits it "
        "(its NVIDIA_REQUIRE_CUDA holds through brand=geforce,driver>=535,driver<536, a "
        "forward-compatibility clause), but forward compatibility runs on data-center GPUs "
        "only and GPU 0 (NVIDIA GeForce RTX 3090) is a GeForce: CUDA will fail at start with "
        'error 804 ("forward compatibility was attempted on non supported HW"). Fix: upgrade '
        "the driver to >= 550.54.14 (CUDA 12.4 GA), or run an image built for CUDA <= 12.2 "
        "(the driver's newest: 12.2 Update 2)."
    )
    assert verdicts(result) == {"sd-webui-0": ("forward-compatibility-unsupported", "12.4")}
    assert causes(result) == {"sd-webui-0": "forward-compatibility-unsupported"}
    assert result.summary == (
        "1 GPU container(s); 1 need a newer driver; 1 pod(s) failed for GPU reasons"
    )


def test_the_same_image_on_h100s_runs_by_forward_compatibility() -> None:
    result = run_check("pods", "synthetic-pods-cuda12.8-h100-forward-compat")
    assert result.findings == [] and result.status is Status.OK
    assert verdicts(result) == {"llama-finetune-0": ("forward-compatibility", "12.8")}
    assert result.data["containers"][0]["gpus"] == [gpu(0), gpu(1)]


def test_crio_specs_with_brand_and_driver_clauses() -> None:
    result = run_check("pods", "synthetic-pods-crio-require-clauses")
    assert verdicts(result) == {
        "detector-0": ("too-new", "12.6"),  # its clauses name the 535 branch only
        "detector-1": ("forward-compatibility", "12.6"),  # names 550
        "legacy-bench-0": ("ok", "12.2.2"),  # CUDA_VERSION only: cuda>=12.2
        "jax-nightly-0": ("minor-version-compatibility", "12.8"),  # NVIDIA_DISABLE_REQUIRE
    }
    assert codes(result) == [("IMAGE_CUDA_TOO_NEW", "CRITICAL", "FIX_CONFIG", gpu(0))]
    assert result.findings[0].pods == (PodRef("vision", "detector-0", "infer"),)
    assert "upgrade the driver to >= 560.28.03 (CUDA 12.6 GA)" in result.findings[0].message
    assert {c["runtime"] for c in result.data["containers"]} == {"cri-o"}


def test_each_log_signature_near_misses_and_the_xid_it_died_at() -> None:
    result = run_check("pods", "synthetic-pods-log-signatures")
    assert causes(result) == {
        "vllm-0": "cuda-driver-too-old",  # across a partial (P) line
        "sample-check-0": "cuda-driver-too-old",  # deviceQuery
        "tf-serving-0": "no-cuda-device",  # TensorFlow
        "llama-pretrain-3": "cuda-fault-at-xid",  # PyTorch, XID 48 two seconds before
        "gpu-exporter-x2": "nvml-unknown-error",  # nvidia-smi
        "runner-gpu-7f9c-abcde": "runtime-requirement-unsatisfied",  # docker in the pod
        "runner-gpu-7f9c-fghij": "cdi-device-unresolvable",
    }  # deviceQuery passing and the CPU pod's TensorFlow probe are no failures
    assert codes(result) == sorted(
        [("POD_GPU_FAILURE", "WARNING", "FIX_CONFIG", gpu(i)) for i in (0, 1, 2, 5, 6)]
        + [("POD_GPU_FAILURE", "WARNING", "RESTART_APP", gpu(i)) for i in (3, 4)]
        + [("CDI_SPEC_STALE", "CRITICAL", "FIX_CONFIG", "node")]
    )
    xid = next(f for f in result.data["failures"] if f["pod"] == "llama-pretrain-3")
    assert xid["xid"] == 48 and xid["detail"] == "uncorrectable ECC error encountered"
    at_xid = next(f for f in result.findings if f.resource == gpu(3))
    assert at_xid.message.startswith(
        "pod ml-team/llama-pretrain-3 failed: the container's CUDA work failed at the time of "
        'an XID on its GPU (XID 48); container trainer logged "[rank0]: RuntimeError: CUDA '
        'error: uncorrectable ECC error encountered".'
    )
    cdi = next(f for f in result.findings if f.code == "CDI_SPEC_STALE")
    assert cdi.message.startswith(
        "the container runtime cannot resolve CDI device nvidia.com/gpu=all: no CDI spec"
    )
    assert cdi.pods == (PodRef("ci", "runner-gpu-7f9c-fghij", "runner"),)
    # the CPU pod restarted, so its log was read: nine containers
    assert result.data["logs"]["containers_read"] == 9


def test_a_failure_in_a_rotated_log_is_found() -> None:
    result = run_check("pods", "synthetic-pods-rotated-logs")
    (failure,) = result.data["failures"]
    assert failure["cause"] == "nvml-unknown-error"
    assert failure["file"].endswith("/trainer/0.log.20261129-204500")
    assert codes(result) == [("POD_GPU_FAILURE", "WARNING", "RESTART_APP", gpu(0))]


def test_nvml_lost_in_every_gpu_pod_indicts_the_node() -> None:
    result = run_check("pods", "synthetic-pods-nvml-lost-everywhere")
    assert codes(result) == sorted(
        [("POD_GPU_FAILURE", "WARNING", "RESTART_APP", gpu(i)) for i in range(3)]
        + [("POD_GPU_FAILURE", "CRITICAL", "FIX_CONFIG", "node")]
    )
    node = next(f for f in result.findings if f.resource == "node")
    assert node.message.startswith(
        'every GPU pod on the node (3) lost its GPUs ("Failed to initialize NVML: Unknown '
        "Error\"): the node's device cgroup rules were rewritten"
    )
    assert [p.pod for p in node.pods] == ["worker-0", "worker-1", "worker-2"]


def test_nvml_lost_in_one_of_several_pods_does_not(tmp_path: Path) -> None:
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-pods-nvml-lost-everywhere"), copy, symlinks=True)
    logs = sorted((copy / "rootfs/var/log/pods").glob("ml-team_worker-[12]_*/worker/0.log"))
    for log in logs:
        log.write_text("2026-11-29T20:52:00.000000000Z stdout F step 9 loss 2.1\n")
    result = pods.run(CheckContext(snapshot_host(str(copy))), Config())
    assert codes(result) == [("POD_GPU_FAILURE", "WARNING", "RESTART_APP", gpu(0))]


def test_unreadable_and_foreign_specs(tmp_path: Path) -> None:
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-pods-cuda12.8-geforce-550"), copy, symlinks=True)
    tasks = copy / "rootfs/run/containerd/io.containerd.runtime.v2.task/k8s.io"
    (tasks / ("a" * 64)).mkdir()
    (tasks / ("a" * 64) / "config.json").write_text("{not json")
    (tasks / "not-an-id").mkdir()
    foreign = {"process": {"env": ["CUDA_VERSION=12.8.0", "NVIDIA_VISIBLE_DEVICES=all"]}}
    (tasks / ("b" * 64)).mkdir()
    (tasks / ("b" * 64) / "config.json").write_text(json.dumps(foreign))
    result = pods.run(CheckContext(snapshot_host(str(copy))), Config())
    (bad,) = result.data["unreadable_specs"]
    assert bad["path"].endswith("a" * 64 + "/config.json")
    assert bad["problem"].startswith("not JSON")
    # a container no kubelet started (no CRI annotations) is judged too, by its ID
    foreign_entry = next(c for c in result.data["containers"] if c["id"] == "b" * 64)
    assert foreign_entry["pod"] is None and foreign_entry["verdict"] == "too-new"
    assert any(f.message.startswith(f"container {'b' * 12}") for f in result.findings)


def test_a_node_without_containers_says_so() -> None:
    result = run_check("pods", "synthetic-h100-8gpu-healthy")
    assert result.findings == [] and result.status is Status.OK
    assert result.summary == "no running containers found in the container runtimes' state"


def test_which_containers_are_gpu_containers(tmp_path: Path) -> None:
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-pods-cuda12.8-geforce-550"), copy, symlinks=True)
    (copy / "podresources.json").unlink()  # no kubelet answer: the specs alone decide
    tasks = copy / "rootfs/run/containerd/io.containerd.runtime.v2.task/k8s.io"
    cuda = ["CUDA_VERSION=12.8.0", "NV_CUDA_COMPAT_PACKAGE=cuda-compat-12-8"]

    def spec(cid: str, env: list[str], devices: list[int]) -> None:
        (tasks / cid).mkdir()
        doc = {
            "process": {"env": env},
            "annotations": {
                "io.kubernetes.cri.container-type": "container",
                "io.kubernetes.cri.sandbox-namespace": "lab",
                "io.kubernetes.cri.sandbox-name": f"pod-{cid[0]}",
                "io.kubernetes.cri.container-name": "main",
            },
            "linux": {"devices": [{"path": f"/dev/nvidia{i}", "type": "c"} for i in devices]},
        }
        (tasks / cid / "config.json").write_text(json.dumps(doc))

    spec("c" * 64, [*cuda, "NVIDIA_VISIBLE_DEVICES=void"], [])  # no GPU: not judged
    spec("d" * 64, cuda, [2])  # CDI put /dev/nvidia2 in the spec
    spec("e" * 64, [*cuda, "NVIDIA_VISIBLE_DEVICES=3,GPU-5f1c0004-8e2b-4c1d-9a7e-000000000004"], [])
    result = pods.run(CheckContext(snapshot_host(str(copy))), Config())
    gpus = {c["pod"]: c["gpus"] for c in result.data["containers"]}
    assert gpus == {"llama-finetune-0": [gpu(0)], "pod-d": [gpu(2)], "pod-e": [gpu(3), gpu(4)]}
    # no requirement checked here (legacy CUDA_VERSION only: cuda>=12.8), GeForce: too new
    assert {c["pod"]: c["verdict"] for c in result.data["containers"]}["pod-d"] == "too-new"


def test_the_logs_read_a_round_are_bounded_gpu_pods_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pods, "MAX_LOGS", 8)
    result = run_check("pods", "synthetic-pods-log-signatures")
    assert result.data["logs"]["containers_read"] == 8
    assert result.data["logs"]["containers_not_read"] == 1  # the CPU pod, restarted once
    assert len(result.data["failures"]) == 7


def test_a_requirement_that_asks_for_no_cuda_is_a_refusal_not_a_cuda_gap(tmp_path: Path) -> None:
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-pods-cuda12.8-h100-forward-compat"), copy, symlinks=True)
    (spec,) = [
        p
        for p in copy.glob("rootfs/run/containerd/*/k8s.io/*/config.json")
        if json.loads(p.read_text())["annotations"]["io.kubernetes.cri.container-type"]
        == "container"
    ]
    doc = json.loads(spec.read_text())
    doc["process"]["env"].append("NVIDIA_REQUIRE_ARCH=arch>=10.0")  # Blackwell only, on H100s
    spec.write_text(json.dumps(doc))
    result = pods.run(CheckContext(snapshot_host(str(copy))), Config())
    assert {c["pod"]: c["verdict"] for c in result.data["containers"]} == {
        "llama-finetune-0": "refused"
    }
    assert codes(result) == [("POD_GPU_FAILURE", "WARNING", "FIX_CONFIG", gpu(0))]
    assert result.findings[0].message.startswith(
        "pod ml-team/llama-finetune-0, container trainer: the NVIDIA runtime in legacy mode "
        'refuses it on this node ("requirement error: unsatisfied condition: arch>=10.0").'
    )


def test_error_802_in_gpu_pods_is_a_pod_failure_and_the_gpus_check_owns_the_fabric() -> None:
    result = run_check("pods", "synthetic-pods-fabric-not-ready")
    assert causes(result) == {
        "llama-pretrain-0": "cuda-system-not-ready",
        "llama-pretrain-1": "cuda-system-not-ready",
    }
    # No FABRIC_NOT_READY from a log line (it would stay after the fabric came up).
    assert codes(result) == [
        ("POD_GPU_FAILURE", "WARNING", "FIX_CONFIG", gpu(0)),
        ("POD_GPU_FAILURE", "WARNING", "FIX_CONFIG", gpu(2)),
    ]
    # the last failure in each log is NCCL's
    assert {f["line"] for f in result.data["failures"]} == {
        "[rank0]: Cuda failure 802 'system not yet initialized'"
    }
    # the gpus check says the same from NVML and the process list
    assert ("FABRIC_NOT_READY", "CRITICAL", "FIX_CONFIG", "node") in codes(
        run_check("gpus", "synthetic-pods-fabric-not-ready")
    )


def test_a_crash_is_tied_to_its_xid_when_the_boot_is_in_the_rotated_log(tmp_path: Path) -> None:
    # The boot went to kern.log.1 at rotation; the XID 48 is in the live kern.log. Read as one
    # stream newest file first, kern.log.1's boot marker dropped the current boot's XIDs.
    root = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-pods-log-signatures"), root, symlinks=True)
    log = root / "rootfs/var/log/kern.log"
    lines = log.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if " NVRM: Xid " in line and i > 2)
    (root / "rootfs/var/log/kern.log.1").write_text("".join(lines[:cut]))
    log.write_text("".join(lines[cut:]))
    result = pods.run(CheckContext(snapshot_host(root)), Config())
    xid = next(f for f in result.data["failures"] if f["pod"] == "llama-pretrain-3")
    assert xid["xid"] == 48


def test_nvidia_visible_devices_takes_indexes_uuids_and_migs_and_passes_over_the_rest() -> None:
    uuid = "GPU-5f1c{0:04x}-8e2b-4c1d-9a7e-{0:012x}".format
    mig = "MIG-0c6f8a1e-7b2d-5e3f-9a4c-1d2e3f4a5b6c"
    gpus = [NodeGpu(i, uuid(i), i, "nvidia", "9.0", None) for i in range(4)]
    gpus[3].migs[mig] = 3

    def given(visible: str) -> list[int] | None:
        spec = ContainerSpec("c1", "containerd", "/run", env={"NVIDIA_VISIBLE_DEVICES": visible})
        own = container_gpus(spec, gpus, {})
        return None if own is None else [g.index for g in own]

    # Any pod may write anything there: what is no index or UUID is passed over, no ValueError.
    assert given("1a:0") == []
    assert given(" 0 , 1a:0, GPU-unknown, 2:x") == [0]
    assert given(f"{uuid(1)}, 2:1") == [1, 2]
    assert given(mig) == [3]
    assert given("all") == [0, 1, 2, 3]
    assert given("void") is None


def test_a_deeply_nested_spec_is_listed_unreadable_and_the_rest_judged(tmp_path: Path) -> None:
    # Well under the 4 MiB bound, deep enough to exhaust Python's JSON decoder: one such
    # spec once made the whole check UNKNOWN (RecursionError) for every container.
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-pods-cuda12.8-geforce-550"), copy, symlinks=True)
    tasks = copy / "rootfs/run/containerd/io.containerd.runtime.v2.task/k8s.io"
    (tasks / ("c" * 64)).mkdir()
    deep = '{"annotations": ' + "[" * 200_000 + "]" * 200_000 + "}"
    (tasks / ("c" * 64) / "config.json").write_text(deep)
    result = pods.run(CheckContext(snapshot_host(str(copy))), Config())
    assert result.data["unreadable_specs"] == [
        {
            "path": "/run/containerd/io.containerd.runtime.v2.task/k8s.io/"
            + "c" * 64
            + "/config.json",
            "problem": "JSON nested too deeply",
        }
    ]
    assert verdicts(result) == {"llama-finetune-0": ("too-new", "12.8")}
    assert [c for c, *_ in codes(result)] == ["IMAGE_CUDA_TOO_NEW", "POD_GPU_FAILURE"]
