"""How the `driver` and `gpus` checks judge AMD GPUs (the amdgpu driver's sysfs facts).

The same codes as NVIDIA's where the meaning is the same (../CONTRACT turn 3):
DRIVER_NOT_LOADED (GPUs on the bus, no amdgpu), GPU_COUNT_MISMATCH (a GPU the driver did
not take), ECC_UNCORRECTABLE (RAS uncorrectable errors), RETIRED_PAGES_PENDING (bad pages
waiting for the next reservation window), PCIE_LINK_DEGRADED (fewer lanes than the device's
maximum; a lower speed is amdgpu's power saving); and AMD's own: RAS_BAD_PAGES (retired VRAM
pages near or past the driver's retirement threshold), XGMI_LINK_DOWN (a direct neighbour in
the XGMI hive with no link).
"""

from __future__ import annotations

from typing import Any, TypedDict

from gpuprobe.gpu.amd.access import KFD, ContainerAccess
from gpuprobe.gpu.amd.ras import bad_page_threshold
from gpuprobe.gpu.amd.sysfs import AmdGpu, AmdgpuModule
from gpuprobe.host.rocm_smi import SmiProbe
from gpuprobe.report import Action, Finding, Severity

VENDOR = "amd"
# Retired pages at or above this share of the threshold raise RAS_BAD_PAGES as a warning.
BAD_PAGES_WARN_RATIO = 0.9


class AmdGpuIdentity(TypedDict):
    """One AMD GPU in the `driver` check's `data.amd.gpus`."""

    index: int
    vendor: str
    pci_bus_id: str
    name: str
    unique_id: str | None
    driver: str | None


class AmdDriverData(TypedDict):
    """The `driver` check's `data.amd` (docs/checks.md)."""

    vendor: str
    amdgpu_loaded: bool
    amdgpu_version: str | None
    kernel_release: str | None
    rocm_version: str | None
    gpus_on_pci_bus: int
    gpus_seen_by_driver: int
    gpus: list[AmdGpuIdentity]
    smi: dict[str, object]


def driver_data(
    module: AmdgpuModule, gpus: list[AmdGpu], rocm: str | None, smi: SmiProbe
) -> AmdDriverData:
    """The AMD part of the driver check's data."""
    return {
        "vendor": VENDOR,
        "amdgpu_loaded": module.loaded,
        "amdgpu_version": module.version,
        "kernel_release": module.kernel,
        "rocm_version": rocm,
        "gpus_on_pci_bus": len(gpus),
        "gpus_seen_by_driver": sum(g.bound for g in gpus),
        "gpus": [
            {
                "index": g.index,
                "vendor": VENDOR,
                "pci_bus_id": g.pci_address,
                "name": g.name,
                "unique_id": g.unique_id,
                "driver": g.driver,
            }
            for g in gpus
        ],
        "smi": smi.to_dict(),
    }


def driver_findings(module: AmdgpuModule, gpus: list[AmdGpu]) -> list[Finding]:
    """DRIVER_NOT_LOADED when AMD GPUs are on the bus and amdgpu is not loaded."""
    if not gpus or module.loaded:
        return []
    return [
        Finding(
            "DRIVER_NOT_LOADED",
            Severity.CRITICAL,
            f"{len(gpus)} AMD GPU{_s(len(gpus))} on the PCI bus but the amdgpu kernel module is "
            "not loaded: load it (modprobe amdgpu) and read the kernel log; a kernel upgrade "
            "without rebuilding the amdgpu-dkms module is the usual cause",
            Action.FIX_CONFIG,
        )
    ]


def driver_summary(module: AmdgpuModule, gpus: list[AmdGpu]) -> str:
    """The driver check's summary for AMD GPUs."""
    if not module.loaded:
        return "amdgpu kernel driver not loaded"
    version = (
        f"amdgpu {module.version}"
        if module.version
        else (f"amdgpu in-tree (kernel {module.kernel})" if module.kernel else "amdgpu")
    )
    seen = sum(g.bound for g in gpus)
    return f"{version}, driving {seen} of {len(gpus)} AMD GPU{_s(len(gpus))}"


