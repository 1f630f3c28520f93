"""Every GPU failure signature matches the real message it is for (as published in bug
reports), and near-misses match nothing."""

from __future__ import annotations

import pytest

from gpuprobe.checks.rules import pod_signatures as sig

# (cause, a real line, where it was published)
REAL = [
    (
        sig.DRIVER_TOO_OLD,
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). "
        "Please update your GPU driver by downloading and installing a new version from the "
        "URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
        "https://pytorch.org to install a PyTorch version that has been compiled with your "
        "version of the CUDA driver.",
        "github.com/lllyasviel/Fooocus/issues/1313",
    ),
    (
        sig.DRIVER_TOO_OLD,
        "-> CUDA driver version is insufficient for CUDA runtime version",
        "CUDA samples deviceQuery (cudaGetDeviceCount returned 35)",
    ),
    (
        sig.NO_CUDA_DEVICE,
        "2018-12-09 23:18:41.996479: E tensorflow/stream_executor/cuda/cuda_driver.cc:300] "
        "failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected",
        "github.com/fo40225/tensorflow-windows-wheel/issues/63",
    ),
    (
        sig.NO_CUDA_DEVICE,
        "RuntimeError: No CUDA GPUs are available",
        "PyTorch torch.cuda._lazy_init",
    ),
    (
        sig.NVML_UNKNOWN_ERROR,
        "Failed to initialize NVML: Unknown Error",
        "github.com/NVIDIA/nvidia-container-toolkit/issues/1227 (nvidia-smi after daemon-reload)",
    ),
    (
        sig.NVML_DRIVER_MISMATCH,
        "Failed to initialize NVML: Driver/library version mismatch",
        "nvidia-smi after a driver upgrade without reboot",
    ),
    (
        sig.RUNTIME_REQUIREMENT,
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please "
        "update your driver to a newer version, or use an earlier cuda container: unknown.",
        "libnvidia-container src/cli/dsl.c (its error text)",
    ),
    (
        sig.RUNTIME_REQUIREMENT,
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda >= 9.0",
        "github.com/NVIDIA/nvidia-docker/issues/543 (libnvidia-container before 1.0)",
    ),
    (
        sig.CDI_UNRESOLVABLE,
        "Error: failed to create containerd task: failed to create shim task: OCI runtime "
        "create failed: could not apply required modification to OCI specification: error "
        "modifying OCI spec: failed to inject CDI devices: unresolvable CDI devices "
        "nvidia.com/gpu=all: unknown",
        "github.com/NVIDIA/nvidia-container-toolkit/issues/1239",
    ),
    (
        sig.DEVICE_PLUGIN_ALLOCATION,
        "Message:         Pod Allocate failed due to requested number of devices unavailable "
        "for nvidia.com/gpu. Requested:1, Available: 0, which is unexpected",
        "github.com/kubernetes/kubernetes/issues/130145",
    ),
    (
        sig.FORWARD_COMPAT_UNSUPPORTED,
        "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you "
        "run some cuda functions before calling NumCudaDevices() that might have already set an "
        "error? Error 804: forward compatibility was attempted on non supported HW (Triggered "
        "internally at ../c10/cuda/CUDAFunctions.cpp:108.)",
        "PyTorch on a GeForce GPU with cuda-compat loaded (cudaErrorCompatNotSupportedOnDevice)",
    ),
    (
        sig.FABRIC_NOT_INITIALIZED,
        "/home/l****t/.local/lib/python3.6/site-packages/torch/cuda/__init__.py:80: UserWarning: "
        "CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error "
        "802: system not yet initialized (Triggered internally at  "
        "../c10/cuda/CUDAFunctions.cpp:112.)",
        "github.com/microsoft/lisa/issues/2823 (ND96asr_v4, no fabric manager)",
    ),
    (
        sig.FABRIC_NOT_INITIALIZED,
        "[rank3]: Cuda failure 802 'system not yet initialized'",
        "github.com/hiyouga/LlamaFactory/issues/8968 (NCCL on 8×B200)",
    ),
    (
        sig.FABRIC_NOT_INITIALIZED,
        "CUDA error at bandwidthTest.cu:256 code=802(cudaErrorSystemNotReady) "
        '"cudaSetDevice(currentDevice)"',
        "github.com/pytorch/pytorch/issues/35710 (CUDA samples' bandwidthTest)",
    ),
    (
        sig.CUDA_FAULT_AT_XID,
        "[rank0]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "PyTorch c10/cuda/CUDAException",
    ),
]
# The NVIDIA container toolkit's hook failing at initialization, as published.
HOOK_LINES = {
    "driver not loaded": (
        "failed to create containerd task: failed to create shim task: OCI runtime create "
        "failed: runc create failed: unable to start container process: error during container "
        "init: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
        "nvidia-container-cli.real: initialization error: nvml error: driver not loaded: unknown"
    ),
    "toolkit library": (
        "Error: failed to create containerd task: failed to create shim task: OCI runtime create "
        "failed: runc create failed: unable to start container process: error during container "
        "init: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
        "nvidia-container-cli.real: initialization error: load library failed: "
        "libnvidia-container-go.so.1: cannot open shared object file: no such file or "
        "directory: unknown"
    ),
    "no library named": (
        "stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: initialization error: "
        "cannot open shared object file: no such file or directory: unknown."
    ),
}
# A GPU container's start and its GPU's architecture and mode (issue 40 items 11-13).
REAL += [
    (
        sig.TOOLKIT_HOOK,
        HOOK_LINES["driver not loaded"],
        "github.com/NVIDIA/gpu-operator/issues/1518 (toolkit-validation's StartError)",
    ),
    (
        sig.TOOLKIT_HOOK,
        HOOK_LINES["toolkit library"],
        "github.com/NVIDIA/gpu-operator/issues/1364 (the kubelet's event)",
    ),
    (
        sig.TOOLKIT_HOOK,
        "nvidia-container-cli.real: initialization error: load library failed: "
        "libnvidia-ml.so.1: cannot open shared object file: no such file or directory: unknown",
        "github.com/NVIDIA/gpu-operator/issues/625",
    ),
    (
        sig.TOOLKIT_HOOK,
        "stderr: nvidia-container-cli.real: initialization error: nvml error: insufficient "
        "permissions: unknown",
        "github.com/NVIDIA/gpu-operator/issues/679",
    ),
    (
        sig.TOOLKIT_HOOK,
        HOOK_LINES["no library named"],
        "github.com/NVIDIA/nvidia-container-toolkit/issues/131",
    ),
    (
        sig.NO_KERNEL_IMAGE,
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "github.com/Turoad/CLRNet/issues/83 (PyTorch, an RTX 3090 that the build lacks)",
    ),
    (
        sig.GPU_BUSY,
        "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
        "github.com/ultralytics/ultralytics/issues/19744 (in Docker)",
    ),
    (
        sig.GPU_BUSY,
        "THCudaCheck FAIL file=/opt/conda/conda-bld/pytorch_1503970438496/work/torch/lib/THC/"
        "generic/THCStorage.cu line=66 error=46 : all CUDA-capable devices are busy or "
        "unavailable",
        "github.com/pytorch/pytorch/issues/3871 (older CUDA's words)",
    ),
    (
        sig.GPU_BUSY,
        "Check failed: error == cudaSuccess (46 vs. 0)  all CUDA-capable devices are busy or "
        "unavailable",
        "github.com/NVIDIA/DIGITS/issues/2005 (Caffe, a GPU in E. Process mode)",
    ),
    (
        sig.HIP_NO_BINARY,
        '"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"',
        "github.com/easydiffusion/easydiffusion/issues/1400",
    ),
    (
        sig.HIP_NO_BINARY,
        "hip_code_object.cpp:92: guarantee(false && \"hipErrorNoBinaryForGpu: Coudn't find "
        'binary for current devices!")',
        "github.com/ROCm/tensorflow-upstream/issues/1106 (older ROCm)",
    ),
]
# ROCm's (AMD GPUs), from HIP's own strings and published reports.
REAL += [
    (
        sig.NO_HIP_DEVICE,
        "RuntimeError: No HIP GPUs are available",
        "PyTorch torch.cuda._lazy_init on a ROCm build",
    ),
    (
        sig.NO_HIP_DEVICE,
        'raises "CUDA error: no ROCm-capable device is detected" at first call',
        "SGLang on a ROCm host (PyTorch prints HIP's words after CUDA error:)",
    ),
    (
        sig.NO_HIP_DEVICE,
        "hipErrorNoDevice: no ROCm-capable device is detected",
        "HIP's hipGetErrorName / hipGetErrorString (hip_error.cpp)",
    ),
    (
        sig.HIP_ARCH_MISMATCH,
        "RuntimeError: HIP error: invalid device function",
        "PyTorch on a GPU whose gfx target the wheel was not built for",
    ),
    (
        sig.HSA_MEMORY_FAULT,
        "Memory access fault by GPU node-2 (Agent handle: 0x5640a8bb1980) on address "
        "0x7feea09c5000. Reason: Page not present or supervisor privilege.",
        "github.com/ROCm/ROCm/issues/2804",
    ),
]


