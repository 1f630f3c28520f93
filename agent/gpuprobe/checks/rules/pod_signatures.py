"""Known GPU failure signatures in containers' output, as data.

Each signature names a cause, the exact messages it matches (as the CUDA runtime, PyTorch,
TensorFlow, nvidia-smi, the NVIDIA container runtime, the CDI injector and the kubelet print
them; the tests hold each pattern to a real message), the operator's fix, and whether it
only counts for a container that was given GPUs (a CPU pod that probes for CUDA prints "no
CUDA-capable device" and is fine). Order matters: the first signature a line matches is its
cause, so the specific ones come before the general ones.

A CUDA error is matched by its words as well as by its enum names (programs print either),
without regard to case: the NVIDIA container toolkit's hook lower-cases CUDA's and NVML's words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.report import Action


@dataclass(frozen=True)
class Signature:
    """One failure: its cause, the patterns that find it, the fix, who it indicts."""

    cause: str
    title: str
    patterns: tuple[re.Pattern[str], ...]
    fix: str
    action: Action
    needs_gpu: bool = False  # counts only in a container given GPUs


def _p(*patterns: str, flags: int = 0) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, flags) for p in patterns)


@dataclass(frozen=True)
class CudaError:
    """One CUDA error as programs print it: its number, the runtime's and the driver API's
    enum names, and its words (what cudaGetErrorString and cuGetErrorString return)."""

    number: int
    runtime_name: str
    driver_name: str | None
    words: str


# The errors the signatures stand for (CUDA Runtime API, "Data types", enum cudaError; the
# words as cudaGetErrorString gives them and as PyTorch's "Error 803: ..." and TensorFlow's
# "CUDA_ERROR_NO_DEVICE: ..." print them).
CUDA_ERRORS = {
    e.number: e
    for e in (
        CudaError(
            35,
            "cudaErrorInsufficientDriver",
            None,
            "CUDA driver version is insufficient for CUDA runtime version",
        ),
        CudaError(
            46,
            "cudaErrorDevicesUnavailable",
            "CUDA_ERROR_DEVICE_UNAVAILABLE",
            "CUDA-capable device(s) is/are busy or unavailable",
        ),
        CudaError(
            100, "cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"
        ),
        CudaError(
            209,
            "cudaErrorNoKernelImageForDevice",
            "CUDA_ERROR_NO_BINARY_FOR_GPU",
            "no kernel image is available for execution on the device",
        ),
        CudaError(
            214,
            "cudaErrorECCUncorrectable",
            "CUDA_ERROR_ECC_UNCORRECTABLE",
            "uncorrectable ECC error encountered",
        ),
        CudaError(
            700,
            "cudaErrorIllegalAddress",
            "CUDA_ERROR_ILLEGAL_ADDRESS",
            "an illegal memory access was encountered",
        ),
        CudaError(
            702,
            "cudaErrorLaunchTimeout",
            "CUDA_ERROR_LAUNCH_TIMEOUT",
            "the launch timed out and was terminated",
        ),
        CudaError(
            716, "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"
        ),
        CudaError(
            719, "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"
        ),
        CudaError(
            802,
            "cudaErrorSystemNotReady",
            "CUDA_ERROR_SYSTEM_NOT_READY",
            "system not yet initialized",
        ),
        CudaError(
            803,
            "cudaErrorSystemDriverMismatch",
            "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            "system has unsupported display driver / cuda driver combination",
        ),
        CudaError(
            804,
            "cudaErrorCompatNotSupportedOnDevice",
            "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            "forward compatibility was attempted on non supported HW",
        ),
        CudaError(999, "cudaErrorUnknown", "CUDA_ERROR_UNKNOWN", "unknown error"),
    )
}
# How programs introduce an error's words: PyTorch "CUDA error: ", cudart users and PyTorch's
# device count "Error 804: ", onnxruntime "CUDA failure 804: ", NCCL "Cuda failure 700 '"
# (older NCCL without the number), the container toolkit's hook "cuda error: ".
_INTRODUCED = r"(?:CUDA error: |Error \d+: |CUDA failure \d+: |Cuda failure (?:\d+ )?')"


def _cuda(
    *numbers: int, introduced: bool = False, detail: bool = False
) -> tuple[re.Pattern[str], ...]:
    """Patterns for CUDA errors by their words and by both enum names, in any case (the
    container toolkit's hook prints them in lower case). Words as general as "unknown error"
    count only `introduced` as a CUDA error."""
    errors = [CUDA_ERRORS[n] for n in numbers]
    words = "|".join(re.escape(e.words) for e in errors)
    names = "|".join(
        re.escape(name) for e in errors for name in (e.runtime_name, e.driver_name) if name
    )
    group = "(?P<detail>" if detail else "(?:"
    said = rf"{_INTRODUCED}{group}{words})" if introduced else rf"{group}{words})"
    return _p(said, rf"\b{group}{names})\b", flags=re.IGNORECASE)


DRIVER_TOO_OLD = "cuda-driver-too-old"
FORWARD_COMPAT_UNSUPPORTED = "forward-compatibility-unsupported"
NVML_UNKNOWN_ERROR = "nvml-unknown-error"
NVML_DRIVER_MISMATCH = "nvml-driver-library-mismatch"
NO_CUDA_DEVICE = "no-cuda-device"
RUNTIME_REQUIREMENT = "runtime-requirement-unsatisfied"
CDI_UNRESOLVABLE = "cdi-device-unresolvable"
DEVICE_PLUGIN_ALLOCATION = "device-plugin-allocation-failed"
CUDA_FAULT_AT_XID = "cuda-fault-at-xid"
FABRIC_NOT_INITIALIZED = "cuda-system-not-ready"
NO_HIP_DEVICE = "no-hip-device"
HIP_ARCH_MISMATCH = "hip-invalid-device-function"
HIP_NO_BINARY = "hip-no-binary-for-gpu"
HSA_MEMORY_FAULT = "hsa-memory-access-fault"
NO_KERNEL_IMAGE = "cuda-no-kernel-image"
GPU_BUSY = "cuda-device-busy"
TOOLKIT_HOOK = "container-toolkit-hook-failed"

# The NVIDIA container toolkit's prestart hook (nvidia-container-cli, `.real` where the GPU
# Operator installs its wrapper) failing before the container starts: libnvidia-container
# prints "<prog>: initialization error: <error>" (src/cli/common.c), the error being NVML's
# ("nvml error: driver not loaded"), a library it could not load ("load library failed:
# libnvidia-container-go.so.1: cannot open shared object file: ..."; xfuncs.h xdlopen) or
# CUDA's; runc reports it as "error running hook #0: ... stderr: ..." and the kubelet puts
# that in the container's StartError or RunContainerError. It comes before any of the
# container's own code runs and whatever the container asked for (the GPU Operator's
# validators get GPUs from the runtime class, not a request): no GPU container can start on
# the node while it lasts.
HOOK_INITIALIZATION = re.compile(
    r"nvidia-container-cli(?:\.real)?: initialization error: (?P<detail>.+?)(?=: unknown\b|\.?$)",
    re.IGNORECASE,
)

SIGNATURES: tuple[Signature, ...] = (
    Signature(
        RUNTIME_REQUIREMENT,
        "the NVIDIA container runtime refused the container: its image needs a newer driver",
        _p(r"requirement error: unsatisfied condition: (?P<detail>[a-z]+ ?[<>=!]+ ?[\w.]+)"),
        "upgrade the driver to one that supports the image's CUDA, or run an image built "
        "for the CUDA this driver supports",
        Action.FIX_CONFIG,
    ),
    Signature(
        CDI_UNRESOLVABLE,
        "the runtime could not resolve the container's CDI device",
        _p(r"unresolvable CDI devices? (?P<detail>[\w.-]+/[\w.-]+=[\w.:-]*\w)"),
        "regenerate the CDI spec for the installed driver (`nvidia-ctk cdi generate "
        "--output=/var/run/cdi/nvidia.yaml`) and restart the pod",
        Action.FIX_CONFIG,
    ),
    Signature(
        DEVICE_PLUGIN_ALLOCATION,
        "the kubelet could not allocate the pod's GPUs from the device plugin",
        _p(
            r"UnexpectedAdmissionError",
            r"Allocate failed due to (?P<detail>.*?nvidia\.com/[\w.-]+.*?), which is unexpected",
        ),
        "check the device plugin's log and health (an unhealthy or lost GPU, a plugin "
        "restart); restarting the kubelet clears stale allocations",
        Action.FIX_CONFIG,
    ),
    Signature(
        FORWARD_COMPAT_UNSUPPORTED,
        "the image's CUDA forward-compatibility libraries do not run on this GPU",
        _cuda(804),
        "upgrade the driver to one that supports the image's CUDA (forward compatibility "
        "runs on data-center GPUs only), or run an image built for this driver's CUDA",
        Action.FIX_CONFIG,
    ),
    Signature(
        FABRIC_NOT_INITIALIZED,
        "CUDA found the GPUs' NVSwitch fabric not initialized (error 802)",
        _cuda(802),
        "start nvidia-fabricmanager at the driver's exact version (`systemctl enable --now "
        "nvidia-fabricmanager`) and wait for the GPUs' fabric registration; then restart the pod",
        Action.FIX_CONFIG,
        needs_gpu=True,
    ),
    Signature(
        DRIVER_TOO_OLD,
        "the driver is older than the CUDA runtime in the image",
        _p(r"The NVIDIA driver on your system is too old \(found version (?P<detail>\d+)\)")
        + _cuda(35, 803),
        "upgrade the driver to one that supports the image's CUDA, or run an image built "
        "for the CUDA this driver supports",
        Action.FIX_CONFIG,
    ),
    Signature(
        NVML_DRIVER_MISMATCH,
        "the container's NVML library and the loaded kernel module differ (a driver "
        "upgraded without a reboot)",
        # nvidia-smi's words; the container toolkit's hook says them in lower case.
        _p(
            r"(?:Failed to initialize NVML|nvml error): Driver/library version mismatch",
            flags=re.IGNORECASE,
        ),
        "reboot the node (or reload the nvidia kernel modules) so the loaded driver is "
        "the installed one",
        Action.REBOOT_NODE,
    ),
    Signature(
        NVML_UNKNOWN_ERROR,
        "the container lost access to its GPUs (NVML cannot open the device nodes)",
        _p(r"Failed to initialize NVML: Unknown Error", flags=re.IGNORECASE),
        "a `systemctl daemon-reload` (or a unit change) made systemd rewrite the container's "
        "device cgroup without the GPU nodes the NVIDIA hook added; create the /dev/char "
        "links (`nvidia-ctk system create-dev-char-symlinks --create-all`, and the udev rule "
        "that redoes it), or inject GPUs with CDI; then restart the pod",
        Action.RESTART_APP,
        needs_gpu=True,
    ),
    Signature(
        NO_CUDA_DEVICE,
        "the container was given GPUs but CUDA sees none",
        _cuda(100) + _p(r"RuntimeError: No CUDA GPUs are available"),
        "check that the pod's runtime class is the NVIDIA runtime (or that CDI is enabled) "
        "and that NVIDIA_VISIBLE_DEVICES is not overridden in the pod spec",
        Action.FIX_CONFIG,
        needs_gpu=True,
    ),
    # ROCm (AMD GPUs): HIP's words as hipGetErrorString gives them, PyTorch's on ROCm, and the
    # HSA runtime's fault report.
    Signature(
        NO_HIP_DEVICE,
        "the container was given AMD GPUs but HIP sees none",
        _p(
            r"\bhipErrorNoDevice\b",
            r"no ROCm-capable device is detected",
            r"RuntimeError: No HIP GPUs are available",
            flags=re.IGNORECASE,
        ),
        "check that the pod asks for amd.com/gpu and that /dev/kfd and its GPUs' "
        "/dev/dri/renderD* reach the container (the AMD device plugin passes them; the node's "
        "toolkit check says whether /dev/kfd exists)",
        Action.FIX_CONFIG,
        needs_gpu=True,
    ),
    Signature(
        HIP_ARCH_MISMATCH,
        "the image's GPU code is not built for this AMD GPU's architecture",
        _p(r"\bhipErrorInvalidDeviceFunction\b", r"HIP error: invalid device function"),
        "run an image built for this GPU's gfx target (gfx942 for MI300X/MI325X, gfx90a for "
        "MI200), or rebuild it with that target in PYTORCH_ROCM_ARCH / --offload-arch",
        Action.FIX_CONFIG,
        needs_gpu=True,
    ),
    Signature(
        HSA_MEMORY_FAULT,
        "the container's GPU work touched memory it does not own (an HSA memory access fault)",
        _p(
            r"Memory access fault by GPU node-\d+ \(Agent handle: 0x[0-9a-fA-F]+\) on address "
            r"0x[0-9a-fA-F]+\. Reason: (?P<detail>[^.]+)"
        ),
        "a bad pointer or a freed buffer in the workload (the node's xid check shows the "
        "matching amdgpu VM fault); fix or restart the workload",
        Action.RESTART_APP,
        needs_gpu=True,
    ),
    Signature(
        HIP_NO_BINARY,
        "the image's HIP code has no code object for this AMD GPU's architecture",
        # HIP's hipErrorNoBinaryForGpu as the runtime aborts with it ("Unable to find code
        # object for all current devices!"; older ROCm: "Coudn't find binary for current
        # devices!", misspelt as it prints it).
        _p(r"\bhipErrorNoBinaryForGpu\b"),
        "run an image built for this GPU's gfx target (gfx942 for MI300X/MI325X, gfx90a for "
        "MI200), or rebuild it with that target in PYTORCH_ROCM_ARCH / --offload-arch",
        Action.FIX_CONFIG,
        needs_gpu=True,
    ),
    Signature(
        NO_KERNEL_IMAGE,
        "the image's CUDA code is not built for its GPU's architecture (no kernel image for "
        "its compute capability)",
        _cuda(209),
        "run an image built for the GPU's compute capability (its sm_XX in "
        "TORCH_CUDA_ARCH_LIST or nvcc's -gencode, or PTX the driver can compile for it), or "
        "keep the pod on GPUs its image supports (a node selector on GPU Feature Discovery's "
        "nvidia.com/gpu.compute.major and .minor labels)",
        Action.FIX_CONFIG,
        needs_gpu=True,
    ),
    Signature(
        GPU_BUSY,
        "CUDA found the container's GPU busy or unavailable (error 46)",
        # Older CUDA says "all CUDA-capable devices are busy or unavailable".
        _cuda(46) + _p(r"all CUDA-capable devices are busy or unavailable", flags=re.IGNORECASE),
        "a GPU in an exclusive compute mode takes one process at a time: set it back to "
        "Default (nvidia-smi -i <gpu> -c DEFAULT) unless MPS owns it; in Default, another "
        "process held the GPU (a second pod given the same GPU, or one outside Kubernetes)",
        Action.FIX_CONFIG,
        needs_gpu=True,
    ),
    Signature(
        TOOLKIT_HOOK,
        "the NVIDIA container toolkit's hook failed before the container started",
        (HOOK_INITIALIZATION,),
        "the node's driver or container toolkit is broken: a driver not loaded (the driver "
        "check says why; with the GPU Operator, its driver pod on this node), the driver's "
        "libraries not where the hook looks (libnvidia-ml.so.1: the driver install, or the "
        "toolkit's driver root), or the toolkit's own library missing "
        "(libnvidia-container-go.so.1: reinstall the container toolkit); then restart the pod",
        Action.FIX_CONFIG,
    ),
    Signature(
        CUDA_FAULT_AT_XID,
        "the container's CUDA work failed at the time of an XID on its GPU",
        _cuda(700, 719, 214, 716, 702, 999, introduced=True, detail=True)
        + _p(r"Cuda failure (?:\d+ )?'(?P<detail>[^']+)'"),
        "see the XID finding on the container's GPU for the GPU's repair; restart the pod "
        "once the GPU is healthy",
        Action.RESTART_APP,
        needs_gpu=True,
    ),
)


@dataclass(frozen=True)
class Match:
    """A signature found in one line."""

    signature: Signature
    line: str
    detail: str | None
    excerpt: str  # the matched text with some context, for a finding's message


# Every pattern at once, without its named groups: one search tells most lines apart (logs
# are long, failures rare) before the signatures are tried one by one.
ANY = re.compile(
    "|".join(
        ("(?i:" if p.flags & re.IGNORECASE else "(?:")
        + re.sub(r"\(\?P<\w+>", "(?:", p.pattern)
        + ")"
        for s in SIGNATURES
        for p in s.patterns
    )
)


def match(line: str) -> Match | None:
    """The first signature this line matches, if any."""
    if ANY.search(line) is None:
        return None
    for signature in SIGNATURES:
        for pattern in signature.patterns:
            found = pattern.search(line)
            if found:
                detail = next((v for v in found.groupdict().values() if v), None)
                start, end = max(0, found.start() - 80), min(len(line), found.end() + 80)
                excerpt = (
                    ("…" if start else "") + line[start:end] + ("…" if end < len(line) else "")
                )
                return Match(signature, line, detail, excerpt.strip())
    return None


def by_cause(cause: str) -> Signature:
    """The signature of a cause."""
    return next(s for s in SIGNATURES if s.cause == cause)


@dataclass(frozen=True)
class PodReason:
    """A failure the kubelet writes into a pod's own status (`status.reason` and
    `status.message`, no container ran): a cause of SIGNATURES, the reasons it comes with, the
    exact messages that make it a GPU failure."""

    cause: str
    reasons: frozenset[str]
    patterns: tuple[re.Pattern[str], ...]
    needs_gpu: bool = False  # counts only in a pod that asks for NVIDIA GPUs


# The kubelet rejects a pod at admission when its resource managers cannot give it what it
# asks for: phase Failed, reason UnexpectedAdmissionError, message "Pod was rejected: " (older
# kubelets: "Pod ") + "Allocate failed due to <the error>, which is unexpected"
# (pkg/kubelet/cm/admission). The CPU and memory managers fail the same way, so only an error
# that names an NVIDIA resource, or a device plugin's failed call in a GPU pod, is a GPU's.
POD_REASONS: tuple[PodReason, ...] = (
    PodReason(
        DEVICE_PLUGIN_ALLOCATION,
        frozenset({"UnexpectedAdmissionError"}),
        _p(r"Allocate failed due to (?P<detail>.*?nvidia\.com/[\w.-]+.*?), which is unexpected"),
    ),
    PodReason(
        DEVICE_PLUGIN_ALLOCATION,
        frozenset({"UnexpectedAdmissionError"}),
        _p(r"Allocate failed due to (?P<detail>(?:device plugin|rpc error).*?), which is"),
        needs_gpu=True,
    ),
)


def match_pod_reason(reason: str | None, message: str, gpu_pod: bool) -> Match | None:
    """The signature of a pod's own status reason and message, if it is a GPU failure."""
    for known in POD_REASONS:
        if reason not in known.reasons or (known.needs_gpu and not gpu_pod):
            continue
        for pattern in known.patterns:
            found = pattern.search(message)
            if found:
                excerpt = message if len(message) <= 300 else message[:300] + "…"
                return Match(by_cause(known.cause), message, found.group("detail"), excerpt)
    return None