def gpu_facts(gpu: AmdGpu) -> dict[str, Any]:
    """One AMD GPU's entry in the `gpus` check's `data.gpus` (docs/checks.md): the keys the
    NVIDIA entries use where the meaning is the same (so /metrics carries them alike), and
    AMD's own (RAS blocks, bad pages, XGMI)."""
    facts: dict[str, Any] = {
        "index": gpu.index,
        "vendor": VENDOR,
        "uuid": gpu.unique_id or gpu.pci_address,
        "unique_id": gpu.unique_id,
        "name": gpu.name,
        "pci_bus_id": gpu.pci_address,
        "driver": gpu.driver,
    }
    if gpu.card:
        facts["card"] = gpu.card
    optional = {
        "memory_total_bytes": gpu.vram_total_bytes,
        "memory_used_bytes": gpu.vram_used_bytes,
        "utilization_gpu_percent": gpu.busy_percent,
        "pcie_link_width": gpu.pcie.width,
        "pcie_link_width_max": gpu.pcie.max_width,
        "pcie_link_speed_gts": gpu.pcie.speed_gts,
        "pcie_link_speed_max_gts": gpu.pcie.max_speed_gts,
    }
    facts.update({k: v for k, v in optional.items() if v is not None})
    if gpu.temperatures_celsius:
        facts["temperatures_celsius"] = dict(gpu.temperatures_celsius)
        core = gpu.temperatures_celsius.get("edge", gpu.temperatures_celsius.get("junction"))
        if core is not None:
            facts["temperature_celsius"] = core
    if gpu.ras_counts:
        facts["ras_errors"] = {
            c.block: {"uncorrectable": c.uncorrectable, "correctable": c.correctable}
            for c in gpu.ras_counts
        }
        facts["ecc_uncorrected_volatile"] = gpu.uncorrectable_errors
        facts["ecc_corrected_volatile"] = sum(c.correctable for c in gpu.ras_counts)
    if gpu.ras_inaccessible:
        facts["ras_inaccessible"] = list(gpu.ras_inaccessible)
    if gpu.bad_pages is not None:
        facts["bad_pages"] = {
            "retired": gpu.bad_pages.reserved,
            "pending": gpu.bad_pages.pending,
            "failed": gpu.bad_pages.failed,
        }
        facts["retired_pages_pending"] = gpu.bad_pages.pending > 0
    if gpu.xgmi is not None:
        facts["xgmi"] = {
            "hive_id": gpu.xgmi.hive_id,
            "device_id": gpu.xgmi.device_id,
            "physical_id": gpu.xgmi.physical_id,
            "peers": len(gpu.xgmi.peers),
            "links_down_to_nodes": [p.node for p in gpu.xgmi.links_down],
            "errors": gpu.xgmi.errors,
        }
    if gpu.errors:
        facts["sysfs_errors"] = dict(gpu.errors)
    return facts


def count_findings(gpus: list[AmdGpu], module: AmdgpuModule) -> list[Finding]:
    """GPU_COUNT_MISMATCH for each AMD GPU on the bus the loaded amdgpu did not take."""
    if not module.loaded:
        return []  # the driver check's DRIVER_NOT_LOADED says it for all of them
    missing = [g for g in gpus if not g.bound]
    return [
        Finding(
            "GPU_COUNT_MISMATCH",
            Severity.CRITICAL,
            f"AMD GPU {g.index} ({g.pci_address}) is on the PCI bus but amdgpu did not take it "
            f"({'bound to ' + g.driver if g.driver else 'no driver bound'}): its "
            "initialisation failed. Read the kernel log for amdgpu errors, reboot the node, "
            "and inspect the GPU if it stays missing",
            Action.REBOOT_NODE,
            g.resource,
        )
        for g in missing
    ]


def expected_finding(on_bus: int, expected: int) -> Finding:
    """GPU_COUNT_MISMATCH for a node whose GPUs are all AMD's: the bus against `gpus.expect`."""
    if on_bus < expected:
        return Finding(
            "GPU_COUNT_MISMATCH",
            Severity.CRITICAL,
            f"{expected} GPUs are expected but the PCI bus shows {on_bus} AMD GPUs: a GPU has "
            "fallen off the bus or is missing. Reboot the node; inspect it if the GPU stays "
            "missing",
            Action.REBOOT_NODE,
        )
    return Finding(
        "GPU_COUNT_MISMATCH",
        Severity.WARNING,
        f"{expected} GPUs are expected but the PCI bus shows {on_bus} AMD GPUs: correct the "
        "expected count",
        Action.FIX_CONFIG,
    )