@pytest.mark.parametrize(("cause", "line", "source"), REAL, ids=[r[2][:40] for r in REAL])
def test_each_signature_matches_its_real_message(cause: str, line: str, source: str) -> None:
    found = sig.match(line)
    assert found is not None, source
    assert found.signature.cause == cause


# CUDA errors in words and in lower case, as PyTorch, cudart users and the container toolkit's
# hook print them (these matched nothing while the signatures knew only the enum names).
WORDS = [
    (
        sig.DRIVER_TOO_OLD,
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error "
        "803: system has unsupported display driver / cuda driver combination",
        "github.com/yhlleo/DeepSegmentor/issues/31 (PyTorch, error 803 in words)",
    ),
    (
        sig.DRIVER_TOO_OLD,
        "RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination",
        "PyTorch c10/cuda/CUDAException (cudaGetErrorString's words)",
    ),
    (
        sig.NO_CUDA_DEVICE,
        "Error: failed to create containerd task: failed to create shim task: OCI runtime "
        "create failed: runc create failed: unable to start container process: error during "
        "container init: error running hook #0: error running hook: exit status 1, stdout: , "
        "stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: initialization error: "
        "cuda error: no cuda-capable device is detected: unknown",
        "the NVIDIA hook's lower-cased CUDA error inside a kubelet message",
    ),
    (
        sig.NVML_DRIVER_MISMATCH,
        "stderr: nvidia-container-cli: initialization error: nvml error: driver/library "
        "version mismatch: unknown",
        "the NVIDIA hook after a driver upgrade without a reboot (lower case)",
    ),
    (
        sig.FORWARD_COMPAT_UNSUPPORTED,
        "nvidia-container-cli: initialization error: cuda error: forward compatibility was "
        "attempted on non supported hw",
        "the NVIDIA hook's words for error 804 (lower case)",
    ),
    (
        sig.CUDA_FAULT_AT_XID,
        "gpu-node-3:41822:41901 [1] NCCL WARN Cuda failure 700 'an illegal memory access was "
        "encountered'",
        "NCCL's CUCHECK (WARN \"Cuda failure %d '%s'\", the number before the words)",
    ),
]


