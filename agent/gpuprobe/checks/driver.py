"""Check `driver`: is the GPU driver there, loaded, consistent, and new enough?

Vendor-neutral: each GPU vendor's rules (`checks.rules.vendors`) add their driver's facts
and judge it where the node shows their GPUs or driver. NVIDIA's (`gpuprobe.checks.nvidia.
driver`) judge NVML's init outcome and versions, the kernel module and the driver against the
configured minimum and the CUDA toolkits this node's images need; AMD's (`gpuprobe.checks.amd.
driver`) add the amdgpu driver's facts under `data.amd`; a node with only AMD GPUs is judged
on those alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NotRequired, TypedDict

from gpuprobe.checks.amd import rules as amd
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.nvidia.driver import CudaVerdict
from gpuprobe.checks.record import Check
from gpuprobe.checks.rules import vendors
from gpuprobe.checks.rules.interface_only import driver_part
from gpuprobe.checks.rules.sections import DriverConfig
from gpuprobe.checks.rules.vendor_part import Part, lower_floor
from gpuprobe.config import Config
from gpuprobe.families import Family, text
from gpuprobe.report import CheckResult

__all__ = ["CHECK", "NAME", "CudaVerdict", "DriverConfig", "DriverData", "run"]

NAME = "driver"


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
    """Judge the driver: present, loaded, matching its library, new enough. Each vendor's
    rules (`checks.rules.vendors`) add their facts; the vendors whose GPUs or driver the node
    shows judge theirs, the first one's version being the node's (with none, the first
    vendor's rules say why no GPU shows); a vendor without rules is shown from the GPU
    interface alone."""
    shown = ctx.gpus.backends()
    steps = [(r.vendor, r.driver.read(ctx)) for r in vendors.RULES if r.driver is not None]
    data: dict[str, Any] = {}
    for i, (_, step) in enumerate(steps):
        step.facts(data)
        if i == 0:  # the leading vendor's facts are the data's first keys, as documented
            data["vendors"] = [backend.vendor for backend in shown]
    data.setdefault("vendors", [backend.vendor for backend in shown])
    present = {backend.vendor for backend in shown}
    judges: list[Callable[[bool], Part]] = [
        partial(step.judge, config, data) for vendor, step in steps if vendor in present
    ]
    judges += [
        partial(driver_part, backend, data)
        for backend in shown
        if backend.vendor not in {vendor for vendor, _ in steps}
    ]
    if not judges:
        judges = [partial(step.judge, config, data) for _, step in steps[:1]]
    result = CheckResult(NAME, "", [], data)
    for i, judge in enumerate(judges):
        part = judge(i == 0)
        result.findings.extend(part.findings)
        result.summary = f"{result.summary}; {part.summary}" if i else part.summary
        result.floor = lower_floor(result.floor, part)
    return result


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
