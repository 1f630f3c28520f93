"""Check `pods` on failures of a GPU container's start and of its GPU (issue 40 items 11-13).

- The NVIDIA container toolkit's hook failing at initialization, in any container on the node
  whatever it asked for: the GPU Operator's validator and a training pod on a node whose driver
  is not loaded (`tests/fixtures/pods/gpu-operator-driver-not-loaded.json`; the status message
  as NVIDIA/gpu-operator#1518 published it: "nvidia-container-cli.real: initialization error:
  nvml error: driver not loaded: unknown" in the toolkit-validation init container's StartError),
  and the toolkit's own library missing (NVIDIA/gpu-operator#1364: "load library failed:
  libnvidia-container-go.so.1: cannot open shared object file: no such file or directory",
  the kubelet's event "Error: <the same error>", the status carrying the error alone).
- CUDA's "no kernel image is available for execution on the device" on an RTX 3090 (sm_86)
  after PyTorch's warning that its build supports sm_37 sm_50 sm_60 sm_70 (Turoad/CLRNet#83,
  xtreme1-io/xtreme1#73: the lines verbatim), held against the GPU's compute capability.
- CUDA error 46 "CUDA-capable device(s) is/are busy or unavailable" (ultralytics/ultralytics
  #19744) on a GPU in compute mode ExclusiveProcess.
- HIP's "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"
  (easydiffusion/easydiffusion#1400, printed in quotes as the runtime aborts) in a pod asking for
  amd.com/gpu.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from conftest import ROOT, snapshot
from gpuprobe.checks import pods
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.host.podstatus import PodStatusAnswer, ReplayedPodStatuses, pod_from_api
from gpuprobe.report import CheckResult, PodRef
from gpuprobe.report import gpu_resource as _gpu

FIXTURES = ROOT / "tests/fixtures/pods"
GPU2 = _gpu(2, "GPU-5f1c0002-8e2b-4c1d-9a7e-000000000002")
VALIDATOR = PodRef("gpu-operator", "nvidia-operator-validator-m8tcr", "toolkit-validation")
TRAINER = PodRef("ml-team", "llama-finetune-5", "trainer")
# NVIDIA/gpu-operator#1364, the kubelet's event without its "Error: ".
GO_LIBRARY = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    "runc create failed: unable to start container process: error during container init: error "
    "running hook #0: error running hook: exit status 1, stdout: , stderr: "
    "nvidia-container-cli.real: initialization error: load library failed: "
    "libnvidia-container-go.so.1: cannot open shared object file: no such file or directory: "
    "unknown"
)


def fixture(name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads((FIXTURES / name).read_text())["items"]
    return items


def check(snapshot_dir: str, items: list[dict[str, Any]]) -> CheckResult:
    host = snapshot_host(snapshot_dir)
    host.pod_statuses = ReplayedPodStatuses(PodStatusAnswer(tuple(map(pod_from_api, items))))
    return pods.run(CheckContext(host), Config())


def failures(result: CheckResult) -> list[tuple[str, str, str, str | None]]:
    return [
        (f["pod"], f["container"], f["cause"], f.get("hook_error")) for f in result.data["failures"]
    ]


def node_findings(result: CheckResult) -> list[tuple[str, str, str, str]]:
    return [
        (f.code, f.severity.value, f.action.value, f.message)
        for f in result.findings
        if f.resource == "node" and f.severity.value == "CRITICAL"
    ]


def test_the_toolkit_hook_failing_stops_every_gpu_container_whatever_it_asked_for() -> None:
    """The validator asks for no GPU (its runtime class gives it them): its start failing in
    the hook was no finding at all, and no finding said the node cannot start GPU containers."""
    result = check(snapshot("synthetic-driver-not-loaded"), fixture(
        "gpu-operator-driver-not-loaded.json"
    ))  # fmt: skip
    assert failures(result) == [
        (VALIDATOR.pod, VALIDATOR.container, "container-toolkit-hook-failed",
         "nvml error: driver not loaded"),
        (TRAINER.pod, TRAINER.container, "container-toolkit-hook-failed",
         "nvml error: driver not loaded"),
    ]  # fmt: skip
    assert node_findings(result) == [
        (
            "POD_GPU_FAILURE",
            "CRITICAL",
            "FIX_CONFIG",
            "no GPU container can start on this node: the NVIDIA container toolkit's hook fails "
            'before the container starts ("nvml error: driver not loaded") for '
            "gpu-operator/nvidia-operator-validator-m8tcr (toolkit-validation), "
            "ml-team/llama-finetune-5 (trainer). Fix: load the NVIDIA driver (the driver check "
            "says why it is not loaded; with the GPU Operator, look at its driver pod on this "
            "node), then restart the pods",
        )
    ]
    (node,) = [f for f in result.findings if f.severity.value == "CRITICAL"]
    assert node.pods == (VALIDATOR, TRAINER)
    pod = next(f for f in result.findings if f.pods == (VALIDATOR,))
    assert (pod.code, pod.severity.value, pod.resource) == ("POD_GPU_FAILURE", "WARNING", "node")
    assert pod.message.startswith(
        "pod gpu-operator/nvidia-operator-validator-m8tcr failed: the NVIDIA container "
        "toolkit's hook failed before the container started; container toolkit-validation's "
        'lastState.terminated (StartError) says "'
    )


def test_the_toolkits_own_library_missing_names_its_fix() -> None:
    items = fixture("gpu-operator-driver-not-loaded.json")[:1]
    status = items[0]["status"]["initContainerStatuses"][1]
    status["lastState"]["terminated"]["message"] = GO_LIBRARY
    result = check(snapshot("synthetic-h100-8gpu-healthy"), items)
    assert failures(result) == [
        (VALIDATOR.pod, VALIDATOR.container, "container-toolkit-hook-failed",
         "load library failed: libnvidia-container-go.so.1: cannot open shared object file: "
         "no such file or directory"),
    ]  # fmt: skip
    ((_, _, _, message),) = node_findings(result)
    assert message.endswith(
        "Fix: reinstall the NVIDIA container toolkit: its own library is missing where its "
        "hook looks (with the GPU Operator, look at its toolkit pod on this node)"
    )


def test_a_hooks_cuda_error_counts_in_a_pod_that_asked_for_no_gpu() -> None:
    """A signature that counts only in a GPU pod counts when the hook says it: the hook runs
    only for containers the runtime gives GPUs."""
    items = fixture("gpu-operator-driver-not-loaded.json")[:1]
    last = items[0]["status"]["initContainerStatuses"][1]["lastState"]["terminated"]
    last["message"] = last["message"].replace(
        "nvml error: driver not loaded", "cuda error: no cuda-capable device is detected"
    )
    result = check(snapshot("synthetic-h100-8gpu-healthy"), items)
    assert failures(result) == [
        (VALIDATOR.pod, VALIDATOR.container, "no-cuda-device",
         "cuda error: no cuda-capable device is detected"),
    ]  # fmt: skip
    assert [f[1] for f in node_findings(result)] == ["CRITICAL"]


def test_a_start_that_succeeded_since_indicts_the_node_no_longer() -> None:
    """The validator's init container completed since its StartError (the driver loaded), the
    trainer runs: their pods keep their failure, the node its CRITICAL no more."""
    items = fixture("gpu-operator-driver-not-loaded.json")
    toolkit = items[0]["status"]["initContainerStatuses"][1]
    toolkit["state"] = {"terminated": {
        "containerID": toolkit["containerID"], "exitCode": 0, "reason": "Completed",
        "finishedAt": "2026-11-29T20:47:02Z", "startedAt": "2026-11-29T20:46:40Z",
    }}  # fmt: skip
    items[1]["status"]["containerStatuses"][0]["state"] = {
        "running": {"startedAt": "2026-11-29T20:47:30Z"}
    }
    result = check(snapshot("synthetic-h100-8gpu-healthy"), items)
    assert [f[:3] for f in failures(result)] == [
        (VALIDATOR.pod, VALIDATOR.container, "container-toolkit-hook-failed"),
        (TRAINER.pod, TRAINER.container, "container-toolkit-hook-failed"),
    ]
    assert node_findings(result) == []


def test_no_kernel_image_is_held_against_the_gpus_compute_capability() -> None:
    """The image's PyTorch was built for sm_37-sm_70; the RTX 3090 the pod holds is sm_86."""
    pod = copy.deepcopy(fixture("gpu-node-17.json")[0])
    pod["metadata"].update(namespace="art", name="sd-webui-0")
    pod["spec"]["containers"][0]["name"] = "webui"
    status = pod["status"]["containerStatuses"][0]
    status["name"] = "webui"
    status["lastState"]["terminated"]["message"] = (
        "/home2/valentina.miller/.local/lib/python3.8/site-packages/torch/cuda/__init__.py:104: "
        "UserWarning: \nNVIDIA GeForce RTX 3090 with CUDA capability sm_86 is not compatible "
        "with the current PyTorch installation.\nThe current PyTorch install supports CUDA "
        "capabilities sm_37 sm_50 sm_60 sm_70.\nIf you want to use the NVIDIA GeForce RTX 3090 "
        "GPU with PyTorch, please check the instructions at "
        "https://pytorch.org/get-started/locally/\n\nRuntimeError: CUDA error: no kernel image "
        "is available for execution on the device\n"
    )
    result = check(snapshot("synthetic-pods-cuda12.4-geforce-535"), [pod])
    (failure,) = [f for f in result.data["failures"] if f["cause"] == "cuda-no-kernel-image"]
    assert (failure["compute_capabilities"], failure["image_built_for"]) == (
        ["8.6"],
        ["sm_37", "sm_50", "sm_60", "sm_70"],
    )
    # (The snapshot's own log of the pod holds its earlier failure, error 804: another cause.)
    (finding,) = [f for f in result.findings if "no kernel image" in f.message]
    assert finding.pods == (PodRef("art", "sd-webui-0", "webui"),)
    assert finding.resource == _gpu(0, "GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000")
    assert (
        'is available for execution on the device". Its GPU 0 (NVIDIA GeForce RTX 3090) compute '
        "capability 8.6 (sm_86); the image's PyTorch is built for sm_37 sm_50 sm_60 sm_70, not "
        "sm_86. Fix: run an image built for the GPU's compute capability"
    ) in finding.message