@pytest.mark.parametrize(("cause", "line", "source"), WORDS, ids=[w[2][:40] for w in WORDS])
def test_cuda_errors_in_words_and_in_lower_case(cause: str, line: str, source: str) -> None:
    found = sig.match(line)
    assert found is not None, source
    assert found.signature.cause == cause


# Each CUDA error a signature stands for, and how programs print it.
CUDA_CAUSES = {
    35: sig.DRIVER_TOO_OLD,
    803: sig.DRIVER_TOO_OLD,
    46: sig.GPU_BUSY,
    100: sig.NO_CUDA_DEVICE,
    209: sig.NO_KERNEL_IMAGE,
    802: sig.FABRIC_NOT_INITIALIZED,
    804: sig.FORWARD_COMPAT_UNSUPPORTED,
    214: sig.CUDA_FAULT_AT_XID,
    700: sig.CUDA_FAULT_AT_XID,
    702: sig.CUDA_FAULT_AT_XID,
    716: sig.CUDA_FAULT_AT_XID,
    719: sig.CUDA_FAULT_AT_XID,
    999: sig.CUDA_FAULT_AT_XID,
}


@pytest.mark.parametrize("number", sorted(CUDA_CAUSES))
def test_every_cuda_error_matches_by_words_and_names_in_any_case(number: int) -> None:
    error = sig.CUDA_ERRORS[number]
    said = [
        f"RuntimeError: CUDA error: {error.words}",  # PyTorch
        f"Error {number}: {error.words}",  # cudart users, PyTorch's device count
        f"nvidia-container-cli: initialization error: cuda error: {error.words.lower()}",
        f"code={number}({error.runtime_name})",  # CUDA samples' checkCudaErrors
        f"failed call to cuInit: {error.driver_name}" if error.driver_name else None,
    ]
    for line in filter(None, said):
        found = sig.match(line)
        cause = CUDA_CAUSES[number]
        if line.startswith("nvidia-container-cli") and cause == sig.CUDA_FAULT_AT_XID:
            # The hook failing at initialization is the hook's failure, not a workload's
            # fault at an XID (libnvidia-container#103: "initialization error: cuda error:
            # unknown error").
            cause = sig.TOOLKIT_HOOK
        assert found is not None and found.signature.cause == cause, line
    assert set(CUDA_CAUSES) == set(sig.CUDA_ERRORS)


