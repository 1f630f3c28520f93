"""NVIDIA's part of the `driver` check: NVML's init outcome and versions, the kernel module's
version and the NVIDIA GPUs on the PCI bus (read by `gpuprobe.gpu.nvidia.driver`), the driver
held against the configured minimum and against the CUDA toolkits this node's images need
(NVIDIA's table in `gpuprobe.gpu.cuda`).

NVIDIA's facts lead the check's data on every node (on a node without NVIDIA GPUs they say
so), and NVIDIA's judgement is the check's on a node that shows no GPU at all (NO_GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.rules.sections import DRIVER, GPUS, DriverConfig, GpusConfig
from gpuprobe.checks.rules.vendor_part import Part
from gpuprobe.config import Config
from gpuprobe.gpu import cuda
from gpuprobe.gpu.nvidia.driver import (
    DRIVER_ANSWERED,
    DriverStack,
    KernelModule,
    library_versions,
    read_stack,
    read_versions,
)
from gpuprobe.host import Host
from gpuprobe.report import Action, Finding, Severity, Status


class CudaVerdict(TypedDict):
    """Whether the driver runs a required CUDA version (`data.required_cuda[]`)."""

    version: str
    support: str  # cuda.Support's value
    min_driver: str | None


class NvidiaDriver:
    """NVIDIA's rules of the `driver` check (`checks.rules.vendor_part.DriverRules`)."""

    def read(self, ctx: CheckContext) -> NvidiaDriverReading:
        """The bus, the kernel module and NVML's init outcome (asks NVML nothing more)."""
        return NvidiaDriverReading(ctx.host, read_stack(ctx.host))


@dataclass(frozen=True)
class NvidiaDriverReading:
    """NVIDIA's driver stack, read once for the check's run; NVML's versions are asked only
    when it judges."""

    host: Host
    stack: DriverStack

    def facts(self, data: dict[str, Any]) -> None:
        """The stack's facts, the check's leading keys."""
        stack = self.stack
        module = stack.module
        data["driver_version"] = None
        data["cuda_driver_version"] = None
        data["nvidia_gpus_on_pci_bus"] = stack.gpus_on_bus
        data["kernel_module_version"] = module.version if module else None
        data["kernel_module_type"] = ("open" if module.open else "proprietary") if module else None
        data["nvml_init_error"] = stack.init_error

    def judge(self, config: Config, data: dict[str, Any], first: bool) -> Part:
        """Present, loaded, matching its library, new enough; NVIDIA's facts lead the node,
        so its version is the check's `driver_version` wherever it judges."""
        stack = self.stack
        if stack.init_error is not None:
            return _without_nvml(self.host, config, stack, data)
        return _with_nvml(self.host, config, stack.module, data)


def _without_nvml(host: Host, config: Config, stack: DriverStack, data: dict[str, Any]) -> Part:
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
        return Part("NVIDIA driver not found", [finding])
    if error == "DriverNotLoaded":
        finding = Finding(
            "DRIVER_NOT_LOADED",
            Severity.CRITICAL,
            f"{gpus} but the NVIDIA kernel module is not loaded: load it (modprobe nvidia) "
            "and read the kernel log; a kernel upgrade without a driver rebuild is the "
            "usual cause",
            Action.FIX_CONFIG,
        )
        return Part("NVIDIA kernel driver not loaded", [finding])
    if error == "LibRmVersionMismatch":
        finding = _mismatch(module.version if module else None, data["library_versions"])
        return Part("driver kernel module and library differ", [finding])
    finding = Finding(
        "NVML_INIT_FAILED",
        Severity.UNKNOWN,
        f"{gpus} but NVML failed to initialise with {error}"
        + (": the agent lacks access to /dev/nvidia*" if error == "NoPermission" else ""),
        Action.FIX_CONFIG if error == "NoPermission" else Action.NONE,
    )
    return Part(f"NVML failed to initialise ({error})", [finding])


def _gpu_evidence(gpus_on_bus: int, module: KernelModule | None, error: str | None) -> str | None:
    """What shows NVIDIA GPUs are on this node, in words; None when nothing does."""
    if gpus_on_bus:
        return f"{gpus_on_bus} NVIDIA GPU{'s' if gpus_on_bus != 1 else ''} on the PCI bus"
    if module is not None:
        return f"the NVIDIA kernel module {module.version} is loaded"
    if error in DRIVER_ANSWERED:
        return f"NVML's {error} shows a loaded NVIDIA driver"
    return None


def _no_gpu(expected: int | None, data: dict[str, Any]) -> Part:
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
    return Part("no NVIDIA GPU on this node", [finding])


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
    host: Host, config: Config, module: KernelModule | None, data: dict[str, Any]
) -> Part:
    versions = read_versions(host)
    driver = versions.driver
    if driver is None:
        return Part(
            f"NVML cannot tell the driver version ({versions.driver_error})",
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
        return Part(f"driver {driver}: cannot read its version", findings, floor=Status.UNKNOWN)
    newest = cuda.newest_supported(version)
    data["cuda_toolkit_max"] = cuda.format_version(newest.version) if newest else None
    data["cuda_toolkit_max_release"] = newest.label if newest else None
    findings += _too_old(config, version, driver, data)
    summary = f"driver {driver}"
    if data["cuda_driver_version"]:
        summary += f", CUDA {data['cuda_driver_version']}"
    if newest:
        summary += f" (runs toolkits up to {newest.label})"
    return Part(summary, findings)


def _too_old(
    config: Config, version: cuda.Version, driver: str, data: dict[str, Any]
) -> list[Finding]:
    findings = []
    minimum = config.section(DRIVER, DriverConfig).min_version
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
    for wanted in config.section(DRIVER, DriverConfig).required_cuda:
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
