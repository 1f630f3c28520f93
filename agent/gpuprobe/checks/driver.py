"""Check `driver`: is the GPU driver there, loaded, consistent, and new enough?

Judges NVML's init outcome and versions, the kernel module's version and the NVIDIA GPUs on
the PCI bus (read by `gpuprobe.gpu.nvidia.driver`), and holds the driver against
the configured minimum and against the CUDA toolkits this node's images need (NVIDIA's
table in `gpuprobe.gpu.cuda`). AMD GPUs on the bus add the amdgpu driver's facts under
`data.amd` (`gpuprobe.checks.amd.rules`); a node with only AMD GPUs is judged on those alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from gpuprobe.checks.amd import rules as amd
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.checks.rules.sections import GPUS, GpusConfig
from gpuprobe.config import Config
from gpuprobe.errors import ConfigError
from gpuprobe.families import Family, text
from gpuprobe.gpu import cuda
from gpuprobe.gpu.amd.node import AmdNode, read_amd
from gpuprobe.gpu.nvidia.driver import (
    DRIVER_ANSWERED,
    DriverStack,
    KernelModule,
    library_versions,
    read_stack,
    read_versions,
)
from gpuprobe.host import Host
from gpuprobe.report import Action, CheckResult, Finding, Severity, Status

NAME = "driver"


class CudaVerdict(TypedDict):
    """Whether the driver runs a required CUDA version (`data.required_cuda[]`)."""

    version: str
    support: str  # cuda.Support's value
    min_driver: str | None


class DriverData(TypedDict):
    """The check's data (docs/checks.md, check `driver`)."""

    driver_version: str | None
    cuda_driver_version: str | None
    nvidia_gpus_on_pci_bus: int
    kernel_module_version: str | None
    kernel_module_type: str | None
    nvml_init_error: str | None
    # Without NVML: the libnvidia-ml versions found.
    library_versions: NotRequired[list[str]]
    # With NVML's driver version:
    nvml_version: NotRequired[Any]  # NVML's answer as given
    cuda_toolkit_max: NotRequired[str | None]
    cuda_toolkit_max_release: NotRequired[str | None]
    required_cuda: NotRequired[list[CudaVerdict]]
    # The GPU vendors whose GPUs this node shows (the bus, a loaded driver, NVML).
    vendors: list[str]
    # With AMD GPUs on the PCI bus: the amdgpu driver's facts.
    amd: NotRequired[amd.AmdDriverData]


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Judge the driver: present, loaded, matching its library, new enough."""
    host = ctx.host
    stack = read_stack(host)
    module = stack.module
    data: DriverData = {
        "driver_version": None,
        "cuda_driver_version": None,
        "nvidia_gpus_on_pci_bus": stack.gpus_on_bus,
        "kernel_module_version": module.version if module else None,
        "kernel_module_type": ("open" if module.open else "proprietary") if module else None,
        "nvml_init_error": stack.init_error,
        "vendors": [backend.vendor for backend in ctx.gpus.backends()],
    }
    node = read_amd(host, ask_library=True)
    if node.gpus:
        data["amd"] = amd.driver_data(node.module, node.gpus, node.rocm_version, node.smi)
        if not stack.seen:
            return _amd_only(node, data)
    if stack.init_error is not None:
        result = _without_nvml(host, config, stack, data)
    else:
        result = _with_nvml(host, config, module, data)
    if node.gpus:
        result.findings.extend(amd.driver_findings(node.module, node.gpus))
        result.summary += f"; {amd.driver_summary(node.module, node.gpus)}"
    return result


def _amd_only(node: AmdNode, data: DriverData) -> CheckResult:
    """A node whose GPUs are all AMD's: the amdgpu driver is its driver."""
    data["driver_version"] = node.module.driver_version
    findings = amd.driver_findings(node.module, node.gpus)
    return CheckResult(NAME, amd.driver_summary(node.module, node.gpus), findings, data)