def test_general_words_count_only_as_a_cuda_error() -> None:
    assert sig.match("request failed: unknown error") is None
    assert sig.match("layout: misaligned address in struct") is None
    found = sig.match("RuntimeError: CUDA error: misaligned address")
    assert found is not None and found.detail == "misaligned address"


def test_details_are_taken_from_the_message() -> None:
    assert sig.match(REAL[6][1]).detail == "cuda>=12.8"  # type: ignore[union-attr]
    assert sig.match(REAL[7][1]).detail == "cuda >= 9.0"  # type: ignore[union-attr]
    assert sig.match(REAL[8][1]).detail == "nvidia.com/gpu=all"  # type: ignore[union-attr]
    assert sig.match(REAL[0][1]).detail == "11040"  # type: ignore[union-attr]


NEAR_MISSES = [
    "  CUDA Driver Version / Runtime Version          12.4 / 12.4",
    "deviceQuery, CUDA Driver = CUDART, CUDA Driver Version = 12.4, CUDA Runtime Version = "
    "12.4, NumDevs = 1",
    "Result = PASS",
    "NVML initialized: driver 550.54.15, 8 devices",
    "checking requirement: cuda>=12.4 satisfied",
    "CDI devices resolved: nvidia.com/gpu=0",
    "torch.cuda.is_available(): True, device count 8",
    "Successfully opened dynamic library libcuda.so.1",
    # nvidia-container-cli's own debug log (NVIDIA/nvidia-container-toolkit#154), and PyTorch's
    # warning alone (a GPU its build lacks warns; only the failing call is a failure).
    "I1202 15:15:34.407243 26518 nvc.c:376] initializing library context (version=1.11.0, build=)",
    "The current PyTorch install supports CUDA capabilities sm_37 sm_50 sm_60 sm_70.",
    "hipGetDeviceCount: found 8 devices with code objects for gfx942",
]


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_near_misses_match_nothing(line: str) -> None:
    assert sig.match(line) is None


def test_causes_are_unique_and_each_has_a_fix() -> None:
    causes = [s.cause for s in sig.SIGNATURES]
    assert len(causes) == len(set(causes))
    assert all(s.fix and s.patterns for s in sig.SIGNATURES)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (HOOK_LINES["driver not loaded"], "nvml error: driver not loaded"),
        (
            HOOK_LINES["toolkit library"],
            "load library failed: libnvidia-container-go.so.1: cannot open shared object file: "
            "no such file or directory",
        ),
        (
            HOOK_LINES["no library named"],
            "cannot open shared object file: no such file or directory",
        ),
        (WORDS[3][1], "nvml error: driver/library version mismatch"),
        # The requirement error is the hook's too, but not at initialization.
        (REAL[6][1], None),
    ],
)
def test_the_hooks_error_is_read_whatever_the_lines_cause(line: str, error: str | None) -> None:
    assert sig.hook_failure(line) == error


def test_each_hook_error_has_its_fix() -> None:
    assert sig.hook_fix("nvml error: driver not loaded").startswith("load the NVIDIA driver")
    assert sig.hook_fix("load library failed: libnvidia-container-go.so.1: x").startswith(
        "reinstall the NVIDIA container toolkit"
    )
    assert sig.hook_fix("load library failed: libnvidia-ml.so.1: x").startswith(
        "install the driver's user-space libraries"
    )
    assert sig.hook_fix("nvml error: driver/library version mismatch").startswith("reboot")
    assert (
        sig.hook_fix("nvml error: insufficient permissions") == sig.by_cause(sig.TOOLKIT_HOOK).fix
    )