def hook_failure(line: str) -> str | None:
    """The error of the NVIDIA container toolkit's hook failing at initialization in this
    line (`nvml error: driver not loaded`), whatever signature the line is; None if it is
    not such a line."""
    found = HOOK_INITIALIZATION.search(line)
    return found.group("detail") if found else None


# PyTorch's warning before its "no kernel image" error names the capabilities its build has:
# "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86
# sm_90." (torch/cuda/__init__.py, _check_capability).
BUILT_FOR = re.compile(r"supports CUDA capabilities (?P<archs>(?:sm_\d+[a-z]?\s*)+)", re.IGNORECASE)

# What to do about the hook's error, by its words (the first that matches).
HOOK_FIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"driver not loaded", re.IGNORECASE),
        "load the NVIDIA driver (the driver check says why it is not loaded; with the GPU "
        "Operator, look at its driver pod on this node), then restart the pods",
    ),
    (
        re.compile(r"driver/library version mismatch", re.IGNORECASE),
        "reboot the node (or reload the nvidia kernel modules) so the loaded driver is the "
        "installed one",
    ),
    (
        re.compile(r"load library failed: libnvidia-container", re.IGNORECASE),
        "reinstall the NVIDIA container toolkit: its own library is missing where its hook "
        "looks (with the GPU Operator, look at its toolkit pod on this node)",
    ),
    (
        re.compile(r"load library failed: lib(?:nvidia-ml|cuda)\.so", re.IGNORECASE),
        "install the driver's user-space libraries where the hook finds them (with a "
        "containerized driver, the toolkit's driver root: `root` under [nvidia-container-cli] "
        "in /etc/nvidia-container-runtime/config.toml)",
    ),
)


def hook_fix(error: str) -> str:
    """The fix for the container toolkit's hook failing with `error`."""
    fix = next((fix for pattern, fix in HOOK_FIXES if pattern.search(error)), None)
    return fix or by_cause(TOOLKIT_HOOK).fix