def _without_nvml(host: Host, config: Config, stack: DriverStack, data: DriverData) -> CheckResult:
    error, module = stack.init_error, stack.module
    expected = config.section(GPUS, GpusConfig).expect
    data["library_versions"] = library_versions(host)
    # DriverNotLoaded says the module is not there, whatever /proc says (a container without
    # /dev/nvidiactl): only the PCI bus can then show GPUs.
    gpus = _gpu_evidence(stack.gpus_on_bus, module if error != "DriverNotLoaded" else None, error)
    if gpus is None:
        return _no_gpu(expected, data)
    if error == "LibraryNotFound":
        where = (
            f"the kernel module {module.version} is loaded but libnvidia-ml.so.1 is missing"
            if module
            else "no driver is installed"
        )
        finding = Finding(
            "DRIVER_NOT_FOUND",
            Severity.CRITICAL,
            f"{gpus} but NVML cannot be loaded: {where}. Install the NVIDIA driver "
            "(in a container: run it with the NVIDIA runtime and NVIDIA_VISIBLE_DEVICES=all)",
            Action.FIX_CONFIG,
        )
        return CheckResult(NAME, "NVIDIA driver not found", [finding], data)
    if error == "DriverNotLoaded":
        finding = Finding(
            "DRIVER_NOT_LOADED",
            Severity.CRITICAL,
            f"{gpus} but the NVIDIA kernel module is not loaded: load it (modprobe nvidia) "
            "and read the kernel log; a kernel upgrade without a driver rebuild is the "
            "usual cause",
            Action.FIX_CONFIG,
        )
        return CheckResult(NAME, "NVIDIA kernel driver not loaded", [finding], data)
    if error == "LibRmVersionMismatch":
        finding = _mismatch(module.version if module else None, data["library_versions"])
        return CheckResult(NAME, "driver kernel module and library differ", [finding], data)
    finding = Finding(
        "NVML_INIT_FAILED",
        Severity.UNKNOWN,
        f"{gpus} but NVML failed to initialise with {error}"
        + (": the agent lacks access to /dev/nvidia*" if error == "NoPermission" else ""),
        Action.FIX_CONFIG if error == "NoPermission" else Action.NONE,
    )
    return CheckResult(NAME, f"NVML failed to initialise ({error})", [finding], data)


def _gpu_evidence(gpus_on_bus: int, module: KernelModule | None, error: str | None) -> str | None:
    """What shows NVIDIA GPUs are on this node, in words; None when nothing does."""
    if gpus_on_bus:
        return f"{gpus_on_bus} NVIDIA GPU{'s' if gpus_on_bus != 1 else ''} on the PCI bus"
    if module is not None:
        return f"the NVIDIA kernel module {module.version} is loaded"
    if error in DRIVER_ANSWERED:
        return f"NVML's {error} shows a loaded NVIDIA driver"
    return None


def _no_gpu(expected: int | None, data: DriverData) -> CheckResult:
    if expected:
        finding = Finding(
            "NO_GPU",
            Severity.CRITICAL,
            f"{expected} GPUs are expected but the PCI bus shows no NVIDIA GPU "
            "(GPUs fallen off the bus, or the agent runs on the wrong node)",
            Action.REBOOT_NODE,
        )
    else:
        finding = Finding(
            "NO_GPU",
            Severity.UNKNOWN,
            "no NVIDIA GPU on the PCI bus: this is not a GPU node",
        )
    return CheckResult(NAME, "no NVIDIA GPU on this node", [finding], data)


def _mismatch(module_version: str | None, library: list[str] | str | None) -> Finding:
    libs = ", ".join(library) if isinstance(library, list) else library
    module_text = f"kernel module {module_version}" if module_version else "the kernel module"
    library_text = f"NVML library {libs}" if libs else "the NVML library"
    return Finding(
        "DRIVER_LIBRARY_MISMATCH",
        Severity.CRITICAL,
        f"{module_text} and {library_text} differ (a driver upgrade without a reboot): "
        "reboot the node to load the new module",
        Action.REBOOT_NODE,
    )


def _with_nvml(
    host: Host, config: Config, module: KernelModule | None, data: DriverData
) -> CheckResult:
    versions = read_versions(host)
    driver = versions.driver
    if driver is None:
        return CheckResult(
            NAME,
            f"NVML cannot tell the driver version ({versions.driver_error})",
            data=data,
            floor=Status.UNKNOWN,
        )
    data["driver_version"] = driver
    data["cuda_driver_version"] = versions.cuda
    data["nvml_version"] = versions.nvml
    findings: list[Finding] = []
    if module is not None and module.version != driver:
        findings.append(_mismatch(module.version, driver))
    try:
        version = cuda.parse_version(driver)
    except ValueError:
        return CheckResult(
            NAME, f"driver {driver}: cannot read its version", findings, data, floor=Status.UNKNOWN
        )
    newest = cuda.newest_supported(version)
    data["cuda_toolkit_max"] = cuda.format_version(newest.version) if newest else None
    data["cuda_toolkit_max_release"] = newest.label if newest else None
    findings += _too_old(config, version, driver, data)
    summary = f"driver {driver}"
    if data["cuda_driver_version"]:
        summary += f", CUDA {data['cuda_driver_version']}"
    if newest:
        summary += f" (runs toolkits up to {newest.label})"
    return CheckResult(NAME, summary, findings, data)