def health_findings(gpu: AmdGpu, module: AmdgpuModule) -> list[Finding]:
    """One bound AMD GPU's findings from its RAS, bad pages, PCIe and XGMI facts."""
    if not gpu.bound:
        return []
    where = f"AMD GPU {gpu.index} ({gpu.pci_address})"
    return [
        *_ras(gpu, where),
        *_bad_pages(gpu, module, where),
        *_pcie(gpu, where),
        *_xgmi(gpu, where),
        *_unreadable(gpu, where),
    ]


def _ras(gpu: AmdGpu, where: str) -> list[Finding]:
    blocks = [c for c in gpu.ras_counts if c.uncorrectable]
    if not blocks:
        return []
    total = sum(c.uncorrectable for c in blocks)
    named = ", ".join(f"{c.block} {c.uncorrectable}" for c in blocks)
    return [
        Finding(
            "ECC_UNCORRECTABLE",
            Severity.CRITICAL,
            f"{where} has {total} uncorrectable RAS error{_s(total)} since the driver loaded "
            f"({named}): its memory or on-chip SRAM returned corrupt data. Drain it and reset "
            "the GPU (amdgpu retires the bad VRAM pages at the reset); inspect it if "
            "uncorrectable errors return",
            Action.RESET_GPU,
            gpu.resource,
        )
    ]


def _bad_pages(gpu: AmdGpu, module: AmdgpuModule, where: str) -> list[Finding]:
    pages = gpu.bad_pages
    if pages is None:
        return []
    findings = []
    if pages.pending:
        findings.append(
            Finding(
                "RETIRED_PAGES_PENDING",
                Severity.CRITICAL,
                f"{where} has {pages.pending} bad VRAM page{_s(pages.pending)} waiting to be "
                "retired: drain the GPU and reset it (or reboot) so they are taken out of use",
                Action.RESET_GPU,
                gpu.resource,
            )
        )
    threshold = bad_page_threshold(module.bad_page_threshold, gpu.vram_total_bytes)
    retired = pages.total
    if pages.failed:
        findings.append(
            Finding(
                "RAS_BAD_PAGES",
                Severity.CRITICAL,
                f"{where}: amdgpu could not retire {pages.failed} bad VRAM page"
                f"{_s(pages.failed)} (flag F): corrupt memory stays in use. Take the GPU out "
                "of service and have it inspected",
                Action.HARDWARE_INSPECTION,
                gpu.resource,
            )
        )
    elif threshold and retired >= threshold:
        findings.append(
            Finding(
                "RAS_BAD_PAGES",
                Severity.CRITICAL,
                f"{where} has {retired} retired VRAM pages, at or past amdgpu's threshold of "
                f"{threshold}: AMD's service guide calls for the GPU's replacement"
                + (
                    " (with bad_page_threshold set, amdgpu refuses the GPU at its next load)"
                    if _custom_threshold(module)
                    else ""
                ),
                Action.HARDWARE_INSPECTION,
                gpu.resource,
            )
        )
    elif threshold and retired >= BAD_PAGES_WARN_RATIO * threshold:
        findings.append(
            Finding(
                "RAS_BAD_PAGES",
                Severity.WARNING,
                f"{where} has {retired} retired VRAM pages of amdgpu's threshold of "
                f"{threshold}: plan the GPU's replacement",
                Action.HARDWARE_INSPECTION,
                gpu.resource,
            )
        )
    return findings


def _custom_threshold(module: AmdgpuModule) -> bool:
    """The `bad_page_threshold` parameter is set to a page count (not -1/-2, the defaults)."""
    text = module.bad_page_threshold
    return text is not None and text.strip().isdigit() and int(text) > 0


def _pcie(gpu: AmdGpu, where: str) -> list[Finding]:
    if not gpu.pcie.width_degraded:
        return []
    speed = f" at {gpu.pcie.speed_gts:g} GT/s" if gpu.pcie.speed_gts else ""
    return [
        Finding(
            "PCIE_LINK_DEGRADED",
            Severity.WARNING,
            f"{where}: PCIe link runs x{gpu.pcie.width}{speed} of its x{gpu.pcie.max_width}: "
            "host-to-GPU bandwidth is cut. Reseat the GPU or its riser and check the slot",
            Action.HARDWARE_INSPECTION,
            gpu.resource,
        )
    ]