def test_busy_or_unavailable_names_the_gpus_compute_mode(tmp_path: Path) -> None:
    """Error 46 in a pod given GPU 2, which is in compute mode ExclusiveProcess (the sharing
    check's COMPUTE_MODE_MISMATCH on a time-sliced node): the pods check says so too."""
    node = tmp_path / "snap"
    shutil.copytree(snapshot("synthetic-time-slicing-exclusive-gpu"), node, symlinks=True)
    device = {"resourceName": "nvidia.com/gpu", "deviceIds": [GPU2.split(":", 2)[2]]}
    holder = {"name": "train", "devices": [device]}
    listed = {"name": "yolo-train-0", "namespace": "vision", "containers": [holder]}
    (node / "podresources.json").write_text(
        json.dumps({"list": {"podResources": [listed]}, "allocatable": {"devices": []}})
    )
    pod = copy.deepcopy(fixture("gpu-node-17.json")[0])
    pod["metadata"].update(namespace="vision", name="yolo-train-0")
    pod["spec"]["containers"][0]["name"] = "train"
    status = pod["status"]["containerStatuses"][0]
    status["name"] = "train"
    status["lastState"]["terminated"]["message"] = (
        "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n"
    )
    result = check(str(node), [pod])
    (failure,) = result.data["failures"]
    assert (failure["cause"], failure["compute_modes"]) == (
        "cuda-device-busy",
        {"2": "ExclusiveProcess"},
    )
    (finding,) = [f for f in result.findings if f.code == "POD_GPU_FAILURE"]
    assert finding.resource == GPU2
    assert (
        'busy or unavailable". Its GPU 2 in compute mode ExclusiveProcess: one process at a '
        "time. Fix: a GPU in an exclusive compute mode"
    ) in finding.message


def test_hips_no_binary_for_the_gpu_in_a_pod_asking_for_amd_gpus() -> None:
    pod = copy.deepcopy(fixture("gpu-node-17.json")[0])
    pod["metadata"].update(namespace="ml-team", name="sd-rocm-0")
    container = pod["spec"]["containers"][0]
    container["resources"] = {"limits": {"amd.com/gpu": "1"}, "requests": {"amd.com/gpu": "1"}}
    last = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    last["message"] = (
        '"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"\n'
    )
    last["reason"], last["exitCode"] = "Error", 134
    result = check(snapshot("synthetic-amd-mi300x-8gpu-healthy"), [pod])
    assert [(f["pod"], f["cause"]) for f in result.data["failures"]] == [
        ("sd-rocm-0", "hip-no-binary-for-gpu")
    ]
    (finding,) = result.findings
    assert (finding.code, finding.severity.value, finding.action.value) == (
        "POD_GPU_FAILURE",
        "WARNING",
        "FIX_CONFIG",
    )
    assert "no code object for this AMD GPU's architecture" in finding.message