def _too_old(config: Config, version: cuda.Version, driver: str, data: DriverData) -> list[Finding]:
    findings = []
    minimum = config.section(NAME, DriverConfig).min_version
    if minimum and version < cuda.parse_version(minimum):
        findings.append(
            Finding(
                "DRIVER_TOO_OLD",
                Severity.WARNING,
                f"driver {driver} is older than the configured minimum {minimum}: upgrade it",
                Action.FIX_CONFIG,
            )
        )
    verdicts: list[CudaVerdict] = []
    data["required_cuda"] = verdicts
    for wanted in config.section(NAME, DriverConfig).required_cuda:
        finding, verdict = _cuda_verdict(version, driver, wanted, data.get("cuda_driver_version"))
        verdicts.append(verdict)
        if finding:
            findings.append(finding)
    return findings


def _cuda_verdict(
    version: cuda.Version, driver: str, wanted: str, cuda_driver: str | None
) -> tuple[Finding | None, CudaVerdict]:
    toolkit = cuda.parse_version(wanted)
    driver_cuda = cuda.parse_version(cuda_driver) if cuda_driver else None
    support, release = cuda.support(version, toolkit, driver_cuda)
    verdict: CudaVerdict = {
        "version": wanted,
        "support": support.value,
        "min_driver": release.min_driver_text if release else None,
    }
    need = ""
    if release:
        need = f" (CUDA {release.label} needs driver {verdict['min_driver']} or newer)"
    if support is cuda.Support.FULL:
        return None, verdict
    if support is cuda.Support.MINOR_VERSION_COMPATIBILITY:
        message = (
            f"driver {driver} runs CUDA {wanted} applications only under minor-version "
            f"compatibility, without PTX JIT of newer code or newer driver APIs{need}"
        )
        return Finding("DRIVER_TOO_OLD", Severity.WARNING, message, Action.FIX_CONFIG), verdict
    if support is cuda.Support.NONE:
        message = (
            f"driver {driver} cannot run CUDA {wanted} applications; they fail with "
            f"'CUDA driver version is insufficient for CUDA runtime version'{need}. Upgrade "
            "the driver (data-centre GPUs can also use the cuda-compat forward-compatibility "
            "package)"
        )
        return Finding("DRIVER_TOO_OLD", Severity.CRITICAL, message, Action.FIX_CONFIG), verdict
    message = (
        f"CUDA {wanted} is newer than this gpuprobe's driver table and the driver reports "
        f"no CUDA version, so whether driver {driver} runs it is unknown"
    )
    return Finding("DRIVER_TOO_OLD", Severity.UNKNOWN, message, Action.NONE), verdict


def families(data: DriverData) -> Iterator[Family]:
    """`gpuprobe_driver_info` from the check's data."""
    # `data[key] if key in data`, not `.get`: mypy holds an index to the TypedDict's keys.
    version = text(data["driver_version"] if "driver_version" in data else None)
    if version is None:
        return
    info = Family(
        "gpuprobe_driver_info",
        "The NVIDIA driver version and the CUDA version it supports",
        ("driver_version", "cuda_driver_version"),
    )
    cuda_version = data["cuda_driver_version"] if "cuda_driver_version" in data else None
    info.add([version, text(cuda_version) or ""], 1)
    yield info


@dataclass(frozen=True)
class DriverConfig:
    """What the `driver` check holds the node's driver against."""

    # The fleet's minimum driver version, e.g. "550.54.15" (below it: DRIVER_TOO_OLD, WARNING).
    min_version: str | None = None
    # CUDA toolkit versions that images on this node are built with, e.g. ["12.4", "12.8.1"].
    required_cuda: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key, value in [("min_version", self.min_version)] + [
            ("required_cuda", v) for v in self.required_cuda
        ]:
            if value is not None and not re.fullmatch(r"\d+(\.\d+)*", value):
                raise ConfigError(f"{key}: {value!r} is not a version like 550.54.15")


CHECK: Check[DriverData] = Check(
    NAME,
    run,
    section=DriverConfig,
    metrics=families,
    condition="GPUHardwareReady",
    summary_keys={
        "driver_version": None,
        "cuda_driver_version": None,
        "vendors": None,  # whose driver `driver_version` is: the audit's skew per vendor
        "amd": {"amdgpu_version": None, "rocm_version": None},
    },
)