def _xgmi(gpu: AmdGpu, where: str) -> list[Finding]:
    if gpu.xgmi is None or not gpu.xgmi.links_down:
        return []
    down = gpu.xgmi.links_down
    nodes = ", ".join(str(p.node) for p in down)
    return [
        Finding(
            "XGMI_LINK_DOWN",
            Severity.CRITICAL,
            f"{where}: no XGMI link to {len(down)} direct neighbour{_s(len(down))} in hive "
            f"{gpu.xgmi.hive_id} (at position{_s(len(down))} {nodes} of the hive's topology): "
            "GPU-to-GPU traffic is cut or "
            "routed the long way. Drain the node and reboot it; inspect the board if the link "
            "stays down",
            Action.REBOOT_NODE,
            gpu.resource,
        )
    ]


def _unreadable(gpu: AmdGpu, where: str) -> list[Finding]:
    if not gpu.errors and not gpu.ras_inaccessible:
        return []
    parts = [f"{name} ({reason})" for name, reason in sorted(gpu.errors.items())]
    if gpu.ras_inaccessible:
        parts.append(
            "RAS counts of "
            + ", ".join(gpu.ras_inaccessible)
            + " (the driver says the query is currently inaccessible: a reset in progress?)"
        )
    return [
        Finding(
            "GPU_HEALTH_UNKNOWN",
            Severity.UNKNOWN,
            f"{where}: could not read {'; '.join(parts)}; its health is not known in full",
            Action.NONE,
            gpu.resource,
        )
    ]


def _s(n: int) -> str:
    return "" if n == 1 else "s"


class AmdContainerData(TypedDict):
    """The `toolkit` check's `data.amd` (docs/checks.md): the device nodes ROCm containers
    need and the AMD Container Toolkit's runtime in each engine that names one."""

    kfd: bool
    render_nodes: dict[str, bool]
    runtimes: list[dict[str, object]]


def container_findings(access: ContainerAccess) -> tuple[AmdContainerData, list[Finding]]:
    """What ROCm containers need on the host, judged: `/dev/kfd` and each driven GPU's
    render node (GPU_DEVICE_NODE_MISSING), and where an engine names the AMD Container
    Toolkit's `amd` runtime, its binary (RUNTIME_NOT_CONFIGURED)."""
    kfd, nodes = access.kfd, access.render_nodes
    runtimes: list[dict[str, object]] = []
    findings = []
    for runtime in access.runtimes:
        runtimes.append(
            {"engine": runtime.engine, "binary": runtime.binary, "found": runtime.found}
        )
        if not runtime.found:
            findings.append(
                Finding(
                    "RUNTIME_NOT_CONFIGURED",
                    Severity.CRITICAL,
                    f"{runtime.engine}'s `amd` runtime (AMD Container Toolkit) names "
                    f"{runtime.binary or 'no binary'}, which does not exist: containers run "
                    "with it fail to start. Install amd-container-toolkit, or run amd-ctk "
                    "runtime configure again",
                    Action.FIX_CONFIG,
                    f"file:{runtime.defined_in}",
                )
            )
    driven = access.driven_gpus
    missing = ([] if kfd or not driven else [KFD]) + [n for n, ok in nodes.items() if not ok]
    if missing:
        findings.insert(
            0,
            Finding(
                "GPU_DEVICE_NODE_MISSING",
                Severity.CRITICAL,
                f"{', '.join(missing)} missing on a node with {driven} AMD GPU"
                f"{_s(driven)} amdgpu drives: ROCm containers cannot reach "
                + (
                    "any GPU (no /dev/kfd: amdgpu's KFD did not start; read the kernel log "
                    "for kfd, and check the IOMMU settings)"
                    if KFD in missing
                    else "those GPUs (check udev's DRM rules)"
                ),
                Action.FIX_CONFIG,
            ),
        )
    return {"kfd": kfd, "render_nodes": nodes, "runtimes": runtimes}, findings
