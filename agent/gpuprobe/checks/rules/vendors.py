"""The vendors' rules, registered: what each GPU vendor's folder (`checks/nvidia/`,
`checks/amd/`) adds to the vendor-neutral checks, looked up by the vendor's name.

The neutral checks ask `RULES` in order (NVIDIA's first, as `gpu.backends.VENDORS` orders the
backends) and show a vendor whose backend has no entry here from the GPU interface alone
(`checks.rules.interface_only`). A vendor's rules may leave a check out (None): it then adds
nothing to that check beyond what the interface shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.checks.amd.cdi import AmdCdi
from gpuprobe.checks.amd.device_plugin import AmdDevicePlugin
from gpuprobe.checks.amd.driver import AmdDriver
from gpuprobe.checks.amd.gpus import AmdGpus
from gpuprobe.checks.amd.toolkit import AmdToolkit
from gpuprobe.checks.amd.workloads import AmdWorkloads
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.nvidia.driver import NvidiaDriver
from gpuprobe.checks.nvidia.gpus import NvidiaGpus
from gpuprobe.checks.rules.vendor_part import (
    CdiRules,
    DevicePluginRules,
    DriverRules,
    GpusRules,
    ToolkitRules,
    WorkloadsRules,
)
from gpuprobe.gpu.backend import Vendor, VendorUses


@dataclass(frozen=True)
class VendorRules:
    """One vendor's parts of the neutral checks."""

    vendor: Vendor
    gpus: GpusRules | None = None
    driver: DriverRules | None = None
    toolkit: ToolkitRules | None = None
    device_plugin: DevicePluginRules | None = None
    cdi: CdiRules | None = None
    workloads: WorkloadsRules | None = None


RULES: tuple[VendorRules, ...] = (
    VendorRules("nvidia", gpus=NvidiaGpus(), driver=NvidiaDriver()),
    VendorRules(
        "amd",
        gpus=AmdGpus(),
        driver=AmdDriver(),
        toolkit=AmdToolkit(),
        device_plugin=AmdDevicePlugin(),
        cdi=AmdCdi(),
        workloads=AmdWorkloads(),
    ),
)


def rules_of(vendor: Vendor) -> VendorRules | None:
    """The vendor's rules; None: it has none."""
    return next((rules for rules in RULES if rules.vendor == vendor), None)


def node_uses(ctx: CheckContext) -> list[VendorUses]:
    """The node's GPUs as workloads get them, vendor by vendor in the backends' order: a
    vendor's rules where they tell more than its backend's `uses()`, else the backend's. Every
    vendor is asked (one the node does not show has no GPUs), sparing whether it shows."""
    found = []
    for backend in ctx.gpus.every_backend():
        rules = rules_of(backend.vendor)
        if rules is not None and rules.workloads is not None:
            found.append(rules.workloads.uses(ctx))
        else:
            found.append(VendorUses(backend.uses()))
    return found
